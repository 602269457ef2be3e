package rotation

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
	"github.com/carousel-dev/carousel/pkg/credentials"
)

// The fuzz targets draw phases, pools and evidence from these lists by index
// (modulo the length), so that every byte value means something.
var (
	fuzzPhases = []v1alpha1.CARotationPhase{
		"", v1alpha1.RotationPreparing, v1alpha1.RotationPrepared, v1alpha1.RotationFinalizing, v1alpha1.RotationCompleted,
		v1alpha1.RotationPreparingWithoutWorkersRollout, v1alpha1.RotationWaitingForWorkersRollout, v1alpha1.RotationAborting,
		v1alpha1.RotationAborted,
	}
	// Bit i of a pool mask selects fuzzPools[i].
	fuzzPools    = []string{"a", "b", "pool-c", "gpu"}
	fuzzEvidence = []Evidence{EvidencePassed, EvidenceSkipped, EvidencePending, ""}
	fuzzRenewIn  = []credentials.RenewalPhase{credentials.RenewInPreparing, credentials.RenewInFinalizing}
)

func fuzzPhase(b uint8) v1alpha1.CARotationPhase { return fuzzPhases[int(b)%len(fuzzPhases)] }

func poolNames(mask uint8) []string {
	var names []string
	for i, n := range fuzzPools {
		if mask&(1<<i) != 0 {
			names = append(names, n)
		}
	}
	return names
}

// Bits of the status argument of FuzzApplyOperation.
const (
	statusPresent = 1 << iota
	statusInitiated
	statusInitiationFinished
	statusCompletionTriggered
	statusCompleted
	// statusHeld holds every pending pool.
	statusHeld
)

// fuzzStatus builds a rotation status. Besides the states Carousel writes it
// covers the ones it does not (a Prepared rotation without a start time, pools
// pending outside a rotation): the status subresource can be written by hand,
// and ApplyOperation is the last line of defence.
func fuzzStatus(bits, phase, pendingMask uint8) *v1alpha1.CARotation {
	if bits&statusPresent == 0 {
		return nil
	}
	at := func(bit uint8, hours int) *metav1.Time {
		if bits&bit == 0 {
			return nil
		}
		t := metav1.NewTime(t0.Add(-time.Duration(hours) * time.Hour))
		return &t
	}
	rot := &v1alpha1.CARotation{
		Phase:                       fuzzPhase(phase),
		LastInitiationTime:          at(statusInitiated, 48),
		LastInitiationFinishedTime:  at(statusInitiationFinished, 36),
		LastCompletionTriggeredTime: at(statusCompletionTriggered, 24),
		LastCompletionTime:          at(statusCompleted, 12),
	}
	for _, name := range poolNames(pendingMask) {
		rot.PendingWorkersRollouts = append(rot.PendingWorkersRollouts, v1alpha1.PendingWorkersRollout{Name: name, LastInitiationTime: rot.LastInitiationTime,
			Held: bits&statusHeld != 0})
	}
	return rot
}

func pendingNames(rot *v1alpha1.CARotation) []string {
	if rot == nil {
		return nil
	}
	var names []string
	for _, p := range rot.PendingWorkersRollouts {
		names = append(names, p.Name)
	}
	return names
}

// FuzzApplyOperation applies any operation value to any rotation status and
// worker pools. ApplyOperation must never panic nor modify its input, and:
//   - a refused operation returns no status;
//   - only start-ca-rotation (from no rotation or Completed, to Preparing),
//     start-ca-rotation-without-workers-rollout (from the same, to
//     PreparingWithoutWorkersRollout), rotate-rollout-workers (from
//     PreparingWithoutWorkersRollout or WaitingForWorkersRollout, to
//     Preparing) and complete-ca-rotation (from Prepared only, to Finalizing)
//     change the phase, and abort-ca-rotation (from phase 1 or Prepared, to
//     Aborting); nothing else ever enters Finalizing or Aborting, and an
//     operation never enters Prepared, WaitingForWorkersRollout, Completed
//     or Aborted (only Next does);
//   - starting records the start time, clears the last finish and makes every
//     pool of the spec pending, held exactly when started without workers
//     rollout; completing records the trigger time and makes every pool
//     pending, and none held, again for the same start; rollout-workers only
//     removes pools that were pending and keeps the others in order;
//     aborting records the trigger time and makes every pool pending, none
//     held: a held pool's kubelets may have renewed from the new CAs;
//     rotate-rollout-workers only releases pools that were held, and keeps
//     every pool pending; reconcile and reissue-ca return the status as it
//     was;
//   - once an operation was applied, AlreadyApplied recognises the result, so
//     a crash before the annotation is removed does not apply it twice; and
//     whenever AlreadyApplied reports true, applying again is refused or
//     changes nothing;
//   - an operation the admission webhook (ValidateOperation) accepts for the
//     Cluster is either already applied or accepted by ApplyOperation: the
//     webhook never lets through an operation the controller then refuses.
func FuzzApplyOperation(f *testing.F) {
	all := uint8(statusPresent | statusInitiated | statusInitiationFinished | statusCompletionTriggered | statusCompleted)
	started := uint8(statusPresent | statusInitiated)
	// Arguments: status bits, phase index, spec pool mask, pending pool mask, operation value.
	f.Add(uint8(0), uint8(0), uint8(0b0011), uint8(0), v1alpha1.OperationStartCARotation)
	f.Add(all, uint8(4), uint8(0b0011), uint8(0), v1alpha1.OperationStartCARotation)
	f.Add(started, uint8(2), uint8(0b0011), uint8(0), v1alpha1.OperationStartCARotation)
	f.Add(started|statusInitiationFinished, uint8(2), uint8(0b0011), uint8(0), v1alpha1.OperationCompleteCARotation)
	f.Add(started, uint8(1), uint8(0b0011), uint8(0b0011), v1alpha1.OperationCompleteCARotation)
	f.Add(started|statusCompletionTriggered, uint8(3), uint8(0b0011), uint8(0), v1alpha1.OperationCompleteCARotation)
	f.Add(started, uint8(1), uint8(0b0111), uint8(0b0111), "rollout-workers=b")
	f.Add(started, uint8(1), uint8(0b0111), uint8(0b0101), "rollout-workers=a,pool-c")
	f.Add(started, uint8(3), uint8(0b0011), uint8(0b0001), "rollout-workers=a,b")
	f.Add(started, uint8(1), uint8(0b0001), uint8(0b0001), "rollout-workers=gpu")
	f.Add(started, uint8(2), uint8(0), uint8(0), v1alpha1.OperationReconcile)
	f.Add(uint8(0), uint8(0), uint8(0), uint8(0), v1alpha1.OperationReconcile)
	f.Add(all, uint8(4), uint8(0), uint8(0), "reissue-ca=etcd,vpn")
	f.Add(started, uint8(1), uint8(0), uint8(0), "reissue-ca=cluster")
	f.Add(started, uint8(1), uint8(0), uint8(0), "reissue-service-account-key")
	f.Add(started, uint8(1), uint8(0), uint8(0), "rotate")
	f.Add(all, uint8(4), uint8(0b0011), uint8(0), v1alpha1.OperationStartCARotationWithoutWorkersRollout)
	f.Add(started|statusHeld, uint8(5), uint8(0b0011), uint8(0b0011), "rotate-rollout-workers=a")
	f.Add(started|statusHeld, uint8(6), uint8(0b0111), uint8(0b0101), "rotate-rollout-workers=a,pool-c")
	f.Add(started, uint8(6), uint8(0b0011), uint8(0b0011), "rotate-rollout-workers=b")
	f.Add(started|statusHeld, uint8(1), uint8(0b0011), uint8(0b0011), "rotate-rollout-workers=b")
	f.Add(started|statusHeld, uint8(6), uint8(0b0011), uint8(0b0011), v1alpha1.OperationCompleteCARotation)
	f.Add(started|statusHeld, uint8(6), uint8(0b0011), uint8(0b0011), "rollout-workers=a")
	f.Add(started|statusInitiationFinished, uint8(2), uint8(0b0011), uint8(0), v1alpha1.OperationAbortCARotation)
	f.Add(started|statusHeld, uint8(6), uint8(0b0111), uint8(0b0101), v1alpha1.OperationAbortCARotation)
	f.Add(started, uint8(1), uint8(0b0011), uint8(0b0001), v1alpha1.OperationAbortCARotation)
	f.Add(started|statusCompletionTriggered, uint8(3), uint8(0b0011), uint8(0), v1alpha1.OperationAbortCARotation)
	f.Add(started, uint8(7), uint8(0b0011), uint8(0b0011), v1alpha1.OperationAbortCARotation)
	f.Add(started, uint8(8), uint8(0b0011), uint8(0), v1alpha1.OperationStartCARotation)
	f.Add(started, uint8(7), uint8(0b0011), uint8(0b0001), v1alpha1.OperationAbortCARotation+v1alpha1.OperationForceSuffix)
	f.Add(started|statusInitiationFinished, uint8(2), uint8(0b0011), uint8(0), v1alpha1.OperationAbortCARotation+v1alpha1.OperationForceSuffix)
	f.Fuzz(func(t *testing.T, bits, phase, specMask, pendingMask uint8, value string) {
		rot := fuzzStatus(bits, phase, pendingMask)
		var spec []v1alpha1.WorkerPool
		for _, name := range poolNames(specMask) {
			spec = append(spec, v1alpha1.WorkerPool{Name: name})
		}
		op, parseErr := v1alpha1.ParseOperation(value)
		if parseErr != nil {
			// ApplyOperation also gets verbs that never parsed.
			op = v1alpha1.Operation{Verb: v1alpha1.OperationVerb(value)}
		}
		var before *v1alpha1.CARotation
		if rot != nil {
			before = rot.DeepCopy()
		}
		now := t1
		next, err := ApplyOperation(rot, op, spec, now)
		if !equalRotation(rot, before) {
			t.Fatalf("ApplyOperation modified its input: %+v, was %+v", rot, before)
		}
		checkApplied(t, rot, op, spec, now, next, err)

		// Idempotence, the way the reconciler relies on it.
		if err == nil && slices.Contains(recordedVerbs, op.Verb) &&
			!AlreadyApplied(next, op) {
			t.Fatalf("%q applied to %+v gives %+v, which AlreadyApplied does not recognise", value, before, next)
		}
		if AlreadyApplied(rot, op) {
			if rot == nil {
				t.Fatalf("AlreadyApplied(nil, %q) = true", value)
			}
			if !slices.Contains(recordedVerbs, op.Verb) {
				t.Fatalf("AlreadyApplied reports %q, which is never recorded in the status, as applied", value)
			}
			if err == nil && !equalRotation(next, rot) {
				t.Fatalf("AlreadyApplied(%+v, %q) = true, but applying it again gives %+v", rot, value, next)
			}
		}

		// The admission webhook's view of the same Cluster.
		old := &v1alpha1.Cluster{Spec: v1alpha1.ClusterSpec{Workers: spec}}
		if rot != nil {
			old.Status.Credentials = &v1alpha1.ClusterCredentials{Rotation: &v1alpha1.CredentialsRotation{CertificateAuthorities: rot.DeepCopy()}}
		}
		updated := old.DeepCopy()
		updated.Annotations = map[string]string{v1alpha1.OperationAnnotation: value}
		errs := ValidateOperation(updated, old)
		if parseErr != nil && len(errs) == 0 {
			t.Fatalf("the webhook accepts %q, which does not parse: %v", value, parseErr)
		}
		if len(errs) == 0 && err != nil && !AlreadyApplied(rot, op) {
			t.Fatalf("the webhook accepts %q for status %+v and pools %v, the controller refuses it: %v", value, before, poolNames(specMask), err)
		}
	})
}

// recordedVerbs are the verbs whose operation is recorded in the status.
var recordedVerbs = []v1alpha1.OperationVerb{v1alpha1.VerbStartCARotation, v1alpha1.VerbStartCARotationWithoutWorkersRollout,
	v1alpha1.VerbCompleteCARotation, v1alpha1.VerbAbortCARotation, v1alpha1.VerbRolloutWorkers, v1alpha1.VerbRotateRolloutWorkers}

// checkApplied checks the result of ApplyOperation(rot, op, spec, now).
func checkApplied(t *testing.T, rot *v1alpha1.CARotation, op v1alpha1.Operation, spec []v1alpha1.WorkerPool, now metav1.Time, next *v1alpha1.CARotation, err error) {
	t.Helper()
	from := phaseOf(rot)
	if err != nil {
		if next != nil {
			t.Fatalf("%s refused (%v) but returned %+v", op, err, next)
		}
		return
	}
	to := phaseOf(next)
	if to == v1alpha1.RotationFinalizing && from != v1alpha1.RotationFinalizing && from != v1alpha1.RotationPrepared {
		t.Fatalf("%s moved %q to Finalizing", op, from)
	}
	if to == v1alpha1.RotationAborting && from != v1alpha1.RotationAborting && !from.BothCAsTrusted() {
		t.Fatalf("%s moved %q to Aborting", op, from)
	}
	if to != from && (to == v1alpha1.RotationPrepared || to == v1alpha1.RotationWaitingForWorkersRollout || to == v1alpha1.RotationCompleted ||
		to == v1alpha1.RotationAborted) {
		t.Fatalf("%s moved %q to %s: only Next may", op, from, to)
	}
	if rot != nil && next != nil && !equalTime(next.LastCompletionTime, rot.LastCompletionTime) {
		t.Fatalf("%s changed the last completion time", op)
	}
	// An abort is forced exactly when its operation says so; forcing the
	// one under way changes nothing else.
	if op.Verb == v1alpha1.VerbAbortCARotation && (next.AbortForcedTime != nil) != (op.Force || from == v1alpha1.RotationAborting && rot.AbortForcedTime != nil) {
		t.Fatalf("%s applied to %+v: abortForcedTime %v", op, rot, next.AbortForcedTime)
	}
	if op.Verb == v1alpha1.VerbAbortCARotation && from == v1alpha1.RotationAborting {
		unforced := next.DeepCopy()
		unforced.AbortForcedTime = rot.AbortForcedTime
		if !equalRotation(unforced, rot) {
			t.Fatalf("%s applied to %+v changed more than its force: %+v", op, rot, next)
		}
	}
	specNames := make([]string, 0, len(spec))
	for _, p := range spec {
		specNames = append(specNames, p.Name)
	}
	switch op.Verb {
	case v1alpha1.VerbStartCARotation, v1alpha1.VerbStartCARotationWithoutWorkersRollout:
		held := op.Verb == v1alpha1.VerbStartCARotationWithoutWorkersRollout
		if want := map[bool]v1alpha1.CARotationPhase{false: v1alpha1.RotationPreparing, true: v1alpha1.RotationPreparingWithoutWorkersRollout}[held]; from.RotationInProgress() || to != want {
			t.Fatalf("%s moved %q to %q", op, from, to)
		}
		if !equalTime(next.LastInitiationTime, &now) || next.LastInitiationFinishedTime != nil {
			t.Fatalf("start recorded initiation %v, finished %v", next.LastInitiationTime, next.LastInitiationFinishedTime)
		}
		checkPending(t, op, next, specNames, &now)
		for _, p := range next.PendingWorkersRollouts {
			if p.Held != held {
				t.Fatalf("%s left pool %s held: %v", op, p.Name, p.Held)
			}
		}
	case v1alpha1.VerbRotateRolloutWorkers:
		holding := from == v1alpha1.RotationPreparingWithoutWorkersRollout || from == v1alpha1.RotationWaitingForWorkersRollout ||
			from == v1alpha1.RotationPreparing && len(HeldPools(rot)) > 0
		if !holding || to != v1alpha1.RotationPreparing {
			t.Fatalf("rotate-rollout-workers moved %q to %q", from, to)
		}
		if !slices.Equal(pendingNames(next), pendingNames(rot)) {
			t.Fatalf("rotate-rollout-workers changed the pending pools %v to %v", pendingNames(rot), pendingNames(next))
		}
		for i, p := range next.PendingWorkersRollouts {
			named := slices.Contains(op.Pools, p.Name)
			if named && !rot.PendingWorkersRollouts[i].Held {
				t.Fatalf("rotate-rollout-workers accepted pool %q, which was not held", p.Name)
			}
			if p.Held != (rot.PendingWorkersRollouts[i].Held && !named) {
				t.Fatalf("rotate-rollout-workers %v left pool %s held: %v", op.Pools, p.Name, p.Held)
			}
		}
	case v1alpha1.VerbCompleteCARotation:
		if from != v1alpha1.RotationPrepared || to != v1alpha1.RotationFinalizing {
			t.Fatalf("complete moved %q to %q", from, to)
		}
		if !equalTime(next.LastCompletionTriggeredTime, &now) || !equalTime(next.LastInitiationTime, rot.LastInitiationTime) {
			t.Fatalf("complete recorded trigger %v, initiation %v", next.LastCompletionTriggeredTime, next.LastInitiationTime)
		}
		initiated := rot.LastInitiationTime
		if initiated == nil { // a hand-written Prepared status: pools count from the trigger
			initiated = &now
		}
		checkPending(t, op, next, specNames, initiated)
		if held := HeldPools(next); len(held) != 0 {
			t.Fatalf("complete left pools %v held", held)
		}
	case v1alpha1.VerbAbortCARotation:
		if from == v1alpha1.RotationAborting && op.Force {
			break // checked above: only the force changes
		}
		if !from.BothCAsTrusted() || to != v1alpha1.RotationAborting {
			t.Fatalf("abort moved %q to %q", from, to)
		}
		if !equalTime(next.LastAbortTriggeredTime, &now) || !equalTime(next.LastInitiationTime, rot.LastInitiationTime) || next.AbortRolledBackTime != nil {
			t.Fatalf("abort recorded trigger %v, initiation %v, rolled back %v", next.LastAbortTriggeredTime, next.LastInitiationTime, next.AbortRolledBackTime)
		}
		initiated := rot.LastInitiationTime
		if initiated == nil {
			initiated = &now
		}
		checkPending(t, op, next, specNames, initiated)
		if held := HeldPools(next); len(held) != 0 {
			t.Fatalf("abort left pools %v held", held)
		}
	case v1alpha1.VerbRolloutWorkers:
		if to != from {
			t.Fatalf("rollout-workers moved %q to %q", from, to)
		}
		was := pendingNames(rot)
		for _, p := range op.Pools {
			if !slices.Contains(was, p) {
				t.Fatalf("rollout-workers accepted pool %q, which was not pending (%v)", p, was)
			}
		}
		want := slices.DeleteFunc(slices.Clone(was), func(n string) bool { return slices.Contains(op.Pools, n) })
		if got := pendingNames(next); !slices.Equal(got, want) {
			t.Fatalf("rollout-workers %v of pending %v left %v, want %v", op.Pools, was, got, want)
		}
		var byHand []string
		if rot != nil {
			byHand = slices.Clone(rot.PoolsRolledByHand)
		}
		for _, pool := range op.Pools {
			if !slices.Contains(byHand, pool) {
				byHand = append(byHand, pool)
			}
		}
		if !slices.Equal(next.PoolsRolledByHand, byHand) {
			t.Fatalf("rollout-workers %v recorded %v rolled by hand, want %v", op.Pools, next.PoolsRolledByHand, byHand)
		}
		rest := next.DeepCopy()
		rest.PendingWorkersRollouts, rest.PoolsRolledByHand = nil, nil
		restBefore := &v1alpha1.CARotation{} // no status reads as an empty one
		if rot != nil {
			restBefore = rot.DeepCopy()
			restBefore.PendingWorkersRollouts, restBefore.PoolsRolledByHand = nil, nil
		}
		if !equalRotation(rest, restBefore) {
			t.Fatalf("rollout-workers changed more than the pending pools and those rolled by hand: %+v, was %+v", next, rot)
		}
	case v1alpha1.VerbReconcile, v1alpha1.VerbReissueCA, v1alpha1.VerbReissueServiceAccountKey:
		if next != rot {
			t.Fatalf("%s changed the status: %+v, was %+v", op, next, rot)
		}
		if op.Verb == v1alpha1.VerbReissueCA && from.RotationInProgress() {
			t.Fatalf("reissue-ca accepted in phase %s", from)
		}
	default:
		t.Fatalf("unknown verb %q accepted", op.Verb)
	}
}

func checkPending(t *testing.T, op v1alpha1.Operation, next *v1alpha1.CARotation, specNames []string, initiated *metav1.Time) {
	t.Helper()
	if got := pendingNames(next); !slices.Equal(got, specNames) {
		t.Fatalf("%s left pools %v pending, want every pool of the spec %v", op, got, specNames)
	}
	for _, p := range next.PendingWorkersRollouts {
		if !equalTime(p.LastInitiationTime, initiated) {
			t.Fatalf("%s: pool %s pending since %v, want %v", op, p.Name, p.LastInitiationTime, initiated)
		}
	}
}

func equalTime(a, b *metav1.Time) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Equal(b)
}

// Bits of the flags argument of FuzzNext.
const (
	factNewCAsPersisted = 1 << iota
	factOldCAsRemoved
	factClientsOnNewCA
	factAllOnNewCA
	factConsumersRolledOut
	factOldCAsRestored
	factRolledBack
	factAbortForced
)

// fuzzNow is the time of the pass in FuzzNext.
var fuzzNow = time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)

// waitsPolled are the reasons of waits on the managed cluster.
var waitsPolled = []v1alpha1.RotationReason{v1alpha1.ReasonWaitingForClients, v1alpha1.ReasonWaitingForWorkers, v1alpha1.ReasonWaitingForEvidence,
	v1alpha1.ReasonWaitingForKubeRootCA, v1alpha1.ReasonWaitingForAPIServices, v1alpha1.ReasonWaitingForKubeletHolders}

// FuzzNext checks the phase decision on any facts: Next is deterministic and
// never skips a phase (Preparing moves only to Prepared, Finalizing only to
// Completed, every other phase stays); it moves only when nothing is left to
// wait for: never to Prepared while a new CA is not stored, a consumer or a
// client is not on the new CAs, a worker pool is pending or the evidence is
// Pending, never to Completed unless the old CAs could be and were dropped
// (CanDropOldCAs), the workers rolled and the evidence is in. A phase that
// stays waits for a named reason, polled exactly when it is in the managed
// cluster. CanDropOldCAs holds only in Finalizing, with every certificate on
// the new CAs and the consumers rolled out. Preparing never moves to
// Prepared before pods had workloadTrustReload since kube-root-ca.crt carried
// both CAs, and waits for them by name, until a time still to come.
func FuzzNext(f *testing.F) {
	allFacts := uint8(factNewCAsPersisted | factOldCAsRemoved | factClientsOnNewCA | factAllOnNewCA | factConsumersRolledOut)
	prepared := uint8(factNewCAsPersisted | factClientsOnNewCA | factConsumersRolledOut)
	// Arguments: phase index, fact bits, pending worker pools, evidence index, kube-root-ca.crt evidence index, APIServices evidence index.
	f.Add(uint8(0), uint8(0), 0, uint8(2), uint8(0), uint8(0), uint16(0), int32(-1), uint8(0))
	f.Add(uint8(1), prepared, 0, uint8(0), uint8(0), uint8(0), uint16(0), int32(-1), uint8(0))
	f.Add(uint8(1), prepared, 0, uint8(1), uint8(0), uint8(0), uint16(0), int32(-1), uint8(0))
	f.Add(uint8(1), prepared, 0, uint8(2), uint8(0), uint8(0), uint16(0), int32(-1), uint8(0))
	f.Add(uint8(1), prepared, 2, uint8(0), uint8(0), uint8(0), uint16(0), int32(-1), uint8(0))
	f.Add(uint8(1), prepared&^factClientsOnNewCA, 0, uint8(0), uint8(0), uint8(0), uint16(0), int32(-1), uint8(0))
	f.Add(uint8(1), uint8(0), 3, uint8(2), uint8(0), uint8(0), uint16(0), int32(-1), uint8(0))
	f.Add(uint8(2), allFacts, 0, uint8(0), uint8(0), uint8(0), uint16(0), int32(-1), uint8(0))
	f.Add(uint8(3), allFacts, 0, uint8(0), uint8(0), uint8(0), uint16(0), int32(-1), uint8(0))
	f.Add(uint8(3), allFacts&^factOldCAsRemoved, 0, uint8(0), uint8(0), uint8(0), uint16(0), int32(-1), uint8(0))
	f.Add(uint8(3), allFacts&^(factOldCAsRemoved|factAllOnNewCA), 0, uint8(0), uint8(0), uint8(0), uint16(0), int32(-1), uint8(0))
	f.Add(uint8(3), allFacts, 1, uint8(0), uint8(0), uint8(0), uint16(0), int32(-1), uint8(0))
	f.Add(uint8(3), allFacts, 0, uint8(2), uint8(0), uint8(0), uint16(0), int32(-1), uint8(0))
	f.Add(uint8(3), allFacts, -1, uint8(0), uint8(0), uint8(0), uint16(0), int32(-1), uint8(0))
	f.Add(uint8(4), allFacts, 0, uint8(0), uint8(0), uint8(0), uint16(0), int32(-1), uint8(0))
	f.Add(uint8(1), prepared, 0, uint8(0), uint8(2), uint8(0), uint16(0), int32(-1), uint8(0))
	f.Add(uint8(1), prepared, 0, uint8(2), uint8(0), uint8(0), uint16(0), int32(-1), uint8(0))
	f.Add(uint8(3), allFacts, 0, uint8(1), uint8(3), uint8(0), uint16(0), int32(-1), uint8(0))
	f.Add(uint8(1), prepared, 0, uint8(0), uint8(0), uint8(2), uint16(0), int32(-1), uint8(0))
	f.Add(uint8(3), allFacts, 0, uint8(0), uint8(0), uint8(3), uint16(0), int32(-1), uint8(0))
	f.Add(uint8(1), prepared, 0, uint8(0), uint8(0), uint8(0), uint16(420), int32(-1), uint8(0))
	f.Add(uint8(1), prepared, 0, uint8(0), uint8(0), uint8(0), uint16(420), int32(419), uint8(0))
	f.Add(uint8(1), prepared, 0, uint8(0), uint8(0), uint8(0), uint16(420), int32(420), uint8(0))
	f.Add(uint8(1), prepared, 0, uint8(0), uint8(1), uint8(0), uint16(420), int32(-1), uint8(0))
	f.Add(uint8(5), prepared, 0, uint8(0), uint8(0), uint8(0), uint16(0), int32(-1), uint8(2))
	f.Add(uint8(5), prepared, 0, uint8(0), uint8(0), uint8(0), uint16(0), int32(-1), uint8(0))
	f.Add(uint8(1), prepared, 1, uint8(0), uint8(0), uint8(0), uint16(0), int32(-1), uint8(1))
	f.Add(uint8(1), prepared, 0, uint8(0), uint8(0), uint8(0), uint16(420), int32(-1), uint8(1))
	f.Add(uint8(6), prepared, 0, uint8(2), uint8(2), uint8(2), uint16(0), int32(-1), uint8(3))
	f.Add(uint8(6), uint8(0), 0, uint8(2), uint8(2), uint8(2), uint16(0), int32(-1), uint8(0))
	f.Add(uint8(6), uint8(0), 1, uint8(2), uint8(2), uint8(2), uint16(0), int32(-1), uint8(0))
	aborted := uint8(factOldCAsRestored | factRolledBack | factOldCAsRemoved | factAllOnNewCA | factConsumersRolledOut)
	f.Add(uint8(7), aborted, 0, uint8(0), uint8(0), uint8(0), uint16(0), int32(-1), uint8(0))
	f.Add(uint8(7), aborted&^(factRolledBack|factOldCAsRemoved), 0, uint8(0), uint8(0), uint8(0), uint16(0), int32(-1), uint8(0))
	f.Add(uint8(7), aborted&^factOldCAsRemoved, 2, uint8(0), uint8(0), uint8(0), uint16(0), int32(-1), uint8(0))
	f.Add(uint8(7), aborted&^factRolledBack, 1, uint8(2), uint8(0), uint8(0), uint16(0), int32(-1), uint8(0))
	f.Add(uint8(8), aborted, 0, uint8(0), uint8(0), uint8(0), uint16(0), int32(-1), uint8(0))
	f.Add(uint8(7), aborted&^factOldCAsRemoved, 0, uint8(0), uint8(0), uint8(0), uint16(0), int32(-1), uint8(0x20))
	f.Add(uint8(7), aborted&^factOldCAsRemoved|factAbortForced, 0, uint8(0), uint8(0), uint8(0), uint16(0), int32(-1), uint8(0x40))
	// Holders named and holders the reconciler cannot tell, of kubeconfigs
	// (0x24) and kubelet certificates (0x18), and those the reconciler cannot
	// tell of kubelet certificates alone (0x08).
	f.Add(uint8(7), aborted&^(factRolledBack|factOldCAsRemoved), 0, uint8(0), uint8(0), uint8(0), uint16(0), int32(-1), uint8(0x24))
	f.Add(uint8(7), aborted&^(factRolledBack|factOldCAsRemoved), 0, uint8(0), uint8(0), uint8(0), uint16(0), int32(-1), uint8(0x18))
	f.Add(uint8(7), aborted&^(factRolledBack|factOldCAsRemoved), 0, uint8(0), uint8(0), uint8(0), uint16(0), int32(-1), uint8(0x08))
	f.Fuzz(func(t *testing.T, phase, flags uint8, pendingPools int, evidence, kubeRootCA, apiServices uint8, reloadSec uint16, publishedAgoSec int32, heldCount uint8) {
		facts := Facts{
			Phase:              fuzzPhase(phase),
			NewCAsPersisted:    flags&factNewCAsPersisted != 0,
			OldCAsRemoved:      flags&factOldCAsRemoved != 0,
			ClientsOnNewCA:     flags&factClientsOnNewCA != 0,
			AllOnNewCA:         flags&factAllOnNewCA != 0,
			ConsumersRolledOut: flags&factConsumersRolledOut != 0,
			OldCAsRestored:     flags&factOldCAsRestored != 0,
			RolledBack:         flags&factRolledBack != 0,
			AbortForced:        flags&factAbortForced != 0,
			// The high bits of heldCount: users holding kubeconfigs from the new client CA.
			KubeconfigHolders: slices.Repeat([]string{"carousel:admin:a"}, int(heldCount>>5)),
			// Bit 4: a Node whose kubelet holds a certificate from it.
			KubeletHolders: slices.Repeat([]string{"worker-1"}, int(heldCount>>4)&1),
			// Bits 2 and 3: the reconciler cannot tell every holder.
			KubeconfigHoldersUnknown: slices.Repeat([]string{"(the kubeconfig record is lost)"}, int(heldCount>>2)&1),
			KubeletHoldersUnknown:    slices.Repeat([]string{"(the kubelet record is lost)"}, int(heldCount>>3)&1),
			PendingWorkerPools:       pendingPools,
			HeldWorkerPools:          fuzzPools[:int(heldCount)%(len(fuzzPools)+1)],
			Evidence:                 fuzzEvidence[int(evidence)%len(fuzzEvidence)],
			KubeRootCA:               fuzzEvidence[int(kubeRootCA)%len(fuzzEvidence)],
			APIServices:              fuzzEvidence[int(apiServices)%len(fuzzEvidence)],
			WorkloadTrustReload:      time.Duration(reloadSec) * time.Second,
			Now:                      fuzzNow,
		}
		if publishedAgoSec >= 0 {
			facts.KubeRootCAPublished = fuzzNow.Add(-time.Duration(publishedAgoSec) * time.Second)
		}
		reloaded := facts.KubeRootCA == EvidenceSkipped || facts.WorkloadTrustReload == 0 ||
			publishedAgoSec >= 0 && time.Duration(publishedAgoSec)*time.Second >= facts.WorkloadTrustReload
		to, wait := next(facts)
		if again, againWait := next(facts); again != to || fmt.Sprint(againWait) != fmt.Sprint(wait) {
			t.Fatalf("next(%+v) is not deterministic", facts)
		}
		settled := facts.PendingWorkerPools == 0 && passedOrSkipped(facts.Evidence) && passedOrSkipped(facts.KubeRootCA) && passedOrSkipped(facts.APIServices)
		prepared := settled && reloaded && facts.NewCAsPersisted && facts.ConsumersRolledOut && facts.ClientsOnNewCA
		held := len(facts.HeldWorkerPools) > 0
		switch {
		case to == facts.Phase:
		case facts.Phase.Preparing() && to == v1alpha1.RotationPrepared:
			if !prepared || held {
				t.Fatalf("next(%+v) moved to Prepared", facts)
			}
		case facts.Phase.Preparing() && to == v1alpha1.RotationWaitingForWorkersRollout:
			if !prepared || !held {
				t.Fatalf("next(%+v) moved to WaitingForWorkersRollout", facts)
			}
		case facts.Phase == v1alpha1.RotationWaitingForWorkersRollout && to == v1alpha1.RotationPrepared:
			if held || facts.PendingWorkerPools != 0 {
				t.Fatalf("next(%+v) moved to Prepared", facts)
			}
		case facts.Phase == v1alpha1.RotationFinalizing && to == v1alpha1.RotationCompleted:
			if !settled || !facts.OldCAsRemoved || !CanDropOldCAs(facts) {
				t.Fatalf("next(%+v) moved to Completed", facts)
			}
		case facts.Phase == v1alpha1.RotationAborting && to == v1alpha1.RotationAborted:
			if !settled || !facts.OldCAsRemoved || !facts.RolledBack || !CanDropOldCAs(facts) {
				t.Fatalf("next(%+v) moved to Aborted", facts)
			}
		default:
			t.Fatalf("next(%+v) moved %q to %q", facts, facts.Phase, to)
		}
		waits := to == facts.Phase && facts.Phase.RotationInProgress()
		if waits != (wait != nil) {
			t.Fatalf("next(%+v) = %q with wait %+v", facts, to, wait)
		}
		if wait != nil {
			if wait.Reason == "" || wait.Message == "" {
				t.Fatalf("next(%+v) waits without saying why: %+v", facts, wait)
			}
			// An abort re-issues its clients from the old CAs, which the
			// API server trusts all along: nothing to wait for there.
			polled := slices.Contains(waitsPolled, wait.Reason) && (facts.Phase != v1alpha1.RotationAborting || wait.Reason != v1alpha1.ReasonWaitingForClients)
			if wait.PollManaged != polled {
				t.Fatalf("next(%+v): wait %s polled %v", facts, wait.Reason, wait.PollManaged)
			}
			if (wait.Reason == v1alpha1.ReasonWaitingForWorkloadTrust) != (!wait.Until.IsZero() || facts.Phase.Preparing() &&
				settled && facts.NewCAsPersisted && facts.ConsumersRolledOut && facts.ClientsOnNewCA && !reloaded) {
				t.Fatalf("next(%+v): wait %+v", facts, wait)
			}
			if !wait.Until.IsZero() && !wait.Until.After(fuzzNow) {
				t.Fatalf("next(%+v) waits until %s, which has come", facts, wait.Until)
			}
			if wait.Reason == v1alpha1.ReasonWaitingForWorkers && (facts.PendingWorkerPools == 0 || !strings.Contains(wait.Message, fmt.Sprint(facts.PendingWorkerPools))) {
				t.Fatalf("next(%+v) waits for workers: %q", facts, wait.Message)
			}
			if (wait.Reason == v1alpha1.ReasonWaitingForWorkersRolloutOperation) != (facts.Phase == v1alpha1.RotationWaitingForWorkersRollout) {
				t.Fatalf("next(%+v): wait %+v", facts, wait)
			}
			for _, pool := range facts.HeldWorkerPools {
				if wait.Reason == v1alpha1.ReasonWaitingForWorkersRolloutOperation && !strings.Contains(wait.Message, pool) {
					t.Fatalf("next(%+v) waits for the held pools without naming %s: %q", facts, pool, wait.Message)
				}
			}
		}

		// A check of the managed cluster is run exactly when its result is
		// all the phase waits for.
		checkedBy := map[v1alpha1.RotationReason][]EvidenceCheck{
			v1alpha1.ReasonWaitingForEvidence:    {CheckNewClientAccepted, CheckOldCADropped},
			v1alpha1.ReasonWaitingForKubeRootCA:  {CheckKubeRootCA},
			v1alpha1.ReasonWaitingForAPIServices: {CheckAPIServices},
		}
		if due := EvidenceDue(facts); (due != CheckNone || wait != nil && checkedBy[wait.Reason] != nil) &&
			(wait == nil || !slices.Contains(checkedBy[wait.Reason], due)) {
			t.Fatalf("EvidenceDue(%+v) = %v with wait %+v", facts, due, wait)
		}
		// kube-root-ca.crt is checked ahead of its step only in Preparing,
		// before its publication is recorded, while the pools roll or the
		// new client CA is checked, with a time to wait.
		if PublicationCheckDue(facts) && (!facts.Phase.Preparing() || !facts.KubeRootCAPublished.IsZero() ||
			facts.WorkloadTrustReload == 0 || wait == nil ||
			wait.Reason != v1alpha1.ReasonWaitingForWorkers && wait.Reason != v1alpha1.ReasonWaitingForEvidence) {
			t.Fatalf("PublicationCheckDue(%+v) = true with wait %+v", facts, wait)
		}
		if CanDropOldCAs(facts) && (facts.Phase != v1alpha1.RotationFinalizing && facts.Phase != v1alpha1.RotationAborting ||
			!facts.AllOnNewCA || !facts.ConsumersRolledOut) {
			t.Fatalf("CanDropOldCAs(%+v) = true", facts)
		}
		// An abort deletes the new CAs only once the status records that
		// everything, worker pools included, is back on the old ones; it
		// records that only when it is so.
		if facts.Phase == v1alpha1.RotationAborting && CanDropOldCAs(facts) && (!facts.RolledBack || !facts.OldCAsRestored) {
			t.Fatalf("CanDropOldCAs(%+v) = true before the roll-back is recorded", facts)
		}
		// It records that only once no user holds a kubeconfig from the new
		// client CA only, or the abort is forced; and the wait for them, which
		// comes before, names them.
		// (or the reconciler cannot tell who holds one), names them, counts
		// only the names, and says why it cannot tell.
		if d := Decide(facts); d.RecordRolledBack && len(facts.KubeconfigHolders)+len(facts.KubeconfigHoldersUnknown) > 0 && !facts.AbortForced {
			t.Fatalf("Decide(%+v) = %+v records the roll-back while kubeconfigs from the new client CA are held", facts, d)
		}
		if wait != nil && wait.Reason == v1alpha1.ReasonWaitingForKubeconfigHolders &&
			(facts.Phase != v1alpha1.RotationAborting || facts.AbortForced || facts.RolledBack || !namesHolders(wait.Message, "user(s)", facts.KubeconfigHolders, facts.KubeconfigHoldersUnknown)) {
			t.Fatalf("next(%+v) waits for kubeconfig holders: %+v", facts, wait)
		}
		// The same for the kubelets holding certificates from it.
		if d := Decide(facts); d.RecordRolledBack && len(facts.KubeletHolders)+len(facts.KubeletHoldersUnknown) > 0 && !facts.AbortForced {
			t.Fatalf("Decide(%+v) = %+v records the roll-back while kubelets hold certificates from the new client CA", facts, d)
		}
		if wait != nil && wait.Reason == v1alpha1.ReasonWaitingForKubeletHolders &&
			(facts.Phase != v1alpha1.RotationAborting || facts.AbortForced || facts.RolledBack || !namesHolders(wait.Message, "Node(s)", facts.KubeletHolders, facts.KubeletHoldersUnknown)) {
			t.Fatalf("next(%+v) waits for kubelet holders: %+v", facts, wait)
		}
		if d := Decide(facts); d.RecordRolledBack && (facts.Phase != v1alpha1.RotationAborting || facts.RolledBack || facts.PendingWorkerPools != 0 ||
			!facts.OldCAsRestored || !facts.AllOnNewCA || !facts.ConsumersRolledOut || d.DropOldCAs) {
			t.Fatalf("Decide(%+v) = %+v records the roll-back", facts, d)
		}
		if CanDropOldCAs(facts) && wait != nil && wait.Reason == v1alpha1.ReasonWaitingForServers {
			t.Fatalf("next(%+v) waits for servers whose old CAs may be dropped", facts)
		}
	})
}

// FuzzIssuer checks which CA signs a certificate: the current CA outside
// the phases from Preparing to Prepared; in those phases a server certificate (renewed in
// Finalizing) always stays on the previous CA, and a client certificate
// (renewed in Preparing) moves to the current CA exactly when every consumer
// trusts it or it is already signed by it, so it never moves back.
func FuzzIssuer(f *testing.F) {
	// Arguments: renewal phase index, phase index, trust established, signed by the current CA.
	f.Add(uint8(0), uint8(0), false, false)
	f.Add(uint8(0), uint8(1), false, false)
	f.Add(uint8(0), uint8(1), true, false)
	f.Add(uint8(0), uint8(2), false, true)
	f.Add(uint8(1), uint8(1), true, true)
	f.Add(uint8(1), uint8(2), true, false)
	f.Add(uint8(1), uint8(3), false, false)
	f.Add(uint8(1), uint8(4), false, false)
	f.Fuzz(func(t *testing.T, renewIn, phase uint8, trustEstablished, signedByCurrent bool) {
		r, p := fuzzRenewIn[int(renewIn)%len(fuzzRenewIn)], fuzzPhase(phase)
		got := Issuer(r, p, trustEstablished, signedByCurrent)
		var want Generation
		switch {
		case !slices.Contains([]v1alpha1.CARotationPhase{v1alpha1.RotationPreparing, v1alpha1.RotationPreparingWithoutWorkersRollout,
			v1alpha1.RotationWaitingForWorkersRollout, v1alpha1.RotationPrepared}, p):
			want = Current
		case r != credentials.RenewInPreparing:
			want = Previous
		case trustEstablished || signedByCurrent:
			want = Current
		default:
			want = Previous
		}
		if got != want {
			t.Fatalf("Issuer(%s, %q, trust %v, signed by current %v) = %s, want %s", r, p, trustEstablished, signedByCurrent, got, want)
		}
	})
}

// FuzzLifecycle runs a rotation through any sequence of operations and
// observations, from a cluster never rotated. Each step is an operation
// (start with or without workers rollout, complete, a rollout of a pool by
// hand, the release of a held pool, reconcile) applied the way the
// reconciler does, or a reconcile that observes facts and moves the phase as
// Next says. Whatever the order, the phase only ever moves along
// Preparing → (WaitingForWorkersRollout → Preparing →) Prepared → Finalizing
// → Completed, or through PreparingWithoutWorkersRollout instead of the first
// Preparing; WaitingForWorkersRollout is entered only with pools held, no
// phase but those of phase 1 has pools held, and Prepared and Completed are
// entered only with no pool pending.
func FuzzLifecycle(f *testing.F) {
	// A step byte: the low 3 bits pick the action, the high 5 bits are
	// facts; for stepRelease the lowest of them picks the pool.
	const (
		stepStart = iota
		stepComplete
		stepRolloutA
		stepRolloutB
		stepReconcile
		stepStartWithoutWorkers
		stepRelease
		stepObserve
	)
	observe := func(facts uint8) byte { return facts<<3 | stepObserve }
	releaseA, releaseB := byte(stepRelease), byte(1<<3|stepRelease)
	happy := []byte{
		stepStart, observe(0), observe(0b11111), stepRolloutA, stepRolloutB, observe(0b11111),
		stepComplete, observe(0b11111), stepRolloutA, stepRolloutB, observe(0b11111), stepStart,
	}
	f.Add(happy)
	f.Add([]byte{stepComplete, stepStart, stepStart, stepComplete, observe(0b11111)})
	f.Add([]byte{stepStart, stepRolloutA, stepRolloutA, stepRolloutB, stepReconcile, observe(0b00101), observe(0b10101), stepComplete, stepComplete})
	f.Add([]byte{stepStartWithoutWorkers, observe(0b11111), stepComplete, releaseA, observe(0b11111), stepRolloutA, observe(0b11111),
		releaseB, stepRolloutB, observe(0b11111), stepComplete})
	f.Add([]byte{stepStartWithoutWorkers, releaseA, releaseB, observe(0b11111), stepRolloutA, stepRolloutB, observe(0b11111)})
	f.Add([]byte{stepStartWithoutWorkers, observe(0b11111), stepRolloutA, stepRolloutB, observe(0b11111), stepComplete})
	f.Add([]byte{})
	pools := []v1alpha1.WorkerPool{{Name: "a"}, {Name: "b"}}
	f.Fuzz(func(t *testing.T, steps []byte) {
		var rot *v1alpha1.CARotation
		var history []v1alpha1.CARotationPhase
		for i, step := range steps {
			now := metav1.NewTime(t0.Add(time.Duration(i) * time.Minute))
			from := phaseOf(rot)
			switch action := step & 0b111; action {
			case stepStart, stepComplete, stepRolloutA, stepRolloutB, stepReconcile, stepStartWithoutWorkers, stepRelease:
				value := []string{v1alpha1.OperationStartCARotation, v1alpha1.OperationCompleteCARotation, "rollout-workers=a", "rollout-workers=b",
					v1alpha1.OperationReconcile, v1alpha1.OperationStartCARotationWithoutWorkersRollout,
					v1alpha1.OperationRotateRolloutWorkersPrefix + pools[step>>3&1].Name}[action]
				op, err := v1alpha1.ParseOperation(value)
				if err != nil {
					t.Fatal(err)
				}
				if AlreadyApplied(rot, op) {
					continue
				}
				if next, err := ApplyOperation(rot, op, pools, now); err == nil {
					rot = next
				}
			default:
				if rot == nil {
					continue
				}
				facts := step >> 3
				observed := Facts{
					Phase:              rot.Phase,
					NewCAsPersisted:    facts&factNewCAsPersisted != 0,
					OldCAsRemoved:      facts&factOldCAsRemoved != 0,
					ClientsOnNewCA:     facts&factClientsOnNewCA != 0,
					AllOnNewCA:         facts&factAllOnNewCA != 0,
					ConsumersRolledOut: facts&factConsumersRolledOut != 0,
					PendingWorkerPools: len(rot.PendingWorkersRollouts) - len(HeldPools(rot)),
					HeldWorkerPools:    HeldPools(rot),
					Evidence:           EvidencePassed,
					KubeRootCA:         EvidencePassed,
					APIServices:        EvidencePassed,
				}
				if to, _ := next(observed); to != rot.Phase {
					rot = rot.DeepCopy()
					rot.Phase = to
				}
			}
			to := phaseOf(rot)
			if to == from {
				continue
			}
			started := []v1alpha1.CARotationPhase{v1alpha1.RotationPreparing, v1alpha1.RotationPreparingWithoutWorkersRollout}
			prepared := []v1alpha1.CARotationPhase{v1alpha1.RotationPrepared, v1alpha1.RotationWaitingForWorkersRollout}
			allowed := map[v1alpha1.CARotationPhase][]v1alpha1.CARotationPhase{
				"":                         started,
				v1alpha1.RotationPreparing: prepared,
				v1alpha1.RotationPreparingWithoutWorkersRollout: append(prepared, v1alpha1.RotationPreparing),
				v1alpha1.RotationWaitingForWorkersRollout:       {v1alpha1.RotationPreparing, v1alpha1.RotationPrepared},
				v1alpha1.RotationPrepared:                       {v1alpha1.RotationFinalizing},
				v1alpha1.RotationFinalizing:                     {v1alpha1.RotationCompleted},
				v1alpha1.RotationCompleted:                      started,
			}
			history = append(history, to)
			if !slices.Contains(allowed[from], to) {
				t.Fatalf("step %d (%08b) moved %q to %q; phases so far %v", i, step, from, to, history)
			}
			if (to == v1alpha1.RotationPrepared || to == v1alpha1.RotationCompleted) && len(rot.PendingWorkersRollouts) != 0 {
				t.Fatalf("step %d entered %s with pools %v pending", i, to, pendingNames(rot))
			}
			held := len(HeldPools(rot)) > 0
			if to == v1alpha1.RotationWaitingForWorkersRollout && !held || held && !to.Preparing() && to != v1alpha1.RotationWaitingForWorkersRollout {
				t.Fatalf("step %d entered %s with pools %v held", i, to, HeldPools(rot))
			}
		}
	})
}

// namesHolders reports whether a wait's message names the holders, counts
// them as "<n> <noun>" when there are any, and says every reason the
// reconciler cannot tell others.
func namesHolders(message, noun string, names, unknown []string) bool {
	if len(names) > 0 && (!strings.HasPrefix(message, fmt.Sprintf("%d %s", len(names), noun)) || !strings.Contains(message, names[0])) {
		return false
	}
	for _, why := range unknown {
		if !strings.Contains(message, why) {
			return false
		}
	}
	return len(names)+len(unknown) > 0
}
