package cluster

import (
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
	"github.com/carousel-dev/carousel/pkg/clip"
	"github.com/carousel-dev/carousel/pkg/credentials"
	"github.com/carousel-dev/carousel/pkg/maintenance"
	"github.com/carousel-dev/carousel/pkg/rotation"
)

// updateStatus turns what a pass observed into the Cluster's conditions and
// CA inventory; besides it, only applyOperation sets a condition
// (CARotationRecommended). err is how the pass ended. What a pass did not
// get to observe keeps its condition. A pass that stopped on a cache behind
// the API server (errStaleCache, or a write that conflicted: an object
// changed since the cache showed it), and is retried, says nothing of the
// credentials or of the spec: Ready and observedGeneration stay as they were.
func (r *Reconciler) updateStatus(s *scope, err error) {
	c := s.cluster
	stale := staleRead(err)
	if !stale {
		r.setReadyCondition(c, err)
	}
	switch {
	case s.reachability != nil:
		r.setCondition(c, *s.reachability)
	case noCheckDue(c, s.facts.Evidence != ""):
		r.setCondition(c, *reachability(metav1.ConditionUnknown, v1alpha1.ReasonNoCheckDue, "no check of the endpoint due yet"))
	}
	r.trackFailingChecks(client.ObjectKeyFromObject(c), s.managedCheckFailed, s.decision != nil)
	// A pass that ends on a conflict, or a cache behind, is looked at again
	// at once; one that fails otherwise leaves no verdict of the old-CA
	// usage gate to complete on.
	if err != nil && !stale {
		forgetOldCAUsage(c)
		r.setOldCAsUnusedCondition(c)
	} else if s.decision != nil {
		r.setOldCAsUnusedCondition(c)
	}
	if s.decision != nil {
		r.updateInventory(c, s.cas)
		r.setRotationCondition(c, s.decision.Phase, s.decision.Wait, s.waitingPools)
		r.setServiceAccountKeyRotationCondition(c, s.keyDecision)
	}
	s.wakeAt(r.setRecommendationCondition(c))
	s.wakeAt(r.setMaintenanceCondition(c))
	s.wakeAt(r.setAutomaticCondition(c))
	if !stale {
		c.Status.ObservedGeneration = c.Generation
	}
}

// conditionWarning is a Warning event a condition's change calls for.
type conditionWarning struct{ reason, message string }

// newConditionWarnings are the Warning events for the conditions that call
// on the user in now and did not in before: CAExpiringSoon and
// CARotationRecommended turned True, and Ready turned to a blocked reason
// (every reason of a False Ready but ReconcileFailed) or to another message
// of one.
func newConditionWarnings(before, now []metav1.Condition) []conditionWarning {
	var out []conditionWarning
	if ready := meta.FindStatusCondition(now, v1alpha1.ConditionReady); ready != nil && ready.Status == metav1.ConditionFalse &&
		ready.Reason != v1alpha1.ReasonReconcileFailed {
		if prev := meta.FindStatusCondition(before, v1alpha1.ConditionReady); prev == nil || prev.Reason != ready.Reason || prev.Message != ready.Message {
			out = append(out, conditionWarning{ready.Reason, ready.Message})
		}
	}
	for _, t := range []struct{ condition, reason string }{
		{v1alpha1.ConditionCAExpiring, v1alpha1.EventCAExpiringSoon},
		{v1alpha1.ConditionCARotationRecommended, v1alpha1.EventCARotationRecommended},
	} {
		if cond := meta.FindStatusCondition(now, t.condition); cond != nil && cond.Status == metav1.ConditionTrue &&
			!meta.IsStatusConditionTrue(before, t.condition) {
			out = append(out, conditionWarning{t.reason, cond.Message})
		}
	}
	return out
}

// trackFailingChecks keeps since when the checks of a Cluster's managed API
// server have failed, which the managed polls back off from: from a pass in
// which one failed on, until a pass that decided its step saw none fail (a
// check passed, or none was due: the rotation moved on).
func (r *Reconciler) trackFailingChecks(key types.NamespacedName, checkFailed, decided bool) {
	switch {
	case checkFailed:
		r.failingChecks.start(key, r.Clock.Now())
	case decided:
		r.failingChecks.forget(key)
	}
}

// noCheckDue says whether ControlPlaneReachable is to say that no check is
// due, in a pass that checked nothing of the endpoint the spec names: there
// is no condition yet and the pass got to the evidence phase, or it still
// speaks of an endpoint that was empty or removed from the spec.
func noCheckDue(c *v1alpha1.Cluster, evidenceGathered bool) bool {
	if c.Spec.ControlPlane.Endpoint == "" {
		return false
	}
	cond := meta.FindStatusCondition(c.Status.Conditions, v1alpha1.ConditionControlPlaneReachable)
	if cond == nil {
		return evidenceGathered
	}
	return cond.Reason == v1alpha1.ReasonNoEndpoint || cond.Reason == v1alpha1.ReasonEndpointRemoved
}

// setMaintenanceCondition says whether an operation queued for the
// maintenance window waits, and why, and returns when the window opens next
// if that is what it waits for.
func (r *Reconciler) setMaintenanceCondition(c *v1alpha1.Cluster) time.Time {
	cond := metav1.Condition{Type: v1alpha1.ConditionMaintenanceOperationQueued, Status: metav1.ConditionFalse,
		Reason: v1alpha1.ReasonNothingQueued, Message: "no operation waits for the maintenance window"}
	var next time.Time
	if value, queued := c.Annotations[v1alpha1.MaintenanceOperationAnnotation]; queued {
		d := maintenance.Decide(value, c.Spec.Maintenance, rotation.PhasesOf(c), r.Clock.Now())
		next = d.Next
		op, _ := v1alpha1.ParseOperation(value)
		switch held := gateClosed(value, c); {
		case !d.Run:
			cond.Status, cond.Reason, cond.Message = metav1.ConditionTrue, d.Reason, d.Message
		case held != nil:
			cond.Status, cond.Reason = metav1.ConditionTrue, v1alpha1.ReasonOldCADependents
			cond.Message = fmt.Sprintf("%s waits for the old-CA usage gate: %v", value, held)
		case r.completionAwaitsNodes(op, c):
			cond.Status, cond.Reason = metav1.ConditionTrue, v1alpha1.ReasonOldCADependents
			cond.Message = value + " waits for the old-CA usage gate: " + awaitingNodes
		default:
			// The window opened, or the gate, in this pass: the next one
			// carries it out, unless it fails before (the managed cluster
			// unreachable); the operation is queued until then.
			cond.Status, cond.Reason = metav1.ConditionTrue, v1alpha1.ReasonMaintenanceWindowOpen
			cond.Message = value + " is carried out at the next pass: the maintenance window is open"
			if pending, ok := c.Annotations[v1alpha1.OperationAnnotation]; ok {
				cond.Message = fmt.Sprintf("%s is carried out once %s=%s is: the maintenance window is open", value, v1alpha1.OperationAnnotation, pending)
			}
			next = r.Clock.Now()
		}
	}
	r.setCondition(c, cond)
	return next
}

// setAutomaticCondition says, on a Cluster with spec.caRotation.automatic,
// which operation it schedules, when and why, and returns when to look
// again: when it becomes due, or when the window opens next once it is.
func (r *Reconciler) setAutomaticCondition(c *v1alpha1.Cluster) time.Time {
	if c.Spec.CARotation.Automatic == nil {
		meta.RemoveStatusCondition(&c.Status.Conditions, v1alpha1.ConditionAutomaticCARotationScheduled)
		return time.Time{}
	}
	now := r.Clock.Now()
	step := rotation.AutomaticOf(c)
	cond := metav1.Condition{Type: v1alpha1.ConditionAutomaticCARotationScheduled, Status: metav1.ConditionTrue}
	var next time.Time
	switch {
	case step.Operation == "" && c.CARotationPhase() == v1alpha1.RotationPrepared && c.Spec.CARotation.Automatic.CompleteAfter == nil:
		cond.Status, cond.Reason = metav1.ConditionFalse, v1alpha1.ReasonNothingScheduled
		cond.Message = fmt.Sprintf("Prepared, and spec.caRotation.automatic.completeAfter is not set: complete the rotation with %s=%s",
			v1alpha1.OperationAnnotation, v1alpha1.OperationCompleteCARotation)
	case step.Operation == "":
		cond.Status, cond.Reason = metav1.ConditionFalse, v1alpha1.ReasonNothingScheduled
		cond.Message = fmt.Sprintf("nothing is scheduled while the rotation is in phase %s", rotation.PhaseName(c.CARotationPhase()))
		switch c.CARotationPhase() {
		case "":
			cond.Message = "nothing is scheduled until Carousel has issued the Cluster's CAs"
		case v1alpha1.RotationAborted:
			cond.Message = fmt.Sprintf("the last rotation was aborted: nothing is scheduled until a rotation is started with %s=%s",
				v1alpha1.OperationAnnotation, v1alpha1.OperationStartCARotation)
		}
	case step.Waiting != "":
		cond.Reason = v1alpha1.ReasonOldCADependents
		cond.Message = fmt.Sprintf("%s is due from %s (%s), and waits until nothing depends on the old CAs: %s", step.Operation,
			step.Due.UTC().Format(time.RFC3339), step.Why, step.Waiting)
	case !step.DueAt(now):
		cond.Reason, next = v1alpha1.ReasonAutomaticOperationScheduled, step.Due
		cond.Message = fmt.Sprintf("%s is due at %s, and runs in the first maintenance window from then: %s", step.Operation,
			step.Due.UTC().Format(time.RFC3339), step.Why)
	default:
		d := maintenance.Decide(step.Operation, c.Spec.Maintenance, rotation.PhasesOf(c), now)
		cond.Reason, cond.Message, next = d.Reason, fmt.Sprintf("%s is due: %s; %s", step.Operation, step.Why, d.Message), d.Next
		if d.Run {
			cond.Reason = v1alpha1.ReasonAutomaticOperationScheduled
			cond.Message = fmt.Sprintf("%s is due (%s) and runs once the operation pending on the Cluster is handled", step.Operation, step.Why)
			switch op, _ := v1alpha1.ParseOperation(step.Operation); {
			case operationPending(c):
			case r.completionAwaitsNodes(op, c):
				cond.Reason = v1alpha1.ReasonOldCADependents
				cond.Message = fmt.Sprintf("%s is due (%s), and waits for the old-CA usage gate: %s", step.Operation, step.Why, awaitingNodes)
			default:
				// It became due during this pass: the next one carries it out.
				cond.Message, next = fmt.Sprintf("%s is due (%s) and runs now", step.Operation, step.Why), now
			}
		}
	}
	r.setCondition(c, cond)
	return next
}

// setRecommendationCondition says whether the manager's policy recommends
// starting or completing a CA rotation (a Warning event announces it once
// written: statusWritten), and returns when it will if nothing else changes
// (zero: never).
func (r *Reconciler) setRecommendationCondition(c *v1alpha1.Cluster) time.Time {
	rec, next := rotation.Recommend(c.CARotation(), c.CreationTimestamp.Time, rotation.AutomaticOf(c), r.Recommendations, r.Clock.Now())
	cond := metav1.Condition{Type: v1alpha1.ConditionCARotationRecommended, Status: metav1.ConditionFalse, Reason: v1alpha1.ReasonNothingDue,
		Message: "nothing is due"}
	switch {
	case rec != nil:
		cond.Status, cond.Reason, cond.Message = metav1.ConditionTrue, rec.Reason, rec.Message
	case !next.IsZero():
		cond.Message = "nothing is due before " + next.UTC().Format(time.RFC3339)
	}
	r.setCondition(c, cond)
	r.Metrics.recommendation(c, rec)
	return next
}

// setCondition stamps a condition with the Cluster's generation and the
// time, and sets it.
func (r *Reconciler) setCondition(c *v1alpha1.Cluster, cond metav1.Condition) {
	// A message past the schema's limit would have the API server refuse
	// every status write.
	cond.Message = clip.Bytes(cond.Message, maxConditionMessage)
	cond.ObservedGeneration, cond.LastTransitionTime = c.Generation, r.now()
	meta.SetStatusCondition(&c.Status.Conditions, cond)
}

// updateInventory records every role's CAs (never key material), the
// earliest CA expiry, and the CAExpiringSoon condition.
func (r *Reconciler) updateInventory(c *v1alpha1.Cluster, all map[v1alpha1.CARole]*credentials.CAs) {
	if c.Status.Credentials == nil {
		c.Status.Credentials = &v1alpha1.ClusterCredentials{}
	}
	inventory := make([]v1alpha1.CertificateAuthorityInventory, 0, len(all))
	var earliest *metav1.Time
	var earliestRole v1alpha1.CARole
	var earliestPrevious bool
	for _, role := range v1alpha1.CARoles() {
		entry := v1alpha1.CertificateAuthorityInventory{
			Role: role, Current: credentials.CertificateInfo(all[role].Current), Previous: credentials.CertificateInfo(all[role].Previous),
		}
		for _, info := range []*v1alpha1.CertificateInfo{entry.Current, entry.Previous} {
			if info != nil && (earliest == nil || info.NotAfter.Before(earliest)) {
				earliest, earliestRole, earliestPrevious = info.NotAfter.DeepCopy(), role, info == entry.Previous
			}
		}
		inventory = append(inventory, entry)
	}
	c.Status.Credentials.CertificateAuthorities = inventory
	c.Status.Credentials.EarliestCAExpiry = earliest

	cond := metav1.Condition{Type: v1alpha1.ConditionCAExpiring, Status: metav1.ConditionFalse, Reason: v1alpha1.ReasonCAValid,
		Message: fmt.Sprintf("no CA expires within %s", r.CAExpiryWarning)}
	if earliest != nil && earliest.Sub(r.Clock.Now()) < r.CAExpiryWarning {
		cond.Status, cond.Reason = metav1.ConditionTrue, v1alpha1.ReasonCAExpiring
		what, advice := "the "+string(earliestRole)+" CA", "start a CA rotation with "+v1alpha1.OperationAnnotation+"="+v1alpha1.OperationStartCARotation
		if phase := c.CARotationPhase(); phase.RotationInProgress() {
			// The webhook refuses a start now: say what the rotation under
			// way needs. It drops the previous CA: the old one, or, once an
			// abort swapped them back, the new one.
			if earliestPrevious {
				what = "the previous " + string(earliestRole) + " CA, which the rotation under way drops,"
			}
			advice = rotation.NextStep(rotation.PhasesOf(c))
		}
		cond.Message = fmt.Sprintf("%s expires at %s: %s", what, earliest.UTC().Format("2006-01-02T15:04:05Z"), advice)
	}
	r.setCondition(c, cond)
}

// setServiceAccountKeyRotationCondition says whether a service-account key
// rotation is under way and what it waits for (d; nil outside one). A
// Cluster whose key was never rotated has no such condition.
func (r *Reconciler) setServiceAccountKeyRotationCondition(c *v1alpha1.Cluster, d *rotation.ServiceAccountKeyDecision) {
	if c.ServiceAccountKeyRotation() == nil {
		return
	}
	cond := metav1.Condition{Type: v1alpha1.ConditionServiceAccountKeyRotation, Status: metav1.ConditionFalse, Reason: string(v1alpha1.ReasonNoRotation),
		Message: "no service-account key rotation is under way"}
	if d != nil && d.Phase.RotationInProgress() {
		cond.Status, cond.Reason, cond.Message = metav1.ConditionTrue, string(d.Reason), fmt.Sprintf("%s: %s", d.Phase, d.Message)
	}
	r.setCondition(c, cond)
}

// maxConditionMessage is the schema's limit on a condition's message
// (metav1.Condition).
const maxConditionMessage = 32768

// setRotationCondition says whether a rotation is under way and what it waits for.
func (r *Reconciler) setRotationCondition(c *v1alpha1.Cluster, phase v1alpha1.CARotationPhase, wait *rotation.Wait, waitingPools []string) {
	cond := metav1.Condition{Type: v1alpha1.ConditionCARotation, Status: metav1.ConditionFalse, Reason: string(v1alpha1.ReasonNoRotation),
		Message: "no CA rotation is under way"}
	if phase.RotationInProgress() && wait != nil {
		cond.Status, cond.Reason, cond.Message = metav1.ConditionTrue, string(wait.Reason), fmt.Sprintf("%s: %s", phase, wait.Message)
		if wait.Reason == v1alpha1.ReasonWaitingForWorkers && len(waitingPools) > 0 {
			cond.Message += "; " + strings.Join(waitingPools, "; ")
		}
	}
	r.setCondition(c, cond)
}
