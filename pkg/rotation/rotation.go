// Package rotation owns the state machine of a CA rotation. Every rule of it
// lives here as a pure function: which operation is allowed in which phase
// (for the admission webhook and the reconciler alike), how an operation or
// an observation changes the rotation status, what a phase waits for, which
// CA signs a certificate, and what the reconciler must do next. The
// reconciler gathers the facts and carries the decisions out; the kubectl
// plugin renders its plan from the same steps.
//
// The transitions:
//
//	from                      on                                          to                              decided by
//	none, Completed, Aborted  start-ca-rotation                           Preparing                       Allowed, ApplyOperation
//	none, Completed, Aborted  start-ca-rotation-without-workers-rollout   PreparingWithoutWorkersRollout  Allowed, ApplyOperation: every pool held
//	Preparing…                every step of preparing is observed         Prepared                        Decide
//	                          … and pools are held                        WaitingForWorkersRollout        Decide
//	PreparingWithout…,        rotate-rollout-workers=<pool>,…             Preparing                       Allowed, ApplyOperation: the pools roll
//	WaitingForWorkersRollout,
//	Preparing while pools
//	are held
//	WaitingForWorkersRollout  no pool is pending any more                 Prepared                        Decide
//	Prepared                  complete-ca-rotation                        Finalizing                      Allowed, ApplyOperation
//	Finalizing                every step of finalizing is observed        Completed                       Decide
//	Preparing…, Waiting…,     abort-ca-rotation                           Aborting                        Allowed, ApplyOperation
//	Prepared
//	Aborting                  every step of aborting is observed          Aborted                         Decide
//	any                       rollout-workers=<pool>,…                    (same)                          ApplyOperation: pools leave pendingWorkersRollouts
//	none, Completed, Aborted  reissue-ca=<role>,…                         (same)                          Allowed; the reconciler forgets the lost CAs
//	any                       reissue-service-account-key                 (same)                          the reconciler writes a new key, if it was lost
//	any                       reconcile                                   (same)                          nothing is recorded
//
// Preparing… is Preparing or PreparingWithoutWorkersRollout: both wait for
// the same steps, but the second rolls no worker pool. A held pool (listed
// in pendingWorkersRollouts with held: true) rolls once
// rotate-rollout-workers names it, which takes the rotation back to
// Preparing until that pool rolled.
//
// Aborting swaps every role's CAs, the old one current again and the new one
// previous, so that everything is signed by the old CAs while both stay
// trusted; once nothing uses a certificate from the new CAs they are
// deleted, as Finalizing deletes the old ones.
//
// The steps of Preparing, Finalizing and Aborting, in the order they are
// waited for, are the preparing, finalizing and aborting tables in steps.go.
package rotation

import (
	"fmt"
	"slices"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
)

// startTime is when a rotation that starts now starts, last the start of the
// one before: a second after last when now is not after it. The start time
// identifies a rotation (a CA Secret's and the service-account key Secret's
// carousel.dev/rotation, a MachineDeployment's carousel.dev/rolled-for): one
// started in the second the last one started must not be taken for it.
func startTime(last *metav1.Time, now metav1.Time) metav1.Time {
	if last != nil && !now.After(last.Time) {
		return metav1.NewTime(last.Add(time.Second))
	}
	return now
}

// Phases are the phases of a Cluster's two rotations, which decide the
// operations allowed.
type Phases struct {
	CA                v1alpha1.CARotationPhase
	ServiceAccountKey v1alpha1.ServiceAccountKeyRotationPhase
	// PoolsHeld says that the CA rotation holds worker pools until
	// rotate-rollout-workers names them: also in Preparing, once some were
	// released before the others.
	PoolsHeld bool
}

// PhasesOf returns the phases of the Cluster's rotations.
func PhasesOf(c *v1alpha1.Cluster) Phases {
	p := caPhases(c.CARotation())
	p.ServiceAccountKey = c.ServiceAccountKeyRotationPhase()
	return p
}

// caPhases returns the phases of a CA rotation status.
func caPhases(rot *v1alpha1.CARotation) Phases {
	return Phases{CA: phaseOf(rot), PoolsHeld: len(HeldPools(rot)) > 0}
}

// holdsPools reports whether rotate-rollout-workers may release pools.
func (p Phases) holdsPools() bool {
	switch p.CA {
	case v1alpha1.RotationPreparingWithoutWorkersRollout, v1alpha1.RotationWaitingForWorkersRollout:
		return true
	case v1alpha1.RotationPreparing:
		return p.PoolsHeld
	}
	return false
}

// Allowed returns nil when an operation with verb may be applied in phases,
// and otherwise an error that names the phase and says what to do. It is
// the one guard of the transitions: the webhook refuses what it refuses, and
// ApplyOperation and ApplyServiceAccountKeyOperation refuse it again when the
// webhook was bypassed. A rotate-credentials verb is allowed when both of its
// parts are.
func Allowed(verb v1alpha1.OperationVerb, phases Phases) error {
	saVerb := verb.ServiceAccountKeyVerb()
	if saVerb != "" {
		if err := serviceAccountKeyAllowed(saVerb, phases.ServiceAccountKey); err != nil {
			return err
		}
	}
	caVerb := verb.CAVerb()
	if caVerb == "" && saVerb != "" {
		return nil // a service-account key operation only
	}
	phase := phases.CA
	switch caVerb {
	case v1alpha1.VerbStartCARotation, v1alpha1.VerbStartCARotationWithoutWorkersRollout:
		if phase.RotationInProgress() {
			return fmt.Errorf("cannot start a CA rotation: the rotation is in phase %s: %s", phase, NextStep(phases))
		}
	case v1alpha1.VerbCompleteCARotation:
		if phase != v1alpha1.RotationPrepared {
			return fmt.Errorf("cannot complete the CA rotation in phase %s, only in phase %s: %s", PhaseName(phase), v1alpha1.RotationPrepared, NextStep(phases))
		}
	case v1alpha1.VerbAbortCARotation:
		if !phase.BothCAsTrusted() {
			return fmt.Errorf("cannot abort the CA rotation in phase %s: only a rotation that has not been completed, in phases %s, %s, %s or %s, "+
				"can go back to its old CAs; %s", PhaseName(phase), v1alpha1.RotationPreparing, v1alpha1.RotationPreparingWithoutWorkersRollout,
				v1alpha1.RotationWaitingForWorkersRollout, v1alpha1.RotationPrepared, NextStep(phases))
		}
	case v1alpha1.VerbRotateRolloutWorkers:
		if !phases.holdsPools() {
			return fmt.Errorf("cannot roll held worker pools in phase %s: pools are held only by a rotation started with %s=%s, "+
				"in phases %s and %s, and in %s while some are held; %s", PhaseName(phase), v1alpha1.OperationAnnotation,
				v1alpha1.OperationStartCARotationWithoutWorkersRollout, v1alpha1.RotationPreparingWithoutWorkersRollout,
				v1alpha1.RotationWaitingForWorkersRollout, v1alpha1.RotationPreparing, NextStep(phases))
		}
	case v1alpha1.VerbReissueCA:
		if phase.RotationInProgress() {
			return fmt.Errorf("cannot reissue a CA during a CA rotation (phase %s): a lost CA Secret must be restored, for example with `kubectl carousel certs restore`", phase)
		}
	case v1alpha1.VerbReconcile, v1alpha1.VerbRolloutWorkers, v1alpha1.VerbReissueServiceAccountKey:
		// Allowed in every phase: rollout-workers names only pending pools
		// (held ones included: the user rolled them by hand);
		// the service-account key is not part of the CA rotation.
	default:
		return fmt.Errorf("unknown operation %q", verb)
	}
	return nil
}

// forcesAbortUnderWay: op is abort-ca-rotation=force while the abort is
// under way, which Allowed does not know of: it tells the abort not to wait
// for the users holding kubeconfigs from the new client CA.
func forcesAbortUnderWay(op v1alpha1.Operation, phases Phases) bool {
	return op.Verb == v1alpha1.VerbAbortCARotation && op.Force && phases.CA == v1alpha1.RotationAborting
}

// ApplyOperation returns the rotation status after an operation, or an error
// when the operation is not allowed now. It does not modify rot.
func ApplyOperation(rot *v1alpha1.CARotation, op v1alpha1.Operation, pools []v1alpha1.WorkerPool, now metav1.Time) (*v1alpha1.CARotation, error) {
	caVerb := op.Verb.CAVerb()
	if caVerb == "" && op.Verb.ServiceAccountKeyVerb() != "" {
		return rot, nil // a service-account key operation only
	}
	if forcesAbortUnderWay(op, caPhases(rot)) {
		next := rot.DeepCopy()
		if next.AbortForcedTime == nil {
			next.AbortForcedTime = &now
		}
		return next, nil
	}
	if err := Allowed(caVerb, caPhases(rot)); err != nil {
		return nil, err
	}
	next := &v1alpha1.CARotation{}
	if rot != nil {
		next = rot.DeepCopy()
	}
	switch caVerb {
	case v1alpha1.VerbStartCARotation, v1alpha1.VerbStartCARotationWithoutWorkersRollout:
		held := caVerb == v1alpha1.VerbStartCARotationWithoutWorkersRollout
		now = startTime(next.LastInitiationTime, now)
		next.Phase = v1alpha1.RotationPreparing
		if held {
			next.Phase = v1alpha1.RotationPreparingWithoutWorkersRollout
		}
		next.LastInitiationTime = &now
		next.LastInitiationFinishedTime = nil
		next.PendingWorkersRollouts = pendingPools(pools, now, held)
		next.PoolsRolledByHand = nil
		next.CheckedEndpoint = "" // recorded by TrackEndpoint for this rotation
		next.KubeRootCAPublishedTime = nil
		next.AbortRolledBackTime = nil
		next.AbortForcedTime = nil
	case v1alpha1.VerbCompleteCARotation:
		initiated := now // a hand-written Prepared status may lack its start time
		if next.LastInitiationTime != nil {
			initiated = *next.LastInitiationTime
		}
		next.Phase = v1alpha1.RotationFinalizing
		next.LastCompletionTriggeredTime = &now
		next.PendingWorkersRollouts = pendingPools(pools, initiated, false)
	case v1alpha1.VerbAbortCARotation:
		// Every pool rolls back, a held one too: its nodes kept their
		// trust, but a kubelet that renewed its certificate, or a node
		// that joined, since the API server trusted the new client CA got
		// certificates from the new CAs (package kubeletcsr).
		initiated := now // a hand-written status may lack its start time
		if next.LastInitiationTime != nil {
			initiated = *next.LastInitiationTime
		}
		next.Phase = v1alpha1.RotationAborting
		next.LastAbortTriggeredTime = &now
		if op.Force { // a start cleared the last abort's
			next.AbortForcedTime = &now
		}
		next.PendingWorkersRollouts = pendingPools(pools, initiated, false)
		next.KubeRootCAPublishedTime = nil
	case v1alpha1.VerbRotateRolloutWorkers:
		if len(op.Pools) == 0 {
			return nil, fmt.Errorf("%s names no worker pool", v1alpha1.OperationRotateRolloutWorkersPrefix)
		}
		for _, pool := range op.Pools {
			i := slices.IndexFunc(next.PendingWorkersRollouts, func(p v1alpha1.PendingWorkersRollout) bool { return p.Name == pool })
			if i < 0 || !next.PendingWorkersRollouts[i].Held {
				return nil, fmt.Errorf("worker pool %q is not held", pool)
			}
			next.PendingWorkersRollouts[i].Held = false
		}
		next.Phase = v1alpha1.RotationPreparing
	case v1alpha1.VerbRolloutWorkers:
		for _, pool := range op.Pools {
			if !slices.ContainsFunc(next.PendingWorkersRollouts, func(p v1alpha1.PendingWorkersRollout) bool { return p.Name == pool }) {
				return nil, fmt.Errorf("worker pool %q has no pending rollout", pool)
			}
		}
		next = WorkersRolledOut(next, op.Pools)
		for _, pool := range op.Pools {
			if !slices.Contains(next.PoolsRolledByHand, pool) {
				next.PoolsRolledByHand = append(next.PoolsRolledByHand, pool)
			}
		}
		return next, nil
	default:
		// reconcile records nothing; reissue-ca changes the CA inventory,
		// not the rotation (see the reconciler).
		return rot, nil
	}
	return next, nil
}

// AlreadyApplied reports whether the rotation status already reflects the
// operation: the status was written and then the reconcile stopped before
// the annotation was removed.
func AlreadyApplied(rot *v1alpha1.CARotation, op v1alpha1.Operation) bool {
	if rot == nil {
		return false
	}
	switch op.Verb.CAVerb() {
	case v1alpha1.VerbStartCARotation:
		return rot.Phase == v1alpha1.RotationPreparing
	case v1alpha1.VerbStartCARotationWithoutWorkersRollout:
		return rot.Phase == v1alpha1.RotationPreparingWithoutWorkersRollout
	case v1alpha1.VerbCompleteCARotation:
		return rot.Phase == v1alpha1.RotationFinalizing
	case v1alpha1.VerbAbortCARotation:
		// A force that comes once the abort is over has nothing left to do.
		return rot.Phase == v1alpha1.RotationAborting && (!op.Force || rot.AbortForcedTime != nil) ||
			op.Force && rot.Phase == v1alpha1.RotationAborted
	case v1alpha1.VerbRolloutWorkers:
		return !slices.ContainsFunc(rot.PendingWorkersRollouts, func(p v1alpha1.PendingWorkersRollout) bool {
			return slices.Contains(op.Pools, p.Name)
		})
	case v1alpha1.VerbRotateRolloutWorkers:
		// Released pools may have rolled, and the phase moved on, since.
		return !slices.ContainsFunc(rot.PendingWorkersRollouts, func(p v1alpha1.PendingWorkersRollout) bool {
			return p.Held && slices.Contains(op.Pools, p.Name)
		})
	}
	return false
}

// EnterPhase returns the rotation status in a phase reached by observation
// (Decide), with the phase's timestamp. It does not modify rot.
func EnterPhase(rot *v1alpha1.CARotation, phase v1alpha1.CARotationPhase, now metav1.Time) *v1alpha1.CARotation {
	next := &v1alpha1.CARotation{}
	if rot != nil {
		next = rot.DeepCopy()
	}
	next.Phase = phase
	switch phase {
	case v1alpha1.RotationPrepared:
		next.LastInitiationFinishedTime = &now
	case v1alpha1.RotationCompleted:
		next.LastCompletionTime = &now
	case v1alpha1.RotationAborted:
		next.LastAbortTime = &now
	}
	return next
}

// RecordRolledBack returns the rotation status of an abort whose
// certificates and worker pools are back on the old CAs (Decide said so):
// the time it was seen, and every pool but the in-place ones pending again,
// to drop the new CAs from its nodes' trust once they are deleted. In-place
// nodes dropped them in the roll that just ended, which gave them the old
// CAs' trust alone (credentials.NodeTrust); a Replace or Manual pool's new
// machines bootstrap from the published bundles, which keep the new CAs
// until then. The time also tells that second rollout from the first
// (noderenewal). It does not modify rot.
func RecordRolledBack(rot *v1alpha1.CARotation, pools []v1alpha1.WorkerPool, now metav1.Time) *v1alpha1.CARotation {
	next := rot.DeepCopy()
	next.AbortRolledBackTime = &now
	next.PendingWorkersRollouts = pendingPools(slices.DeleteFunc(slices.Clone(pools), func(p v1alpha1.WorkerPool) bool { return p.RollsInPlace() }), now, false)
	return next
}

// RecordKubeRootCAPublished returns the rotation status with the time
// kube-root-ca.crt was first seen carrying both cluster CAs everywhere in
// Preparing (rot itself when there is nothing to record): the start of the
// time pods get to reload it. It does not modify rot.
func RecordKubeRootCAPublished(rot *v1alpha1.CARotation, kubeRootCA Evidence, now metav1.Time) *v1alpha1.CARotation {
	if rot == nil || !rot.Phase.Preparing() || kubeRootCA != EvidencePassed || rot.KubeRootCAPublishedTime != nil {
		return rot
	}
	next := rot.DeepCopy()
	next.KubeRootCAPublishedTime = &now
	return next
}

// WorkersRolledOut returns the rotation status without the named pools in
// pendingWorkersRollouts (rot itself when none is pending). It does not
// modify rot.
func WorkersRolledOut(rot *v1alpha1.CARotation, pools []string) *v1alpha1.CARotation {
	rolled := func(p v1alpha1.PendingWorkersRollout) bool { return slices.Contains(pools, p.Name) }
	if rot == nil || !slices.ContainsFunc(rot.PendingWorkersRollouts, rolled) {
		return rot
	}
	next := rot.DeepCopy()
	next.PendingWorkersRollouts = slices.DeleteFunc(next.PendingWorkersRollouts, rolled)
	return next
}

// PendPoolsAdded returns the rotation status with every pool of pools that
// pendingWorkersRollouts does not name, nor poolsRolledByHand, added to it
// (held when the rotation was started without workers rollout); rot itself
// when there is none, or the rotation is not in phase 1. The cluster
// controller calls it while clients have not moved to the new client CA:
// until then no pool has rolled (a strategy waits for the move, a pool
// reported by hand is recorded), so a pool not named is one added to the
// spec since the start, whose nodes were given certificates from the old CAs
// and must roll with the others. It does not modify rot.
func PendPoolsAdded(rot *v1alpha1.CARotation, pools []v1alpha1.WorkerPool) *v1alpha1.CARotation {
	if rot == nil || !rot.Phase.Preparing() || rot.LastInitiationTime == nil {
		return rot
	}
	var added []v1alpha1.WorkerPool
	for _, p := range pools {
		named := func(pending v1alpha1.PendingWorkersRollout) bool { return pending.Name == p.Name }
		if !slices.ContainsFunc(rot.PendingWorkersRollouts, named) && !slices.Contains(rot.PoolsRolledByHand, p.Name) {
			added = append(added, p)
		}
	}
	if len(added) == 0 {
		return rot
	}
	// Held as the others are in a rotation without workers rollout, also
	// once some were released (the phase is Preparing again then).
	held := rot.Phase == v1alpha1.RotationPreparingWithoutWorkersRollout || len(HeldPools(rot)) > 0
	next := rot.DeepCopy()
	next.PendingWorkersRollouts = append(next.PendingWorkersRollouts, pendingPools(added, *rot.LastInitiationTime, held)...)
	return next
}

// TrackEndpoint records, while a rotation is under way, the endpoint its
// API-server checks run against, following a changed endpoint. It returns
// the rotation status to keep (rot itself when nothing changes) and whether
// the endpoint was removed from the spec after the rotation had recorded
// one: the checks cannot run then, and the rotation must wait for an
// endpoint instead of going on unchecked.
func TrackEndpoint(rot *v1alpha1.CARotation, endpoint string) (next *v1alpha1.CARotation, removed bool) {
	if rot == nil {
		return nil, false
	}
	checked, removed := trackEndpoint(rot.Phase.RotationInProgress(), rot.CheckedEndpoint, endpoint)
	if checked == rot.CheckedEndpoint {
		return rot, removed
	}
	next = rot.DeepCopy()
	next.CheckedEndpoint = checked
	return next, removed
}

// TrackServiceAccountKeyEndpoint is TrackEndpoint for a service-account key
// rotation, whose check of the token Secrets runs against the endpoint in
// Preparing until it passed (NewKeySigningTime): only then is an endpoint
// removed one that holds it.
func TrackServiceAccountKeyEndpoint(rot *v1alpha1.ServiceAccountKeyRotation, endpoint string) (next *v1alpha1.ServiceAccountKeyRotation, removed bool) {
	if rot == nil {
		return nil, false
	}
	checking := rot.Phase == v1alpha1.ServiceAccountKeyPreparing && rot.NewKeySigningTime == nil
	checked, removed := trackEndpoint(checking, rot.CheckedEndpoint, endpoint)
	if checked == rot.CheckedEndpoint {
		return rot, removed
	}
	next = rot.DeepCopy()
	next.CheckedEndpoint = checked
	return next, removed
}

// trackEndpoint is the rule of both: the endpoint to record, given the one
// recorded (checked) and the spec's, and whether the spec's was removed
// after one was recorded.
func trackEndpoint(inProgress bool, checked, endpoint string) (record string, removed bool) {
	switch {
	case !inProgress || endpoint == checked:
		return checked, false
	case endpoint == "":
		return checked, true
	}
	return endpoint, false
}

func pendingPools(pools []v1alpha1.WorkerPool, initiated metav1.Time, held bool) []v1alpha1.PendingWorkersRollout {
	var pending []v1alpha1.PendingWorkersRollout
	for _, p := range pools {
		pending = append(pending, v1alpha1.PendingWorkersRollout{Name: p.Name, LastInitiationTime: &initiated, Held: held})
	}
	return pending
}

// HeldPools returns the names of the pools held until rotate-rollout-workers
// names them.
func HeldPools(rot *v1alpha1.CARotation) []string {
	var held []string
	if rot != nil {
		for _, p := range rot.PendingWorkersRollouts {
			if p.Held {
				held = append(held, p.Name)
			}
		}
	}
	return held
}

func phaseOf(rot *v1alpha1.CARotation) v1alpha1.CARotationPhase {
	if rot == nil {
		return ""
	}
	return rot.Phase
}

// NextStep tells a user what to do in the phase of the CA rotation.
func NextStep(phases Phases) string {
	rollHeld := "roll the held worker pools with " + v1alpha1.OperationAnnotation + "=" + v1alpha1.OperationRotateRolloutWorkersPrefix + "<pool>[,<pool>]"
	switch phases.CA {
	case v1alpha1.RotationPreparing:
		if phases.PoolsHeld {
			return rollHeld
		}
		return "wait until the phase is Prepared"
	case v1alpha1.RotationPreparingWithoutWorkersRollout:
		return "wait until the phase is " + string(v1alpha1.RotationWaitingForWorkersRollout) + ", then " + rollHeld
	case v1alpha1.RotationWaitingForWorkersRollout:
		return rollHeld
	case v1alpha1.RotationPrepared:
		return "complete it with " + v1alpha1.OperationAnnotation + "=" + v1alpha1.OperationCompleteCARotation
	case v1alpha1.RotationFinalizing:
		return "wait until the phase is Completed"
	case v1alpha1.RotationAborting:
		return "wait until the phase is Aborted"
	default:
		return "start one with " + v1alpha1.OperationAnnotation + "=" + v1alpha1.OperationStartCARotation
	}
}

// PhaseName is a phase as shown to a person: the empty phase is named.
func PhaseName(phase v1alpha1.CARotationPhase) string {
	if phase == "" {
		return "none (never rotated)"
	}
	return string(phase)
}
