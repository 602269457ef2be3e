package rotation

import (
	"fmt"
	"time"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
)

// RecommendationPolicy says when Carousel recommends acting on a cluster's
// CAs. A zero duration turns its recommendation off.
type RecommendationPolicy struct {
	// RotationInterval is how long after the last completed rotation (or the
	// Cluster's creation, when it was never rotated) a new rotation is
	// recommended.
	RotationInterval time.Duration
	// PreparedWarning is how long a rotation may stay Prepared before its
	// completion is recommended: until then every client and server trusts
	// the old CAs as well as the new ones.
	PreparedWarning time.Duration
}

// Recommendation is advice on a cluster's CA rotation, for the
// CARotationRecommended condition and the admission webhook's API warning.
type Recommendation struct {
	// Reason is ReasonRotationDue or ReasonCompletionDue.
	Reason  string
	Message string
}

// FollowedBy reports whether an operation annotation of this value acts on
// the advice: one that starts a CA rotation (alone or with the
// service-account key) when a rotation is due; one that completes it
// (forced or not, alone or with the key) or aborts it when its completion is.
// A value that is no operation follows nothing.
func (r *Recommendation) FollowedBy(operation string) bool {
	op, err := v1alpha1.ParseOperation(operation)
	if err != nil {
		return false
	}
	switch r.Reason {
	case v1alpha1.ReasonRotationDue:
		return op.Verb.StartsCARotation()
	case v1alpha1.ReasonCompletionDue:
		return op.Verb.CAVerb() == v1alpha1.VerbCompleteCARotation || op.Verb == v1alpha1.VerbAbortCARotation
	}
	return false
}

// AutomaticGrace is how long past its due time a step of
// spec.caRotation.automatic may wait for the maintenance window: the next
// one opens within a day, and lasts at most maintenance.MaxWindow.
const AutomaticGrace = 24*time.Hour + 6*time.Hour

// Recommend returns the recommendation in force at now for a rotation in
// the state rot of a Cluster created at created, or nil, and when the next
// recommendation comes into force if nothing else changes (zero when none
// will). A rotation under way (Preparing, Finalizing) is recommended nothing:
// the rotation condition says what it waits for. The step the Cluster's
// spec.caRotation.automatic schedules (scheduled, AutomaticOf) is Carousel's
// to take: it is recommended only once it is AutomaticGrace overdue, or
// when something holds it (a completion the old-CA usage gate holds).
func Recommend(rot *v1alpha1.CARotation, created time.Time, scheduled AutomaticStep, policy RecommendationPolicy, now time.Time) (*Recommendation, time.Time) {
	var due time.Time
	var rec *Recommendation
	operation := v1alpha1.OperationStartCARotation
	switch phase := phaseOf(rot); {
	case phase == v1alpha1.RotationPrepared:
		since, ok := preparedSince(rot)
		if policy.PreparedWarning <= 0 || !ok {
			return nil, time.Time{}
		}
		due, operation = since.Add(policy.PreparedWarning), v1alpha1.OperationCompleteCARotation
		rec = &Recommendation{Reason: v1alpha1.ReasonCompletionDue,
			Message: fmt.Sprintf("the CA rotation has been Prepared since %s, longer than %s: until it is completed every client and server "+
				"trusts the old CAs too; complete it with %s=%s", since.UTC().Format(time.RFC3339), policy.PreparedWarning, v1alpha1.OperationAnnotation, v1alpha1.OperationCompleteCARotation)}
	case phase.RotationInProgress():
		return nil, time.Time{}
	default:
		if policy.RotationInterval <= 0 {
			return nil, time.Time{}
		}
		since, rotated := lastRenewed(rot, created)
		what := "the Cluster was created at %s and its CAs were never rotated"
		if rotated {
			what = "the last CA rotation completed at %s"
		}
		due = since.Add(policy.RotationInterval)
		rec = &Recommendation{Reason: v1alpha1.ReasonRotationDue,
			Message: fmt.Sprintf(what+", longer than %s ago: start a CA rotation with %s=%s", since.UTC().Format(time.RFC3339), policy.RotationInterval,
				v1alpha1.OperationAnnotation, v1alpha1.OperationStartCARotation)}
	}
	if scheduled.Operation == operation && scheduled.Waiting == "" {
		if overdue := scheduled.Due.Add(AutomaticGrace); overdue.After(due) {
			due = overdue
		}
	}
	if now.Before(due) {
		return nil, due
	}
	return rec, time.Time{}
}

// lastRenewed is when the Cluster's CAs were last new: when the last rotation
// completed (rotated), or when the Cluster was created.
func lastRenewed(rot *v1alpha1.CARotation, created time.Time) (at time.Time, rotated bool) {
	if rot != nil && rot.LastCompletionTime != nil {
		return rot.LastCompletionTime.Time, true
	}
	return created, false
}

// preparedSince is when the rotation became Prepared; false when the status
// does not say (written by hand).
func preparedSince(rot *v1alpha1.CARotation) (time.Time, bool) {
	if rot == nil || rot.LastInitiationFinishedTime == nil {
		return time.Time{}, false
	}
	return rot.LastInitiationFinishedTime.Time, true
}
