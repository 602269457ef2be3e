// Package rotation holds the decisions of a CA rotation as pure functions:
// how an operation changes the rotation status, which CA signs a certificate
// in each phase, when the old CAs may be dropped, and when a phase is done.
// The reconciler gathers the facts and carries the decisions out.
package rotation

import (
	"fmt"
	"slices"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
	"github.com/carousel-dev/carousel/pkg/credentials"
)

// ApplyOperation returns the rotation status after an operation, or an error
// when the operation is not allowed now (the webhook refuses those; this is
// the last line of defence when it was bypassed). It does not modify rot.
func ApplyOperation(rot *v1alpha1.CARotation, op v1alpha1.Operation, pools []v1alpha1.WorkerPool, now metav1.Time) (*v1alpha1.CARotation, error) {
	if op.Verb == v1alpha1.OperationReconcile {
		return rot, nil
	}
	next := &v1alpha1.CARotation{}
	if rot != nil {
		next = rot.DeepCopy()
	}
	switch op.Verb {
	case v1alpha1.OperationStartCARotation:
		if next.Phase.RotationInProgress() {
			return nil, fmt.Errorf("cannot start a CA rotation in phase %s", next.Phase)
		}
		next.Phase = v1alpha1.RotationPreparing
		next.LastInitiationTime = &now
		next.LastInitiationFinishedTime = nil
		next.PendingWorkersRollouts = pendingPools(pools, now)
		next.CheckedEndpoint = "" // recorded by TrackEndpoint for this rotation
	case v1alpha1.OperationCompleteCARotation:
		if next.Phase != v1alpha1.RotationPrepared {
			return nil, fmt.Errorf("cannot complete a CA rotation in phase %q", next.Phase)
		}
		initiated := now // a hand-written Prepared status may lack its start time
		if next.LastInitiationTime != nil {
			initiated = *next.LastInitiationTime
		}
		next.Phase = v1alpha1.RotationFinalizing
		next.LastCompletionTriggeredTime = &now
		next.PendingWorkersRollouts = pendingPools(pools, initiated)
	case v1alpha1.OperationRolloutWorkers:
		for _, pool := range op.Pools {
			if !slices.ContainsFunc(next.PendingWorkersRollouts, func(p v1alpha1.PendingWorkersRollout) bool { return p.Name == pool }) {
				return nil, fmt.Errorf("worker pool %q has no pending rollout", pool)
			}
		}
		next.PendingWorkersRollouts = slices.DeleteFunc(next.PendingWorkersRollouts, func(p v1alpha1.PendingWorkersRollout) bool {
			return slices.Contains(op.Pools, p.Name)
		})
	case v1alpha1.OperationReissueCA:
		// It changes the CA inventory, not the rotation; see ForgetCAs.
		if next.Phase.RotationInProgress() {
			return nil, fmt.Errorf("cannot reissue a CA in phase %s: restore the lost CA Secret", next.Phase)
		}
		return rot, nil
	default:
		return nil, fmt.Errorf("unknown operation %q", op.Verb)
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
	switch op.Verb {
	case v1alpha1.OperationStartCARotation:
		return rot.Phase == v1alpha1.RotationPreparing
	case v1alpha1.OperationCompleteCARotation:
		return rot.Phase == v1alpha1.RotationFinalizing
	case v1alpha1.OperationRolloutWorkers:
		return !slices.ContainsFunc(rot.PendingWorkersRollouts, func(p v1alpha1.PendingWorkersRollout) bool {
			return slices.Contains(op.Pools, p.Name)
		})
	}
	return false
}

func pendingPools(pools []v1alpha1.WorkerPool, initiated metav1.Time) []v1alpha1.PendingWorkersRollout {
	var pending []v1alpha1.PendingWorkersRollout
	for _, p := range pools {
		pending = append(pending, v1alpha1.PendingWorkersRollout{Name: p.Name, LastInitiationTime: &initiated})
	}
	return pending
}

// TrackEndpoint records, while a rotation is under way, the endpoint its
// API-server checks run against, following a changed endpoint. It returns
// the rotation status to keep (rot itself when nothing changes) and whether
// the endpoint was removed from the spec after the rotation had recorded
// one: the checks cannot run then, and the rotation must wait for an
// endpoint instead of going on unchecked.
func TrackEndpoint(rot *v1alpha1.CARotation, endpoint string) (next *v1alpha1.CARotation, removed bool) {
	switch {
	case rot == nil || !rot.Phase.RotationInProgress() || endpoint == rot.CheckedEndpoint:
		return rot, false
	case endpoint == "":
		return rot, true
	}
	next = rot.DeepCopy()
	next.CheckedEndpoint = endpoint
	return next, false
}

// Generation picks one of a role's two CAs.
type Generation string

const (
	// Current is the newest CA of a role (the new one during a rotation).
	Current Generation = "current"
	// Previous is the old CA, kept during a rotation.
	Previous Generation = "previous"
)

// Issuer decides which CA of its role signs a certificate.
//
// Outside a rotation and in Finalizing that is the current CA. In Preparing
// and Prepared a certificate renewed in Preparing (a client) moves to the new
// CA once every consumer trusts both CAs, and stays there; everything else
// (servers, and the API server's client certificate for kubelets, which nodes
// trust only after their rollout) stays on the old CA until Finalizing.
func Issuer(renewIn credentials.RenewalPhase, phase v1alpha1.CARotationPhase, trustEstablished, signedByCurrent bool) Generation {
	switch phase {
	case v1alpha1.RotationPreparing, v1alpha1.RotationPrepared:
		if renewIn == credentials.RenewInPreparing && (trustEstablished || signedByCurrent) {
			return Current
		}
		return Previous
	default:
		return Current
	}
}

// Evidence is what was observed of the managed cluster's API server.
type Evidence string

const (
	// EvidencePassed means the API server behaves as the phase requires.
	EvidencePassed Evidence = "Passed"
	// EvidenceSkipped means the Cluster names no endpoint, so nothing can be checked.
	EvidenceSkipped Evidence = "Skipped"
	// EvidencePending means nothing conclusive was observed (yet).
	EvidencePending Evidence = "Pending"
)

// Facts are what a reconcile observed about a rotation.
type Facts struct {
	Phase v1alpha1.CARotationPhase
	// NewCAsPersisted: every role's CA Secret holds the CA of this rotation.
	NewCAsPersisted bool
	// OldCAsRemoved: no role keeps a previous CA.
	OldCAsRemoved bool
	// ClientsOnNewCA: every certificate renewed in Preparing is signed by the current CA.
	ClientsOnNewCA bool
	// AllOnNewCA: every certificate is signed by the current CA.
	AllOnNewCA bool
	// ConsumersRolledOut: every consumer runs with the credentials written now.
	ConsumersRolledOut bool
	// PendingWorkerPools counts pools whose rollout is still awaited.
	PendingWorkerPools int
	Evidence           Evidence
}

// Wait names what a phase is waiting for: a condition reason and a message.
type Wait struct {
	Reason  string
	Message string
	// PollManaged says that what the phase waits for happens in the managed
	// cluster (its API server, its nodes), which raises no event in the
	// management cluster: the reconciler must look again on its own.
	PollManaged bool
}

// Condition reasons of the CARotationInProgress condition.
const (
	ReasonWaitingForNewCAs     = "WaitingForNewCAs"
	ReasonWaitingForClients    = "WaitingForClientCertificates"
	ReasonWaitingForServers    = "WaitingForServerCertificates"
	ReasonWaitingForOldCADrop  = "WaitingForOldCARemoval"
	ReasonWaitingForConsumers  = "WaitingForConsumerRollout"
	ReasonWaitingForWorkers    = "WaitingForWorkerRollout"
	ReasonWaitingForEvidence   = "WaitingForEvidence"
	ReasonWaitingForCompletion = "WaitingForCompleteOperation"
	ReasonNoRotation           = "NoRotationInProgress"
)

// CanDropOldCAs reports whether Finalizing may delete the old CAs: every
// certificate, servers included, is on the new CA and every consumer serves
// and presents it.
func CanDropOldCAs(f Facts) bool {
	return f.Phase == v1alpha1.RotationFinalizing && f.AllOnNewCA && f.ConsumersRolledOut
}

// Next returns the phase the rotation moves to (the same phase when it has to
// wait) and what it waits for.
func Next(f Facts) (v1alpha1.CARotationPhase, *Wait) {
	switch f.Phase {
	case v1alpha1.RotationPreparing:
		if w := firstWait(
			check(f.NewCAsPersisted, ReasonWaitingForNewCAs, "generating and storing the new CAs"),
			check(f.ConsumersRolledOut, ReasonWaitingForConsumers, "waiting for the control-plane workloads to roll out"),
			// Clients move once the managed API server accepts the new client CA.
			inManagedCluster(check(f.ClientsOnNewCA, ReasonWaitingForClients, "client certificates move to the new CAs once every consumer, and the API server, trusts both")),
			inManagedCluster(check(f.PendingWorkerPools == 0, ReasonWaitingForWorkers, fmt.Sprintf("%d worker pool(s) still to roll", f.PendingWorkerPools))),
			inManagedCluster(check(f.Evidence != EvidencePending, ReasonWaitingForEvidence, "waiting for the API server to accept a client certificate from the new client CA")),
		); w != nil {
			return f.Phase, w
		}
		return v1alpha1.RotationPrepared, nil
	case v1alpha1.RotationPrepared:
		return f.Phase, &Wait{Reason: ReasonWaitingForCompletion, Message: "every client uses the new CAs; update your own credentials, then annotate " +
			v1alpha1.OperationAnnotation + "=" + v1alpha1.OperationCompleteCARotation}
	case v1alpha1.RotationFinalizing:
		if w := firstWait(
			check(f.AllOnNewCA, ReasonWaitingForServers, "re-issuing server certificates from the new CAs"),
			check(f.OldCAsRemoved, ReasonWaitingForOldCADrop, "waiting for servers to present the new certificates before the old CAs are dropped"),
			check(f.ConsumersRolledOut, ReasonWaitingForConsumers, "waiting for the control-plane workloads to roll out"),
			inManagedCluster(check(f.PendingWorkerPools == 0, ReasonWaitingForWorkers, fmt.Sprintf("%d worker pool(s) still to roll", f.PendingWorkerPools))),
			inManagedCluster(check(f.Evidence != EvidencePending, ReasonWaitingForEvidence, "waiting for the API server to reject the old client CA and serve a certificate from the new cluster CA")),
		); w != nil {
			return f.Phase, w
		}
		return v1alpha1.RotationCompleted, nil
	}
	return f.Phase, nil
}

func check(ok bool, reason, message string) *Wait {
	if ok {
		return nil
	}
	return &Wait{Reason: reason, Message: message}
}

// inManagedCluster marks a wait as one that must be polled.
func inManagedCluster(w *Wait) *Wait {
	if w != nil {
		w.PollManaged = true
	}
	return w
}

func firstWait(waits ...*Wait) *Wait {
	for _, w := range waits {
		if w != nil {
			return w
		}
	}
	return nil
}

// PollDelay is how long a reconcile waiting on the managed cluster waits
// before it looks again: base at first and, while a check keeps failing
// (since failingSince; zero when nothing failed), a quarter of the time it
// has been failing, at most maximum. An API server that comes back is
// noticed within a quarter of its outage, and a long outage costs a probe
// every few minutes instead of every few seconds.
func PollDelay(failingSince, now time.Time, base, maximum time.Duration) time.Duration {
	if failingSince.IsZero() || !now.After(failingSince) {
		return base
	}
	return min(max(now.Sub(failingSince)/4, base), max(maximum, base))
}
