package operator

import (
	"strings"
	"testing"
)

func TestOptionsValidate(t *testing.T) {
	for _, tt := range []struct {
		concurrency int
		want        string // substring of the error; empty means valid
	}{
		{1, ""},
		{8, ""},
		{0, "--cluster-concurrency=0: reconcile at least one Cluster at a time"},
		{-2, "--cluster-concurrency=-2"},
	} {
		opts := DefaultOptions()
		opts.ClusterConcurrency = tt.concurrency
		err := opts.Validate()
		if tt.want == "" && err != nil || tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)) {
			t.Errorf("ClusterConcurrency %d: Validate() = %v, want %q", tt.concurrency, err, tt.want)
		}
	}
	if err := DefaultOptions().Validate(); err != nil {
		t.Errorf("the defaults are invalid: %v", err)
	}
}
