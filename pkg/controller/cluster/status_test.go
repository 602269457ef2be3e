package cluster

import (
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
)

// The status write that records an operation also sets the recommendation
// for the phase it enters, so that the passes after it write the status only
// when they change something else: a Cluster with nothing to
// wait for goes from the operation to the end of each phase in two status
// writes, and to the end of an abort in three: the rollback is recorded
// before the new CAs are dropped.
func TestAnOperationsStatusWriteSetsItsPhasesRecommendation(t *testing.T) {
	sc := newSettledCluster(t)
	for _, step := range []struct {
		operation   string
		taken, done v1alpha1.CARotationPhase
		writes      int64 // from taken to done
	}{
		{v1alpha1.OperationStartCARotation, v1alpha1.RotationPreparing, v1alpha1.RotationPrepared, 1},
		{v1alpha1.OperationCompleteCARotation, v1alpha1.RotationFinalizing, v1alpha1.RotationCompleted, 1},
		{v1alpha1.OperationStartCARotation, v1alpha1.RotationPreparing, v1alpha1.RotationPrepared, 1},
		{v1alpha1.OperationAbortCARotation, v1alpha1.RotationAborting, v1alpha1.RotationAborted, 2},
	} {
		sc.annotate(step.operation)
		if got := sc.statusWritesUntil(step.taken); got != 1 {
			t.Fatalf("%s taken up in %d status writes, want 1", step.operation, got)
		}
		want := meta.FindStatusCondition(sc.cluster().Status.Conditions, v1alpha1.ConditionCARotationRecommended)
		if want == nil || want.Message != "nothing is due" {
			t.Errorf("in %s the recommendation is %+v, want nothing due", step.taken, want)
		}
		if got := sc.statusWritesUntil(step.done); got != step.writes {
			t.Errorf("%s: %d status writes from %s to %s, want %d", step.operation, got, step.taken, step.done, step.writes)
		}
	}
}
