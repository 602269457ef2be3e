package cluster

import (
	"context"
	"maps"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
	"github.com/carousel-dev/carousel/pkg/rotation"
)

// TestUpdateWarnsUnlessTheClusterFollowsTheAdvice: a rotation Prepared for
// longer than the policy allows gets a warning on every update, except one
// of a Cluster that carries an operation acting on it, in any of its forms,
// now or queued for the maintenance window.
func TestUpdateWarnsUnlessTheClusterFollowsTheAdvice(t *testing.T) {
	prepared := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	v := Validator{Recommendations: rotation.RecommendationPolicy{PreparedWarning: 24 * time.Hour},
		Clock: clocktesting.NewFakePassiveClock(prepared.Add(48 * time.Hour))}
	old := &v1alpha1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "edge"}}
	old.Status.Credentials = &v1alpha1.ClusterCredentials{Rotation: &v1alpha1.CredentialsRotation{
		CertificateAuthorities: &v1alpha1.CARotation{Phase: v1alpha1.RotationPrepared, LastInitiationTime: &metav1.Time{Time: prepared.Add(-time.Hour)},
			LastInitiationFinishedTime: &metav1.Time{Time: prepared}, OldCAUsage: &v1alpha1.OldCAUsage{}},
		ServiceAccountKey: &v1alpha1.ServiceAccountKeyRotation{Phase: v1alpha1.ServiceAccountKeyPrepared}}}
	for _, tc := range []struct {
		name        string
		annotations map[string]string // on both the old and the new Cluster
		operation   string            // set by the update; "" for none
		warns       bool
	}{
		{name: "a label changed", warns: true},
		{name: "completing", operation: v1alpha1.OperationCompleteCARotation},
		{name: "completing by force", operation: v1alpha1.OperationCompleteCARotation + v1alpha1.OperationForceSuffix},
		{name: "completing with the service-account key", operation: string(v1alpha1.VerbRotateCredentialsComplete)},
		{name: "aborting", operation: string(v1alpha1.VerbAbortCARotation)},
		{name: "reconciling", operation: string(v1alpha1.VerbReconcile), warns: true},
		{name: "a label changed, completion queued for the window",
			annotations: map[string]string{v1alpha1.MaintenanceOperationAnnotation: v1alpha1.OperationCompleteCARotation}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			oldC := old.DeepCopy()
			oldC.Annotations = maps.Clone(tc.annotations)
			newC := oldC.DeepCopy()
			newC.Labels = map[string]string{"team": "a"}
			if tc.operation != "" {
				newC.Annotations = map[string]string{v1alpha1.OperationAnnotation: tc.operation}
				maps.Copy(newC.Annotations, tc.annotations)
			}
			warnings, err := v.ValidateUpdate(context.Background(), oldC, newC)
			if err != nil {
				t.Fatal(err)
			}
			if warns := len(warnings) > 0; warns != tc.warns {
				t.Fatalf("warnings %q; want one: %t", warnings, tc.warns)
			}
			if tc.warns && !strings.Contains(warnings[0], v1alpha1.OperationCompleteCARotation) {
				t.Errorf("warning %q does not say how to complete the rotation", warnings[0])
			}
		})
	}
}
