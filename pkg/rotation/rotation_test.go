package rotation

import (
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
	"github.com/carousel-dev/carousel/pkg/credentials"
)

var (
	t0 = metav1.NewTime(time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC))
	t1 = metav1.NewTime(t0.Add(time.Hour))
	// tEarlier is before t0, t0next the second after it.
	tEarlier = metav1.NewTime(t0.Add(-time.Hour))
	t0next   = metav1.NewTime(t0.Add(time.Second))
	pools    = []v1alpha1.WorkerPool{{Name: "a"}, {Name: "b"}}
)

// held returns pending pools, held.
func held(names ...string) []v1alpha1.PendingWorkersRollout {
	out := pending(names...)
	for i := range out {
		out[i].Held = true
	}
	return out
}

func pending(names ...string) []v1alpha1.PendingWorkersRollout {
	var out []v1alpha1.PendingWorkersRollout
	for _, n := range names {
		out = append(out, v1alpha1.PendingWorkersRollout{Name: n, LastInitiationTime: &t0})
	}
	return out
}

func TestApplyOperation(t *testing.T) {
	tests := []struct {
		name    string
		rot     *v1alpha1.CARotation
		op      v1alpha1.Operation
		want    *v1alpha1.CARotation
		wantErr bool
	}{
		{"start, never rotated", nil, v1alpha1.Operation{Verb: v1alpha1.VerbStartCARotation},
			&v1alpha1.CARotation{Phase: v1alpha1.RotationPreparing, LastInitiationTime: &t0, PendingWorkersRollouts: pending("a", "b")}, false},
		{"start after Completed keeps the last completion and clears the last finish",
			&v1alpha1.CARotation{Phase: v1alpha1.RotationCompleted, LastInitiationTime: &tEarlier, LastInitiationFinishedTime: &t1, LastCompletionTime: &t1},
			v1alpha1.Operation{Verb: v1alpha1.VerbStartCARotation},
			&v1alpha1.CARotation{Phase: v1alpha1.RotationPreparing, LastInitiationTime: &t0, LastCompletionTime: &t1, PendingWorkersRollouts: pending("a", "b")}, false},
		{"start in the second the last one started: the next second identifies it",
			&v1alpha1.CARotation{Phase: v1alpha1.RotationCompleted, LastInitiationTime: &t0, LastInitiationFinishedTime: &t0, LastCompletionTime: &t0},
			v1alpha1.Operation{Verb: v1alpha1.VerbStartCARotation},
			&v1alpha1.CARotation{Phase: v1alpha1.RotationPreparing, LastInitiationTime: &t0next, LastCompletionTime: &t0, PendingWorkersRollouts: []v1alpha1.PendingWorkersRollout{
				{Name: "a", LastInitiationTime: &t0next}, {Name: "b", LastInitiationTime: &t0next}}}, false},
		{"start while Prepared", &v1alpha1.CARotation{Phase: v1alpha1.RotationPrepared}, v1alpha1.Operation{Verb: v1alpha1.VerbStartCARotation}, nil, true},
		{"complete from Prepared, pools pending again",
			&v1alpha1.CARotation{Phase: v1alpha1.RotationPrepared, LastInitiationTime: &t0, LastInitiationFinishedTime: &t1},
			v1alpha1.Operation{Verb: v1alpha1.VerbCompleteCARotation},
			&v1alpha1.CARotation{Phase: v1alpha1.RotationFinalizing, LastInitiationTime: &t0, LastInitiationFinishedTime: &t1, LastCompletionTriggeredTime: &t0, PendingWorkersRollouts: pending("a", "b")}, false},
		{"complete while Preparing", &v1alpha1.CARotation{Phase: v1alpha1.RotationPreparing}, v1alpha1.Operation{Verb: v1alpha1.VerbCompleteCARotation}, nil, true},
		{"complete, never rotated", nil, v1alpha1.Operation{Verb: v1alpha1.VerbCompleteCARotation}, nil, true},
		{"rollout of a pending pool",
			&v1alpha1.CARotation{Phase: v1alpha1.RotationPreparing, PendingWorkersRollouts: pending("a", "b")},
			v1alpha1.Operation{Verb: v1alpha1.VerbRolloutWorkers, Pools: []string{"b"}},
			&v1alpha1.CARotation{Phase: v1alpha1.RotationPreparing, PendingWorkersRollouts: pending("a"), PoolsRolledByHand: []string{"b"}}, false},
		{"rollout of another pending pool adds it to those rolled by hand",
			&v1alpha1.CARotation{Phase: v1alpha1.RotationPreparing, PendingWorkersRollouts: pending("a"), PoolsRolledByHand: []string{"b"}},
			v1alpha1.Operation{Verb: v1alpha1.VerbRolloutWorkers, Pools: []string{"a"}},
			&v1alpha1.CARotation{Phase: v1alpha1.RotationPreparing, PoolsRolledByHand: []string{"b", "a"}}, false},
		{"rollout in Finalizing of a pool rolled by hand in Preparing records it once",
			&v1alpha1.CARotation{Phase: v1alpha1.RotationFinalizing, PendingWorkersRollouts: pending("a", "b"), PoolsRolledByHand: []string{"b"}},
			v1alpha1.Operation{Verb: v1alpha1.VerbRolloutWorkers, Pools: []string{"b"}},
			&v1alpha1.CARotation{Phase: v1alpha1.RotationFinalizing, PendingWorkersRollouts: pending("a"), PoolsRolledByHand: []string{"b"}}, false},
		{"start forgets the pools the last rotation rolled by hand",
			&v1alpha1.CARotation{Phase: v1alpha1.RotationCompleted, LastInitiationTime: &tEarlier, PoolsRolledByHand: []string{"b"}},
			v1alpha1.Operation{Verb: v1alpha1.VerbStartCARotation},
			&v1alpha1.CARotation{Phase: v1alpha1.RotationPreparing, LastInitiationTime: &t0, PendingWorkersRollouts: pending("a", "b")}, false},
		{"rollout of a pool not pending",
			&v1alpha1.CARotation{Phase: v1alpha1.RotationPreparing, PendingWorkersRollouts: pending("a")},
			v1alpha1.Operation{Verb: v1alpha1.VerbRolloutWorkers, Pools: []string{"a", "b"}}, nil, true},
		{"start without workers rollout holds every pool", nil, v1alpha1.Operation{Verb: v1alpha1.VerbStartCARotationWithoutWorkersRollout},
			&v1alpha1.CARotation{Phase: v1alpha1.RotationPreparingWithoutWorkersRollout, LastInitiationTime: &t0, PendingWorkersRollouts: held("a", "b")}, false},
		{"rotate-rollout-workers releases the named pools and prepares them",
			&v1alpha1.CARotation{Phase: v1alpha1.RotationWaitingForWorkersRollout, LastInitiationTime: &t0, PendingWorkersRollouts: held("a", "b")},
			v1alpha1.Operation{Verb: v1alpha1.VerbRotateRolloutWorkers, Pools: []string{"b"}},
			&v1alpha1.CARotation{Phase: v1alpha1.RotationPreparing, LastInitiationTime: &t0, PendingWorkersRollouts: append(held("a"), pending("b")...)}, false},
		{"rotate-rollout-workers while the control plane prepares",
			&v1alpha1.CARotation{Phase: v1alpha1.RotationPreparingWithoutWorkersRollout, PendingWorkersRollouts: held("a", "b")},
			v1alpha1.Operation{Verb: v1alpha1.VerbRotateRolloutWorkers, Pools: []string{"a", "b"}},
			&v1alpha1.CARotation{Phase: v1alpha1.RotationPreparing, PendingWorkersRollouts: pending("a", "b")}, false},
		{"rotate-rollout-workers of a released pool",
			&v1alpha1.CARotation{Phase: v1alpha1.RotationWaitingForWorkersRollout, PendingWorkersRollouts: append(held("a"), pending("b")...)},
			v1alpha1.Operation{Verb: v1alpha1.VerbRotateRolloutWorkers, Pools: []string{"b"}}, nil, true},
		{"rotate-rollout-workers in Preparing, of the pool still held after another was released",
			&v1alpha1.CARotation{Phase: v1alpha1.RotationPreparing, PendingWorkersRollouts: append(held("a"), pending("b")...)},
			v1alpha1.Operation{Verb: v1alpha1.VerbRotateRolloutWorkers, Pools: []string{"a"}},
			&v1alpha1.CARotation{Phase: v1alpha1.RotationPreparing, PendingWorkersRollouts: pending("a", "b")}, false},
		{"rotate-rollout-workers in Preparing with no pool held",
			&v1alpha1.CARotation{Phase: v1alpha1.RotationPreparing, PendingWorkersRollouts: pending("a")},
			v1alpha1.Operation{Verb: v1alpha1.VerbRotateRolloutWorkers, Pools: []string{"a"}}, nil, true},
		{"rotate-rollout-workers naming no pool",
			&v1alpha1.CARotation{Phase: v1alpha1.RotationWaitingForWorkersRollout, PendingWorkersRollouts: held("a")},
			v1alpha1.Operation{Verb: v1alpha1.VerbRotateRolloutWorkers}, nil, true},
		{"rollout-workers reports a held pool rolled by hand",
			&v1alpha1.CARotation{Phase: v1alpha1.RotationWaitingForWorkersRollout, PendingWorkersRollouts: held("a", "b")},
			v1alpha1.Operation{Verb: v1alpha1.VerbRolloutWorkers, Pools: []string{"a"}},
			&v1alpha1.CARotation{Phase: v1alpha1.RotationWaitingForWorkersRollout, PendingWorkersRollouts: held("b"), PoolsRolledByHand: []string{"a"}}, false},
		{"complete while pools are held", &v1alpha1.CARotation{Phase: v1alpha1.RotationWaitingForWorkersRollout, PendingWorkersRollouts: held("a")},
			v1alpha1.Operation{Verb: v1alpha1.VerbCompleteCARotation}, nil, true},
		{"abort in Prepared rolls every pool back",
			&v1alpha1.CARotation{Phase: v1alpha1.RotationPrepared, LastInitiationTime: &t0, LastInitiationFinishedTime: &t1, KubeRootCAPublishedTime: &t1},
			v1alpha1.Operation{Verb: v1alpha1.VerbAbortCARotation},
			&v1alpha1.CARotation{Phase: v1alpha1.RotationAborting, LastInitiationTime: &t0, LastInitiationFinishedTime: &t1, LastAbortTriggeredTime: &t0,
				PendingWorkersRollouts: pending("a", "b")}, false},
		{"abort in Preparing rolls back the pools rolling or rolled",
			&v1alpha1.CARotation{Phase: v1alpha1.RotationPreparing, LastInitiationTime: &t0, PendingWorkersRollouts: pending("b")},
			v1alpha1.Operation{Verb: v1alpha1.VerbAbortCARotation},
			&v1alpha1.CARotation{Phase: v1alpha1.RotationAborting, LastInitiationTime: &t0, LastAbortTriggeredTime: &t0, PendingWorkersRollouts: pending("a", "b")}, false},
		{"abort rolls back a held pool too: its kubelets may have renewed from the new client CA",
			&v1alpha1.CARotation{Phase: v1alpha1.RotationWaitingForWorkersRollout, LastInitiationTime: &t0, PendingWorkersRollouts: held("b")},
			v1alpha1.Operation{Verb: v1alpha1.VerbAbortCARotation},
			&v1alpha1.CARotation{Phase: v1alpha1.RotationAborting, LastInitiationTime: &t0, LastAbortTriggeredTime: &t0, PendingWorkersRollouts: pending("a", "b")}, false},
		{"abort of a hand-written status without a start time",
			&v1alpha1.CARotation{Phase: v1alpha1.RotationPrepared},
			v1alpha1.Operation{Verb: v1alpha1.VerbAbortCARotation},
			&v1alpha1.CARotation{Phase: v1alpha1.RotationAborting, LastAbortTriggeredTime: &t0, PendingWorkersRollouts: pending("a", "b")}, false},
		{"abort in Finalizing: the old CAs are on their way out", &v1alpha1.CARotation{Phase: v1alpha1.RotationFinalizing},
			v1alpha1.Operation{Verb: v1alpha1.VerbAbortCARotation}, nil, true},
		{"abort when Completed", &v1alpha1.CARotation{Phase: v1alpha1.RotationCompleted}, v1alpha1.Operation{Verb: v1alpha1.VerbAbortCARotation}, nil, true},
		{"abort twice", &v1alpha1.CARotation{Phase: v1alpha1.RotationAborting}, v1alpha1.Operation{Verb: v1alpha1.VerbAbortCARotation}, nil, true},
		{"abort forced in Prepared: it will not wait for kubeconfig holders",
			&v1alpha1.CARotation{Phase: v1alpha1.RotationPrepared, LastInitiationTime: &t0},
			v1alpha1.Operation{Verb: v1alpha1.VerbAbortCARotation, Force: true},
			&v1alpha1.CARotation{Phase: v1alpha1.RotationAborting, LastInitiationTime: &t0, LastAbortTriggeredTime: &t0, AbortForcedTime: &t0,
				PendingWorkersRollouts: pending("a", "b")}, false},
		{"abort forced while Aborting stops its wait, and changes nothing else",
			&v1alpha1.CARotation{Phase: v1alpha1.RotationAborting, LastInitiationTime: &tEarlier, LastAbortTriggeredTime: &tEarlier, PendingWorkersRollouts: pending("b")},
			v1alpha1.Operation{Verb: v1alpha1.VerbAbortCARotation, Force: true},
			&v1alpha1.CARotation{Phase: v1alpha1.RotationAborting, LastInitiationTime: &tEarlier, LastAbortTriggeredTime: &tEarlier, AbortForcedTime: &t0,
				PendingWorkersRollouts: pending("b")}, false},
		{"abort forced when Aborted", &v1alpha1.CARotation{Phase: v1alpha1.RotationAborted}, v1alpha1.Operation{Verb: v1alpha1.VerbAbortCARotation, Force: true}, nil, true},
		{"a start forgets the last abort's force",
			&v1alpha1.CARotation{Phase: v1alpha1.RotationAborted, LastAbortTriggeredTime: &tEarlier, AbortForcedTime: &tEarlier, AbortRolledBackTime: &tEarlier},
			v1alpha1.Operation{Verb: v1alpha1.VerbStartCARotation},
			&v1alpha1.CARotation{Phase: v1alpha1.RotationPreparing, LastInitiationTime: &t0, LastAbortTriggeredTime: &tEarlier, PendingWorkersRollouts: pending("a", "b")}, false},
		{"abort, never rotated", nil, v1alpha1.Operation{Verb: v1alpha1.VerbAbortCARotation}, nil, true},
		{"start after an abort",
			&v1alpha1.CARotation{Phase: v1alpha1.RotationAborted, LastInitiationTime: &tEarlier, LastAbortTriggeredTime: &tEarlier, LastAbortTime: &tEarlier},
			v1alpha1.Operation{Verb: v1alpha1.VerbStartCARotation},
			&v1alpha1.CARotation{Phase: v1alpha1.RotationPreparing, LastInitiationTime: &t0, LastAbortTriggeredTime: &tEarlier, LastAbortTime: &tEarlier,
				PendingWorkersRollouts: pending("a", "b")}, false},
		{"complete while Aborting", &v1alpha1.CARotation{Phase: v1alpha1.RotationAborting}, v1alpha1.Operation{Verb: v1alpha1.VerbCompleteCARotation}, nil, true},
		{"reconcile changes nothing", &v1alpha1.CARotation{Phase: v1alpha1.RotationPrepared}, v1alpha1.Operation{Verb: v1alpha1.VerbReconcile},
			&v1alpha1.CARotation{Phase: v1alpha1.RotationPrepared}, false},
		{"reconcile on a cluster never rotated records nothing", nil, v1alpha1.Operation{Verb: v1alpha1.VerbReconcile}, nil, false},
		{"unknown verb", nil, v1alpha1.Operation{Verb: "rotate"}, nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var before *v1alpha1.CARotation
			if tt.rot != nil {
				before = tt.rot.DeepCopy()
			}
			got, err := ApplyOperation(tt.rot, tt.op, pools, t0)
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tt.wantErr)
			}
			if tt.rot != nil && !equalRotation(tt.rot, before) {
				t.Fatal("ApplyOperation modified its input")
			}
			if !tt.wantErr && !equalRotation(got, tt.want) {
				t.Fatalf("got  %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

func equalRotation(a, b *v1alpha1.CARotation) bool { return equality.Semantic.DeepEqual(a, b) }

func TestAlreadyApplied(t *testing.T) {
	tests := []struct {
		name string
		rot  *v1alpha1.CARotation
		op   string
		want bool
	}{
		{"start, status not yet written", nil, v1alpha1.OperationStartCARotation, false},
		{"start after Completed", &v1alpha1.CARotation{Phase: v1alpha1.RotationCompleted}, v1alpha1.OperationStartCARotation, false},
		{"start, Preparing written before a crash", &v1alpha1.CARotation{Phase: v1alpha1.RotationPreparing}, v1alpha1.OperationStartCARotation, true},
		{"complete, Prepared", &v1alpha1.CARotation{Phase: v1alpha1.RotationPrepared}, v1alpha1.OperationCompleteCARotation, false},
		{"complete, Finalizing written before a crash", &v1alpha1.CARotation{Phase: v1alpha1.RotationFinalizing}, v1alpha1.OperationCompleteCARotation, true},
		{"abort, Prepared", &v1alpha1.CARotation{Phase: v1alpha1.RotationPrepared}, v1alpha1.OperationAbortCARotation, false},
		{"abort, Aborting written before a crash", &v1alpha1.CARotation{Phase: v1alpha1.RotationAborting}, v1alpha1.OperationAbortCARotation, true},
		{"forced abort, Aborting not forced yet", &v1alpha1.CARotation{Phase: v1alpha1.RotationAborting}, "abort-ca-rotation=force", false},
		{"forced abort, forced before a crash", &v1alpha1.CARotation{Phase: v1alpha1.RotationAborting, AbortForcedTime: &t0}, "abort-ca-rotation=force", true},
		{"forced abort, the abort over before the force was taken up", &v1alpha1.CARotation{Phase: v1alpha1.RotationAborted}, "abort-ca-rotation=force", true},
		{"abort, Aborted: refused, not taken for applied", &v1alpha1.CARotation{Phase: v1alpha1.RotationAborted}, v1alpha1.OperationAbortCARotation, false},
		{"rollout, pool still pending", &v1alpha1.CARotation{Phase: v1alpha1.RotationPreparing, PendingWorkersRollouts: pending("a")}, "rollout-workers=a", false},
		{"rollout, pool already removed", &v1alpha1.CARotation{Phase: v1alpha1.RotationPreparing, PendingWorkersRollouts: pending("b")}, "rollout-workers=a", true},
		{"reconcile is never recorded", &v1alpha1.CARotation{Phase: v1alpha1.RotationPreparing}, v1alpha1.OperationReconcile, false},
		{"start without workers rollout, written before a crash", &v1alpha1.CARotation{Phase: v1alpha1.RotationPreparingWithoutWorkersRollout},
			v1alpha1.OperationStartCARotationWithoutWorkersRollout, true},
		{"start without workers rollout is not a start", &v1alpha1.CARotation{Phase: v1alpha1.RotationPreparing},
			v1alpha1.OperationStartCARotationWithoutWorkersRollout, false},
		{"rotate-rollout-workers, pool still held", &v1alpha1.CARotation{Phase: v1alpha1.RotationWaitingForWorkersRollout, PendingWorkersRollouts: held("a")},
			"rotate-rollout-workers=a", false},
		{"rotate-rollout-workers, pool released before a crash", &v1alpha1.CARotation{Phase: v1alpha1.RotationPreparing, PendingWorkersRollouts: pending("a")},
			"rotate-rollout-workers=a", true},
		{"rotate-rollout-workers, pool released and rolled since", &v1alpha1.CARotation{Phase: v1alpha1.RotationWaitingForWorkersRollout, PendingWorkersRollouts: held("b")},
			"rotate-rollout-workers=a", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			op, err := v1alpha1.ParseOperation(tt.op)
			if err != nil {
				t.Fatal(err)
			}
			if got := AlreadyApplied(tt.rot, op); got != tt.want {
				t.Fatalf("AlreadyApplied = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestIssuer(t *testing.T) {
	tests := []struct {
		name                              string
		renewIn                           credentials.RenewalPhase
		phase                             v1alpha1.CARotationPhase
		trustEstablished, signedByCurrent bool
		want                              Generation
	}{
		{"never rotated", credentials.RenewInPreparing, "", false, false, Current},
		{"completed", credentials.RenewInFinalizing, v1alpha1.RotationCompleted, false, false, Current},
		{"client waits for trust in Preparing", credentials.RenewInPreparing, v1alpha1.RotationPreparing, false, false, Previous},
		{"client moves once trust is established", credentials.RenewInPreparing, v1alpha1.RotationPreparing, true, false, Current},
		{"client on the new CA stays there", credentials.RenewInPreparing, v1alpha1.RotationPreparing, false, true, Current},
		{"server stays on the old CA in Preparing", credentials.RenewInFinalizing, v1alpha1.RotationPreparing, true, false, Previous},
		{"server stays on the old CA in Prepared", credentials.RenewInFinalizing, v1alpha1.RotationPrepared, true, false, Previous},
		{"client stays on the new CA in Prepared", credentials.RenewInPreparing, v1alpha1.RotationPrepared, true, true, Current},
		{"server moves in Finalizing", credentials.RenewInFinalizing, v1alpha1.RotationFinalizing, false, false, Current},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Issuer(tt.renewIn, tt.phase, tt.trustEstablished, tt.signedByCurrent); got != tt.want {
				t.Fatalf("Issuer = %s, want %s", got, tt.want)
			}
		})
	}
}

// next is Decide's phase, and what the phase of f still waits for: nil
// when Decide moves on (TestDecideWaitsForTheNewPhase checks the new wait).
func next(f Facts) (v1alpha1.CARotationPhase, *Wait) {
	d := Decide(f)
	if d.Phase != f.Phase {
		return d.Phase, nil
	}
	return d.Phase, d.Wait
}

func TestDecideWaitsForTheNewPhase(t *testing.T) {
	prepared := Decide(Facts{Phase: v1alpha1.RotationPreparing, NewCAsPersisted: true, ClientsOnNewCA: true, ConsumersRolledOut: true, Evidence: EvidencePassed, KubeRootCA: EvidencePassed, APIServices: EvidencePassed})
	if prepared.Phase != v1alpha1.RotationPrepared || prepared.Wait == nil || prepared.Wait.Reason != v1alpha1.ReasonWaitingForCompletion {
		t.Fatalf("Decide at the end of Preparing = %+v; want Prepared waiting for the complete operation", prepared)
	}
	completed := Decide(Facts{Phase: v1alpha1.RotationFinalizing, NewCAsPersisted: true, OldCAsRemoved: true, ClientsOnNewCA: true, AllOnNewCA: true,
		ConsumersRolledOut: true, Evidence: EvidencePassed, KubeRootCA: EvidencePassed, APIServices: EvidencePassed})
	if completed.Phase != v1alpha1.RotationCompleted || completed.Wait != nil || completed.DropOldCAs {
		t.Fatalf("Decide at the end of Finalizing = %+v; want Completed with nothing to wait for", completed)
	}
}

func TestDecideWithHeldPools(t *testing.T) {
	controlPlanePrepared := Facts{NewCAsPersisted: true, ClientsOnNewCA: true, ConsumersRolledOut: true,
		Evidence: EvidencePassed, KubeRootCA: EvidencePassed, APIServices: EvidencePassed}
	tests := []struct {
		name       string
		phase      v1alpha1.CARotationPhase
		held       []string
		pending    int
		want       v1alpha1.CARotationPhase
		wantReason v1alpha1.RotationReason
		wantSays   string
	}{
		{"the control plane is prepared, pools held", v1alpha1.RotationPreparingWithoutWorkersRollout, []string{"a", "b"}, 0,
			v1alpha1.RotationWaitingForWorkersRollout, v1alpha1.ReasonWaitingForWorkersRolloutOperation,
			"everything but the held worker pools is prepared; 2 pool(s) held: a, b; roll them with carousel.dev/operation=rotate-rollout-workers=<pool>[,<pool>]"},
		{"a cluster without pools", v1alpha1.RotationPreparingWithoutWorkersRollout, nil, 0, v1alpha1.RotationPrepared, v1alpha1.ReasonWaitingForCompletion, ""},
		{"a released pool rolls while another is held", v1alpha1.RotationPreparing, []string{"a"}, 1,
			v1alpha1.RotationPreparing, v1alpha1.ReasonWaitingForWorkers, "1 worker pool(s) still to roll"},
		{"the released pool rolled, another is held", v1alpha1.RotationPreparing, []string{"a"}, 0,
			v1alpha1.RotationWaitingForWorkersRollout, v1alpha1.ReasonWaitingForWorkersRolloutOperation, "1 pool(s) held: a"},
		{"the last held pool rolled", v1alpha1.RotationPreparing, nil, 0, v1alpha1.RotationPrepared, v1alpha1.ReasonWaitingForCompletion, ""},
		{"waiting for the user", v1alpha1.RotationWaitingForWorkersRollout, []string{"b"}, 0,
			v1alpha1.RotationWaitingForWorkersRollout, v1alpha1.ReasonWaitingForWorkersRolloutOperation, "1 pool(s) held: b"},
		{"the held pools were reported rolled by hand", v1alpha1.RotationWaitingForWorkersRollout, nil, 0, v1alpha1.RotationPrepared, v1alpha1.ReasonWaitingForCompletion, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := controlPlanePrepared
			f.Phase, f.HeldWorkerPools, f.PendingWorkerPools = tt.phase, tt.held, tt.pending
			d := Decide(f)
			if d.Phase != tt.want || d.Wait == nil || d.Wait.Reason != tt.wantReason || !strings.Contains(d.Wait.Message, tt.wantSays) {
				t.Fatalf("Decide = %s waiting %+v; want %s waiting %s (%q)", d.Phase, d.Wait, tt.want, tt.wantReason, tt.wantSays)
			}
		})
	}
}

func TestEvidenceDue(t *testing.T) {
	preparing := Facts{Phase: v1alpha1.RotationPreparing, NewCAsPersisted: true, ClientsOnNewCA: true, ConsumersRolledOut: true, Evidence: EvidencePending}
	finalizing := Facts{Phase: v1alpha1.RotationFinalizing, OldCAsRemoved: true, AllOnNewCA: true, ConsumersRolledOut: true, Evidence: EvidencePending}
	with := func(f Facts, mutate func(*Facts)) Facts { mutate(&f); return f }
	tests := []struct {
		name  string
		facts Facts
		want  EvidenceCheck
	}{
		{"Preparing with every other step done", preparing, CheckNewClientAccepted},
		{"evidence not gathered yet is due", with(preparing, func(f *Facts) { f.Evidence = "" }), CheckNewClientAccepted},
		{"Preparing with a pool pending", with(preparing, func(f *Facts) { f.PendingWorkerPools = 1 }), CheckNone},
		{"Preparing with clients on the old CA", with(preparing, func(f *Facts) { f.ClientsOnNewCA = false }), CheckNone},
		{"Finalizing with every other step done", finalizing, CheckOldCADropped},
		{"Finalizing before the old CAs are dropped", with(finalizing, func(f *Facts) { f.OldCAsRemoved = false }), CheckNone},
		{"Preparing once the API server passed", with(preparing, func(f *Facts) { f.Evidence = EvidencePassed }), CheckKubeRootCA},
		{"Finalizing once the API server passed", with(finalizing, func(f *Facts) { f.Evidence = EvidencePassed }), CheckKubeRootCA},
		{"Preparing once kube-root-ca.crt passed", with(preparing, func(f *Facts) { f.Evidence, f.KubeRootCA = EvidencePassed, EvidencePassed }), CheckAPIServices},
		{"Preparing with every check passed", with(preparing, func(f *Facts) {
			f.Evidence, f.KubeRootCA, f.APIServices = EvidencePassed, EvidencePassed, EvidencePassed
		}),
			CheckNone},
		{"Prepared", Facts{Phase: v1alpha1.RotationPrepared}, CheckNone},
		{"never rotated", Facts{}, CheckNone},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := EvidenceDue(tt.facts); got != tt.want {
				t.Fatalf("EvidenceDue = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestNext(t *testing.T) {
	preparedFacts := Facts{Phase: v1alpha1.RotationPreparing, NewCAsPersisted: true, ClientsOnNewCA: true, ConsumersRolledOut: true,
		Evidence: EvidencePassed, KubeRootCA: EvidencePassed, APIServices: EvidencePassed}
	abortedFacts := Facts{Phase: v1alpha1.RotationAborting, OldCAsRestored: true, RolledBack: true, OldCAsRemoved: true, AllOnNewCA: true,
		ConsumersRolledOut: true, Evidence: EvidencePassed, KubeRootCA: EvidencePassed, APIServices: EvidencePassed}
	completedFacts := Facts{Phase: v1alpha1.RotationFinalizing, NewCAsPersisted: true, OldCAsRemoved: true, ClientsOnNewCA: true, AllOnNewCA: true,
		ConsumersRolledOut: true, Evidence: EvidencePassed, KubeRootCA: EvidencePassed, APIServices: EvidencePassed}
	with := func(f Facts, mutate func(*Facts)) Facts { mutate(&f); return f }
	tests := []struct {
		name       string
		facts      Facts
		wantPhase  v1alpha1.CARotationPhase
		wantReason v1alpha1.RotationReason
		wantPoll   bool // the wait is in the managed cluster and must be polled
	}{
		{"never rotated stays", Facts{}, "", "", false},
		{"completed stays", Facts{Phase: v1alpha1.RotationCompleted}, v1alpha1.RotationCompleted, "", false},
		{"Preparing done", preparedFacts, v1alpha1.RotationPrepared, "", false},
		{"Preparing done without an endpoint", with(preparedFacts, func(f *Facts) {
			f.Evidence, f.KubeRootCA, f.APIServices = EvidenceSkipped, EvidenceSkipped, EvidenceSkipped
		}),
			v1alpha1.RotationPrepared, "", false},
		{"kube-root-ca.crt behind in Preparing", with(preparedFacts, func(f *Facts) { f.KubeRootCA = EvidencePending }),
			v1alpha1.RotationPreparing, v1alpha1.ReasonWaitingForKubeRootCA, true},
		{"kube-root-ca.crt not checked yet", with(preparedFacts, func(f *Facts) { f.KubeRootCA = "" }),
			v1alpha1.RotationPreparing, v1alpha1.ReasonWaitingForKubeRootCA, true},
		{"crash before every new CA was stored", with(preparedFacts, func(f *Facts) { f.NewCAsPersisted = false; f.ClientsOnNewCA = false }),
			v1alpha1.RotationPreparing, v1alpha1.ReasonWaitingForNewCAs, false},
		{"clients still on the old CA", with(preparedFacts, func(f *Facts) { f.ClientsOnNewCA = false }), v1alpha1.RotationPreparing, v1alpha1.ReasonWaitingForClients, true},
		{"consumers rolling", with(preparedFacts, func(f *Facts) { f.ConsumersRolledOut = false }), v1alpha1.RotationPreparing, v1alpha1.ReasonWaitingForConsumers, false},
		{"workers pending", with(preparedFacts, func(f *Facts) { f.PendingWorkerPools = 2 }), v1alpha1.RotationPreparing, v1alpha1.ReasonWaitingForWorkers, true},
		{"no evidence yet", with(preparedFacts, func(f *Facts) { f.Evidence = EvidencePending }), v1alpha1.RotationPreparing, v1alpha1.ReasonWaitingForEvidence, true},
		{"Prepared waits for the user", Facts{Phase: v1alpha1.RotationPrepared}, v1alpha1.RotationPrepared, v1alpha1.ReasonWaitingForCompletion, false},
		{"Finalizing done", completedFacts, v1alpha1.RotationCompleted, "", false},
		{"servers still on the old CA", with(completedFacts, func(f *Facts) { f.AllOnNewCA = false; f.OldCAsRemoved = false }),
			v1alpha1.RotationFinalizing, v1alpha1.ReasonWaitingForServers, false},
		{"old CAs not dropped yet", with(completedFacts, func(f *Facts) { f.OldCAsRemoved = false }), v1alpha1.RotationFinalizing, v1alpha1.ReasonWaitingForOldCADrop, false},
		{"consumers rolling after the drop", with(completedFacts, func(f *Facts) { f.ConsumersRolledOut = false }), v1alpha1.RotationFinalizing, v1alpha1.ReasonWaitingForConsumers, false},
		{"workers pending in Finalizing", with(completedFacts, func(f *Facts) { f.PendingWorkerPools = 1 }), v1alpha1.RotationFinalizing, v1alpha1.ReasonWaitingForWorkers, true},
		{"old client still accepted", with(completedFacts, func(f *Facts) { f.Evidence = EvidencePending }), v1alpha1.RotationFinalizing, v1alpha1.ReasonWaitingForEvidence, true},
		{"kube-root-ca.crt still carries the old CA", with(completedFacts, func(f *Facts) { f.KubeRootCA = EvidencePending }),
			v1alpha1.RotationFinalizing, v1alpha1.ReasonWaitingForKubeRootCA, true},
		{"Aborting done", abortedFacts, v1alpha1.RotationAborted, "", false},
		{"aborted stays", Facts{Phase: v1alpha1.RotationAborted}, v1alpha1.RotationAborted, "", false},
		{"old CAs not current yet", with(abortedFacts, func(f *Facts) { f.OldCAsRestored, f.AllOnNewCA, f.OldCAsRemoved = false, false, false }),
			v1alpha1.RotationAborting, v1alpha1.ReasonWaitingForOldCAsRestored, false},
		{"clients still on the new CA", with(abortedFacts, func(f *Facts) { f.AllOnNewCA, f.OldCAsRemoved = false, false }),
			v1alpha1.RotationAborting, v1alpha1.ReasonWaitingForClients, false},
		{"workers rolling back before the drop", with(abortedFacts, func(f *Facts) { f.PendingWorkerPools, f.RolledBack, f.OldCAsRemoved = 1, false, false }),
			v1alpha1.RotationAborting, v1alpha1.ReasonWaitingForWorkers, true},
		{"workers back, not recorded yet", with(abortedFacts, func(f *Facts) { f.RolledBack, f.OldCAsRemoved = false, false }),
			v1alpha1.RotationAborting, v1alpha1.ReasonWaitingForNewCADrop, false},
		{"recorded: the pools roll again once the new CAs are gone", with(abortedFacts, func(f *Facts) { f.PendingWorkerPools, f.OldCAsRemoved = 1, false }),
			v1alpha1.RotationAborting, v1alpha1.ReasonWaitingForNewCADrop, false},
		{"aborted before any new CA existed: nothing to delete, the roll-back is recorded all the same", with(abortedFacts, func(f *Facts) { f.RolledBack = false }),
			v1alpha1.RotationAborting, v1alpha1.ReasonWaitingForNewCADrop, false},
		{"workers rolling again after the drop", with(abortedFacts, func(f *Facts) { f.PendingWorkerPools = 1 }),
			v1alpha1.RotationAborting, v1alpha1.ReasonWaitingForWorkers, true},
		{"new CAs not dropped yet", with(abortedFacts, func(f *Facts) { f.OldCAsRemoved = false }), v1alpha1.RotationAborting, v1alpha1.ReasonWaitingForNewCADrop, false},
		{"consumers rolling after the new CAs' drop", with(abortedFacts, func(f *Facts) { f.ConsumersRolledOut = false }),
			v1alpha1.RotationAborting, v1alpha1.ReasonWaitingForConsumers, false},
		{"new client CA still accepted", with(abortedFacts, func(f *Facts) { f.Evidence = EvidencePending }), v1alpha1.RotationAborting, v1alpha1.ReasonWaitingForEvidence, true},
		{"kube-root-ca.crt still carries the new CA", with(abortedFacts, func(f *Facts) { f.KubeRootCA = EvidencePending }),
			v1alpha1.RotationAborting, v1alpha1.ReasonWaitingForKubeRootCA, true},
		{"an APIService behind in Preparing", with(preparedFacts, func(f *Facts) { f.APIServices = EvidencePending }),
			v1alpha1.RotationPreparing, v1alpha1.ReasonWaitingForAPIServices, true},
		{"an APIService still trusting the old CA", with(completedFacts, func(f *Facts) { f.APIServices = EvidencePending }),
			v1alpha1.RotationFinalizing, v1alpha1.ReasonWaitingForAPIServices, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			phase, wait := next(tt.facts)
			reason, poll := v1alpha1.RotationReason(""), false
			if wait != nil {
				reason, poll = wait.Reason, wait.PollManaged
			}
			if phase != tt.wantPhase || reason != tt.wantReason || poll != tt.wantPoll {
				t.Fatalf("Next = %q, %q, poll %v; want %q, %q, poll %v", phase, reason, poll, tt.wantPhase, tt.wantReason, tt.wantPoll)
			}
		})
	}
}

func TestCanDropOldCAs(t *testing.T) {
	ready := Facts{Phase: v1alpha1.RotationFinalizing, AllOnNewCA: true, ConsumersRolledOut: true}
	if !CanDropOldCAs(ready) {
		t.Fatal("want the old CAs dropped once servers present the new certificates")
	}
	if !CanDropOldCAs(Facts{Phase: v1alpha1.RotationAborting, RolledBack: true, OldCAsRestored: true, AllOnNewCA: true, ConsumersRolledOut: true, PendingWorkerPools: 1}) {
		t.Fatal("want the aborted new CAs dropped once the status records everything back on the old ones, the pools' second rollout pending")
	}
	for name, f := range map[string]Facts{
		"aborting, back on the old CAs, not recorded": {Phase: v1alpha1.RotationAborting, OldCAsRestored: true, AllOnNewCA: true, ConsumersRolledOut: true},
		"aborting, clients on the new CA":             {Phase: v1alpha1.RotationAborting, RolledBack: true, OldCAsRestored: true, ConsumersRolledOut: true},
		"aborting, consumers rolling":                 {Phase: v1alpha1.RotationAborting, RolledBack: true, OldCAsRestored: true, AllOnNewCA: true},
		"aborting, a role not swapped yet":            {Phase: v1alpha1.RotationAborting, RolledBack: true, AllOnNewCA: true, ConsumersRolledOut: true},
		"in Prepared":                                 {Phase: v1alpha1.RotationPrepared, AllOnNewCA: true, ConsumersRolledOut: true},
		"servers not re-issued":                       {Phase: v1alpha1.RotationFinalizing, ConsumersRolledOut: true},
		"consumers rolling":                           {Phase: v1alpha1.RotationFinalizing, AllOnNewCA: true},
	} {
		if CanDropOldCAs(f) {
			t.Fatalf("%s: must keep the old CAs", name)
		}
	}
}

func TestAbortRecordsTheRollBackBeforeDroppingTheNewCAs(t *testing.T) {
	back := Facts{Phase: v1alpha1.RotationAborting, OldCAsRestored: true, AllOnNewCA: true, ConsumersRolledOut: true}
	if d := Decide(back); !d.RecordRolledBack || d.DropOldCAs {
		t.Fatalf("back on the old CAs: Decide = %+v, want the roll-back recorded first, nothing dropped", d)
	}
	for name, f := range map[string]Facts{
		"a pool still rolling back": {Phase: v1alpha1.RotationAborting, OldCAsRestored: true, AllOnNewCA: true, ConsumersRolledOut: true, PendingWorkerPools: 1},
		"recorded already":          {Phase: v1alpha1.RotationAborting, OldCAsRestored: true, AllOnNewCA: true, ConsumersRolledOut: true, RolledBack: true, PendingWorkerPools: 1},
		"in Finalizing":             {Phase: v1alpha1.RotationFinalizing, AllOnNewCA: true, ConsumersRolledOut: true},
	} {
		if Decide(f).RecordRolledBack {
			t.Fatalf("%s: nothing to record", name)
		}
	}
	if d := Decide(Facts{Phase: v1alpha1.RotationAborting, OldCAsRestored: true, AllOnNewCA: true, ConsumersRolledOut: true, RolledBack: true, PendingWorkerPools: 1}); !d.DropOldCAs {
		t.Fatalf("recorded: Decide = %+v, want the new CAs dropped", d)
	}
	// The holders of kubeconfigs from the new client CA are waited for
	// before the roll-back is recorded: a Manual pool reported meanwhile
	// would otherwise skip its second rollout.
	holders := Facts{Phase: v1alpha1.RotationAborting, OldCAsRestored: true, AllOnNewCA: true, ConsumersRolledOut: true,
		KubeconfigHolders: []string{"carousel:admin:a", "carousel:admin:b", "carousel:admin:c", "carousel:admin:d"}}
	d := Decide(holders)
	if d.RecordRolledBack || d.DropOldCAs || d.Wait == nil || d.Wait.Reason != v1alpha1.ReasonWaitingForKubeconfigHolders || d.Wait.PollManaged {
		t.Fatalf("kubeconfigs from the new client CA held: Decide = %+v, want nothing recorded, waiting for their holders", d)
	}
	if want := "4 user(s) of kubectl carousel kubeconfig hold a kubeconfig from the new client CA, which the abort deletes: " +
		"carousel:admin:a, carousel:admin:b, carousel:admin:c and 1 more; each takes a new one"; !strings.HasPrefix(d.Wait.Message, want) ||
		!strings.HasSuffix(d.Wait.Message, "or carousel.dev/operation=abort-ca-rotation=force deletes it now") {
		t.Fatalf("the wait says %q", d.Wait.Message)
	}
	holders.AbortForced = true
	if d := Decide(holders); !d.RecordRolledBack {
		t.Fatalf("forced: Decide = %+v, want the roll-back recorded", d)
	}
	// So are the kubelets holding client certificates from it, polling the
	// managed cluster, where they renew.
	kubelets := Facts{Phase: v1alpha1.RotationAborting, OldCAsRestored: true, AllOnNewCA: true, ConsumersRolledOut: true,
		KubeletHolders: []string{"worker-1"}}
	d = Decide(kubelets)
	if d.RecordRolledBack || d.DropOldCAs || d.Wait == nil || d.Wait.Reason != v1alpha1.ReasonWaitingForKubeletHolders || !d.Wait.PollManaged ||
		!strings.Contains(d.Wait.Message, "1 Node(s) whose kubelet holds a certificate Carousel signed from a new CA the abort deletes") ||
		!strings.Contains(d.Wait.Message, "would no longer verify): worker-1;") {
		t.Fatalf("kubelet certificates from the new client CA held: Decide = %+v, want nothing recorded, waiting for their kubelets", d)
	}
	kubelets.AbortForced = true
	if d := Decide(kubelets); !d.RecordRolledBack {
		t.Fatalf("forced: Decide = %+v, want the roll-back recorded", d)
	}
	holders.AbortForced, holders.RolledBack = false, true
	if d := Decide(holders); !d.DropOldCAs {
		t.Fatalf("recorded: Decide = %+v, want the new CAs dropped whatever the record says since", d)
	}

	// In-place nodes trusted the old CAs alone from the first roll on; the
	// other pools roll again to drop the new ones.
	rot := &v1alpha1.CARotation{Phase: v1alpha1.RotationAborting, LastInitiationTime: &t0}
	mixed := []v1alpha1.WorkerPool{{Name: "a", RolloutStrategy: v1alpha1.RolloutReplace}, {Name: "b", RolloutStrategy: v1alpha1.RolloutInPlace},
		{Name: "c", RolloutStrategy: v1alpha1.RolloutManual}, {Name: "d"}}
	got := RecordRolledBack(rot, mixed, t1)
	want := &v1alpha1.CARotation{Phase: v1alpha1.RotationAborting, LastInitiationTime: &t0, AbortRolledBackTime: &t1,
		PendingWorkersRollouts: []v1alpha1.PendingWorkersRollout{{Name: "a", LastInitiationTime: &t1}, {Name: "c", LastInitiationTime: &t1}}}
	if !equalRotation(got, want) {
		t.Fatalf("RecordRolledBack:\ngot  %+v\nwant %+v", got, want)
	}
	if len(rot.PendingWorkersRollouts) != 0 || rot.AbortRolledBackTime != nil || len(mixed) != 4 || mixed[1].Name != "b" {
		t.Fatal("RecordRolledBack modified its input")
	}
	if aborted := EnterPhase(rot, v1alpha1.RotationAborted, t1); !aborted.LastAbortTime.Equal(&t1) {
		t.Fatalf("Aborted: %+v, want the time recorded", aborted)
	}
}

func TestPollDelay(t *testing.T) {
	now := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
	base, maximum := 5*time.Second, 5*time.Minute
	tests := []struct {
		name    string
		failing time.Time
		want    time.Duration
	}{
		{"nothing failing", time.Time{}, base},
		{"failing since now", now, base},
		{"failing since a few seconds", now.Add(-8 * time.Second), base},
		{"failing for a minute", now.Add(-time.Minute), 15 * time.Second},
		{"failing for ten minutes", now.Add(-10 * time.Minute), 150 * time.Second},
		{"failing for hours", now.Add(-5 * time.Hour), maximum},
		{"clock went back", now.Add(time.Hour), base},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := PollDelay(tt.failing, now, base, maximum); got != tt.want {
				t.Fatalf("PollDelay = %s, want %s", got, tt.want)
			}
		})
	}
}

func TestApplyReissueCA(t *testing.T) {
	op := v1alpha1.Operation{Verb: v1alpha1.VerbReissueCA, Roles: []v1alpha1.CARole{v1alpha1.CARoleEtcd}}
	now := metav1.Now()
	for _, phase := range []v1alpha1.CARotationPhase{"", v1alpha1.RotationCompleted} {
		rot := &v1alpha1.CARotation{Phase: phase}
		next, err := ApplyOperation(rot, op, nil, now)
		if err != nil || next != rot {
			t.Fatalf("phase %q: ApplyOperation = %v, %v; want the rotation unchanged", phase, next, err)
		}
	}
	for _, phase := range []v1alpha1.CARotationPhase{v1alpha1.RotationPreparing, v1alpha1.RotationPrepared, v1alpha1.RotationFinalizing} {
		if _, err := ApplyOperation(&v1alpha1.CARotation{Phase: phase}, op, nil, now); err == nil {
			t.Fatalf("phase %s: reissue-ca accepted during a rotation", phase)
		}
	}
}

func TestTrackEndpoint(t *testing.T) {
	const a, b = "https://192.0.2.1:6443", "https://192.0.2.2:6443"
	in := func(phase v1alpha1.CARotationPhase, checked string) *v1alpha1.CARotation {
		return &v1alpha1.CARotation{Phase: phase, CheckedEndpoint: checked}
	}
	tests := []struct {
		name        string
		rot         *v1alpha1.CARotation
		endpoint    string
		wantChecked string
		wantRemoved bool
	}{
		{"never rotated", nil, a, "", false},
		{"outside a rotation nothing is recorded", in(v1alpha1.RotationCompleted, ""), a, "", false},
		{"recorded when the rotation first sees it", in(v1alpha1.RotationPreparing, ""), a, a, false},
		{"unchanged", in(v1alpha1.RotationPrepared, a), a, a, false},
		{"a changed endpoint is followed", in(v1alpha1.RotationPrepared, a), b, b, false},
		{"removed after it was recorded", in(v1alpha1.RotationFinalizing, a), "", a, true},
		{"a rotation without an endpoint", in(v1alpha1.RotationPreparing, ""), "", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var before *v1alpha1.CARotation
			if tt.rot != nil {
				before = tt.rot.DeepCopy()
			}
			next, removed := TrackEndpoint(tt.rot, tt.endpoint)
			if tt.rot != nil && !equalRotation(tt.rot, before) {
				t.Fatal("TrackEndpoint modified its input")
			}
			checked := ""
			if next != nil {
				checked = next.CheckedEndpoint
			}
			if checked != tt.wantChecked || removed != tt.wantRemoved {
				t.Fatalf("TrackEndpoint = %q, removed %v; want %q, removed %v", checked, removed, tt.wantChecked, tt.wantRemoved)
			}
			if tt.rot != nil && checked == before.CheckedEndpoint && next != tt.rot {
				t.Fatal("TrackEndpoint copied a status it did not change")
			}
		})
	}
}

func TestStartForgetsTheLastRotationsEndpoint(t *testing.T) {
	done := &v1alpha1.CARotation{Phase: v1alpha1.RotationCompleted, CheckedEndpoint: "https://192.0.2.1:6443"}
	next, err := ApplyOperation(done, v1alpha1.Operation{Verb: v1alpha1.VerbStartCARotation}, nil, t0)
	if err != nil || next.CheckedEndpoint != "" {
		t.Fatalf("start = %+v, %v; want no checked endpoint until this rotation records one", next, err)
	}
}

// TestTrackServiceAccountKeyEndpoint checks the endpoint a service-account
// key rotation records for the check of its token Secrets, which a new
// rotation forgets.
func TestTrackServiceAccountKeyEndpoint(t *testing.T) {
	const a, b = "https://192.0.2.1:6443", "https://192.0.2.2:6443"
	in := func(phase v1alpha1.ServiceAccountKeyRotationPhase, checked string) *v1alpha1.ServiceAccountKeyRotation {
		return &v1alpha1.ServiceAccountKeyRotation{Phase: phase, CheckedEndpoint: checked}
	}
	passed := func(rot *v1alpha1.ServiceAccountKeyRotation) *v1alpha1.ServiceAccountKeyRotation {
		rot.NewKeySigningTime = &metav1.Time{Time: t0.Time}
		return rot
	}
	tests := []struct {
		name        string
		rot         *v1alpha1.ServiceAccountKeyRotation
		endpoint    string
		wantChecked string
		wantRemoved bool
	}{
		{"never rotated", nil, a, "", false},
		{"outside a rotation nothing is recorded", in(v1alpha1.ServiceAccountKeyCompleted, ""), a, "", false},
		{"recorded when the rotation first sees it", in(v1alpha1.ServiceAccountKeyPreparing, ""), a, a, false},
		{"a changed endpoint is followed", in(v1alpha1.ServiceAccountKeyPreparing, a), b, b, false},
		{"removed after it was recorded", in(v1alpha1.ServiceAccountKeyPreparing, a), "", a, true},
		{"a rotation without an endpoint", in(v1alpha1.ServiceAccountKeyPreparing, ""), "", "", false},
		{"removed once the check passed", passed(in(v1alpha1.ServiceAccountKeyPreparing, a)), "", a, false},
		{"removed once Prepared", in(v1alpha1.ServiceAccountKeyPrepared, a), "", a, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			next, removed := TrackServiceAccountKeyEndpoint(tt.rot, tt.endpoint)
			checked := ""
			if next != nil {
				checked = next.CheckedEndpoint
			}
			if checked != tt.wantChecked || removed != tt.wantRemoved {
				t.Fatalf("TrackServiceAccountKeyEndpoint = %q, removed %v; want %q, removed %v", checked, removed, tt.wantChecked, tt.wantRemoved)
			}
			if tt.rot != nil && checked == tt.rot.CheckedEndpoint && next != tt.rot {
				t.Fatal("TrackServiceAccountKeyEndpoint copied a status it did not change")
			}
		})
	}
	done := in(v1alpha1.ServiceAccountKeyCompleted, a)
	next, err := ApplyServiceAccountKeyOperation(done, v1alpha1.VerbRotateServiceAccountKeyStart, t0)
	if err != nil || next.CheckedEndpoint != "" {
		t.Fatalf("start = %+v, %v; want no checked endpoint until this rotation records one", next, err)
	}
}

func TestCompleteToleratesAStatusWithoutStartTime(t *testing.T) {
	prepared := &v1alpha1.CARotation{Phase: v1alpha1.RotationPrepared} // written by hand
	next, err := ApplyOperation(prepared, v1alpha1.Operation{Verb: v1alpha1.VerbCompleteCARotation}, pools, t0)
	if err != nil || next.Phase != v1alpha1.RotationFinalizing {
		t.Fatalf("complete = %+v, %v", next, err)
	}
	for _, p := range next.PendingWorkersRollouts {
		if !p.LastInitiationTime.Equal(&t0) {
			t.Fatalf("pool %s pending since %v, want the completion trigger %v", p.Name, p.LastInitiationTime, t0)
		}
	}
}

func TestTrustWaitsNameWhatIsBehind(t *testing.T) {
	facts := Facts{Phase: v1alpha1.RotationPreparing, NewCAsPersisted: true, ClientsOnNewCA: true, ConsumersRolledOut: true,
		Evidence: EvidencePassed, KubeRootCA: EvidencePending}
	tests := []struct {
		behind []string
		want   string
	}{
		{nil, "waiting to check kube-root-ca.crt to carry both cluster CAs in every namespace"},
		{[]string{"default", "team-a"}, "waiting for kube-root-ca.crt to carry both cluster CAs in every namespace (kube-controller-manager publishes it): " +
			"2 namespace(s) behind: default, team-a"},
		{[]string{"a", "b", "c", "d", "e", "f", "g"}, "waiting for kube-root-ca.crt to carry both cluster CAs in every namespace (kube-controller-manager publishes it): " +
			"7 namespace(s) behind: a, b, c, d, e and 2 more"},
	}
	for _, tt := range tests {
		f := facts
		f.KubeRootCABehind = tt.behind
		if got := Decide(f).Wait; got == nil || got.Message != tt.want {
			t.Errorf("behind %v: wait %+v, want message %q", tt.behind, got, tt.want)
		}
	}
	f := facts
	f.KubeRootCA, f.APIServices, f.APIServicesBehind = EvidencePassed, EvidencePending, []string{"v1beta1.metrics.k8s.io"}
	want := "waiting for the caBundle of the APIServices that trust the metrics-server CA to carry both metrics-server CAs " +
		"(Carousel writes those labelled carousel.dev/ca-bundle=metrics-server): 1 APIService(s) behind: v1beta1.metrics.k8s.io"
	if got := Decide(f).Wait; got == nil || got.Message != want {
		t.Errorf("wait %+v, want message %q", got, want)
	}
}

// TestPreparedWaitsForWorkloadsToReloadTrust checks the last step of
// Preparing: pods get workloadTrustReload from the time kube-root-ca.crt
// carried both cluster CAs everywhere, and the reconciler is told when to
// look again.
func TestPreparedWaitsForWorkloadsToReloadTrust(t *testing.T) {
	settled := Facts{Phase: v1alpha1.RotationPreparing, NewCAsPersisted: true, ClientsOnNewCA: true, ConsumersRolledOut: true,
		Evidence: EvidencePassed, KubeRootCA: EvidencePassed, APIServices: EvidencePassed, WorkloadTrustReload: 7 * time.Minute}
	with := func(mutate func(*Facts)) Facts { f := settled; mutate(&f); return f }
	deadline := t0.Add(7 * time.Minute)
	tests := []struct {
		name      string
		facts     Facts
		wantPhase v1alpha1.CARotationPhase
		wantUntil time.Time
		wantText  string
	}{
		{"not recorded yet", with(func(f *Facts) { f.Now = t0.Time }), v1alpha1.RotationPreparing, time.Time{}, "waiting to record"},
		{"just published", with(func(f *Facts) { f.KubeRootCAPublished, f.Now = t0.Time, t0.Time }), v1alpha1.RotationPreparing, deadline,
			"giving pods until 2026-11-21T10:07:00Z to reload kube-root-ca.crt, which carries both cluster CAs since 2026-11-21T10:00:00Z " +
				"(spec.caRotation.workloadTrustReload: 7m0s)"},
		{"a second short", with(func(f *Facts) { f.KubeRootCAPublished, f.Now = t0.Time, deadline.Add(-time.Second) }), v1alpha1.RotationPreparing, deadline, "giving pods until"},
		{"time is up", with(func(f *Facts) { f.KubeRootCAPublished, f.Now = t0.Time, deadline }), v1alpha1.RotationPrepared, time.Time{}, ""},
		{"no time asked for", with(func(f *Facts) { f.WorkloadTrustReload, f.Now = 0, t0.Time }), v1alpha1.RotationPrepared, time.Time{}, ""},
		{"no endpoint to check kube-root-ca.crt through", with(func(f *Facts) {
			f.Evidence, f.KubeRootCA, f.APIServices, f.Now = EvidenceSkipped, EvidenceSkipped, EvidenceSkipped, t0.Time
		}), v1alpha1.RotationPrepared, time.Time{}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := Decide(tt.facts)
			if d.Phase != tt.wantPhase {
				t.Fatalf("phase %q, want %q", d.Phase, tt.wantPhase)
			}
			if tt.wantPhase == v1alpha1.RotationPrepared {
				return
			}
			w := d.Wait
			if w == nil || w.Reason != v1alpha1.ReasonWaitingForWorkloadTrust || w.PollManaged || !w.Until.Equal(tt.wantUntil) ||
				!strings.Contains(w.Message, tt.wantText) {
				t.Fatalf("wait %+v, want %s until %s, not polled, saying %q", w, v1alpha1.ReasonWaitingForWorkloadTrust, tt.wantUntil, tt.wantText)
			}
		})
	}
}

func TestRecordKubeRootCAPublished(t *testing.T) {
	preparing := &v1alpha1.CARotation{Phase: v1alpha1.RotationPreparing}
	recorded := &v1alpha1.CARotation{Phase: v1alpha1.RotationPreparing, KubeRootCAPublishedTime: &t0}
	tests := []struct {
		name     string
		rot      *v1alpha1.CARotation
		evidence Evidence
		want     *metav1.Time
	}{
		{"first seen", preparing, EvidencePassed, &t1},
		{"kept once recorded", recorded, EvidencePassed, &t0},
		{"not while behind", preparing, EvidencePending, nil},
		{"not without an endpoint", preparing, EvidenceSkipped, nil},
		{"not in Finalizing", &v1alpha1.CARotation{Phase: v1alpha1.RotationFinalizing}, EvidencePassed, nil},
		{"never rotated", nil, EvidencePassed, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := tt.rot.DeepCopy()
			got := RecordKubeRootCAPublished(tt.rot, tt.evidence, t1)
			if !equality.Semantic.DeepEqual(tt.rot, before) {
				t.Fatalf("modified its argument")
			}
			var at *metav1.Time
			if got != nil {
				at = got.KubeRootCAPublishedTime
			}
			if !equality.Semantic.DeepEqual(at, tt.want) {
				t.Fatalf("recorded %v, want %v", at, tt.want)
			}
			if recorded := tt.want == &t1; !recorded && got != tt.rot {
				t.Fatalf("returned a copy with nothing to record")
			}
		})
	}
	done := &v1alpha1.CARotation{Phase: v1alpha1.RotationCompleted, KubeRootCAPublishedTime: &t0}
	if started, err := ApplyOperation(done, v1alpha1.Operation{Verb: v1alpha1.VerbStartCARotation}, nil, t1); err != nil || started.KubeRootCAPublishedTime != nil {
		t.Fatalf("a new rotation keeps the last one's kubeRootCAPublishedTime: %v, %v", started, err)
	}
}

// TestPublicationCheckDue: kube-root-ca.crt is checked ahead of its step
// while the worker pools roll or the new client CA is checked, so that the
// time pods get to reload it runs meanwhile; never before clients moved, nor
// once its publication is recorded, nor without a time to wait.
func TestPublicationCheckDue(t *testing.T) {
	rolling := Facts{Phase: v1alpha1.RotationPreparing, NewCAsPersisted: true, ClientsOnNewCA: true, ConsumersRolledOut: true,
		PendingWorkerPools: 2, Evidence: EvidencePending, KubeRootCA: EvidencePending, APIServices: EvidencePending,
		WorkloadTrustReload: 7 * time.Minute, Now: t0.Time}
	with := func(mutate func(*Facts)) Facts { f := rolling; mutate(&f); return f }
	for _, tc := range []struct {
		name  string
		facts Facts
		due   bool
	}{
		{"worker pools rolling", rolling, true},
		{"the new client CA being checked", with(func(f *Facts) { f.PendingWorkerPools = 0 }), true},
		{"clients not moved yet", with(func(f *Facts) { f.ClientsOnNewCA = false }), false},
		{"consumers rolling", with(func(f *Facts) { f.ConsumersRolledOut = false }), false},
		{"at the kube-root-ca.crt step itself", with(func(f *Facts) { f.PendingWorkerPools, f.Evidence = 0, EvidencePassed }), false},
		{"publication recorded", with(func(f *Facts) { f.KubeRootCAPublished = t0.Time }), false},
		{"no time to wait", with(func(f *Facts) { f.WorkloadTrustReload = 0 }), false},
		{"Finalizing", with(func(f *Facts) { f.Phase = v1alpha1.RotationFinalizing }), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := PublicationCheckDue(tc.facts); got != tc.due {
				t.Errorf("PublicationCheckDue = %t, want %t", got, tc.due)
			}
		})
	}
}

// TestPendPoolsAdded: in phase 1, a pool of the spec that the rotation does
// not know of (added since the start) becomes pending, held when the
// rotation holds its pools; pools pending or reported rolled by hand stay as
// they are, and nothing changes outside phase 1.
func TestPendPoolsAdded(t *testing.T) {
	started := metav1.NewTime(time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC))
	pools := []v1alpha1.WorkerPool{{Name: "a"}, {Name: "b"}, {Name: "c"}}
	pending := func(held bool, names ...string) []v1alpha1.PendingWorkersRollout {
		var out []v1alpha1.PendingWorkersRollout
		for _, n := range names {
			out = append(out, v1alpha1.PendingWorkersRollout{Name: n, LastInitiationTime: &started, Held: held})
		}
		return out
	}
	for _, tc := range []struct {
		name string
		rot  *v1alpha1.CARotation
		want []v1alpha1.PendingWorkersRollout
		same bool
	}{
		{name: "Preparing: c added", rot: &v1alpha1.CARotation{Phase: v1alpha1.RotationPreparing, LastInitiationTime: &started,
			PendingWorkersRollouts: pending(false, "a"), PoolsRolledByHand: []string{"b"}}, want: pending(false, "a", "c")},
		{name: "held: c added, held", rot: &v1alpha1.CARotation{Phase: v1alpha1.RotationPreparingWithoutWorkersRollout, LastInitiationTime: &started,
			PendingWorkersRollouts: pending(true, "a", "b")}, want: pending(true, "a", "b", "c")},
		{name: "a pool released early: c added, held as b is", rot: &v1alpha1.CARotation{Phase: v1alpha1.RotationPreparing, LastInitiationTime: &started,
			PendingWorkersRollouts: append(pending(false, "a"), pending(true, "b")...)}, want: append(pending(false, "a"), pending(true, "b", "c")...)},
		{name: "nothing added", rot: &v1alpha1.CARotation{Phase: v1alpha1.RotationPreparing, LastInitiationTime: &started,
			PendingWorkersRollouts: pending(false, "a", "b", "c")}, same: true},
		{name: "Prepared", rot: &v1alpha1.CARotation{Phase: v1alpha1.RotationPrepared, LastInitiationTime: &started}, same: true},
		{name: "Finalizing", rot: &v1alpha1.CARotation{Phase: v1alpha1.RotationFinalizing, LastInitiationTime: &started}, same: true},
		{name: "no rotation", same: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var before *v1alpha1.CARotation
			if tc.rot != nil {
				before = tc.rot.DeepCopy()
			}
			got := PendPoolsAdded(tc.rot, pools)
			if tc.same {
				if got != tc.rot {
					t.Fatalf("PendPoolsAdded = %+v, want the rotation unchanged", got)
				}
				return
			}
			if !equality.Semantic.DeepEqual(got.PendingWorkersRollouts, tc.want) {
				t.Errorf("pending %+v, want %+v", got.PendingWorkersRollouts, tc.want)
			}
			if !equality.Semantic.DeepEqual(tc.rot, before) {
				t.Error("PendPoolsAdded modified its argument")
			}
		})
	}
}
