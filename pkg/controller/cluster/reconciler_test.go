package cluster

import (
	"testing"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
)

func TestQueuedCompletion(t *testing.T) {
	for _, tt := range []struct {
		queued    string
		completes bool
		keep      string
	}{
		{v1alpha1.OperationCompleteCARotation, true, ""},
		{v1alpha1.OperationCompleteCARotation + v1alpha1.OperationForceSuffix, true, ""},
		{string(v1alpha1.VerbRotateCredentialsComplete), true, string(v1alpha1.VerbRotateServiceAccountKeyComplete)},
		{string(v1alpha1.VerbRotateServiceAccountKeyComplete), false, ""},
		{v1alpha1.OperationStartCARotation, false, ""},
		{"", false, ""},
	} {
		if completes, keep := queuedCompletion(tt.queued); completes != tt.completes || keep != tt.keep {
			t.Errorf("queuedCompletion(%q) = %v, %q; want %v, %q", tt.queued, completes, keep, tt.completes, tt.keep)
		}
	}
}
