package rotation

import (
	"fmt"
	"time"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
)

// AutomaticStep is the operation spec.caRotation.automatic schedules next.
type AutomaticStep struct {
	// Operation is the value of the operation annotation that carries the
	// step out; empty when nothing is scheduled in this phase.
	Operation string
	// Due is when Operation becomes due; it waits for the maintenance window
	// from then on.
	Due time.Time
	// Why says what made it due, for the condition and the event.
	Why string
	// Waiting says what holds the step besides its time and the maintenance
	// window: a completion waits for the old-CA usage gate.
	Waiting string
}

// DueAt reports whether the step is due at now, and nothing holds it.
func (s AutomaticStep) DueAt(now time.Time) bool {
	return s.Operation != "" && s.Waiting == "" && !now.Before(s.Due)
}

// Automatic returns what policy schedules for a rotation in the state rot of
// a Cluster created at created, whose CAs are cas (the status inventory):
//   - outside a rotation (never rotated, or Completed), start-ca-rotation,
//     due when the current CA of any role has used
//     policy.ValidityUsedPercent of its validity, or policy.Interval after
//     the last completion (the creation, if it never rotated), whichever
//     comes first;
//   - in Prepared, complete-ca-rotation, due policy.CompleteAfter after the
//     rotation became Prepared, and waiting while the old-CA usage gate
//     (rot.OldCAUsage) names anyone; nothing when CompleteAfter is unset;
//   - in any other phase, nothing: the rotation is under way, waits for
//     held worker pools, which only the user releases, or was aborted,
//     which a rotation started by itself would undo: a user starts the
//     next one.
//
// A nil policy schedules nothing.
func Automatic(policy *v1alpha1.AutomaticCARotation, rot *v1alpha1.CARotation, cas []v1alpha1.CertificateAuthorityInventory, created time.Time) AutomaticStep {
	if policy == nil {
		return AutomaticStep{}
	}
	switch phase := phaseOf(rot); {
	case phase == v1alpha1.RotationPrepared:
		since, ok := preparedSince(rot)
		completeAfter, set := policy.CompleteAfterOrNone()
		if !set || !ok {
			return AutomaticStep{}
		}
		step := AutomaticStep{Operation: v1alpha1.OperationCompleteCARotation, Due: since.Add(completeAfter),
			Why: fmt.Sprintf("the rotation has been Prepared since %s for spec.caRotation.automatic.completeAfter (%s)", formatTime(since), completeAfter)}
		switch {
		case rot.OldCAUsage == nil:
			step.Waiting = "the old-CA usage gate was not evaluated yet"
		case rot.OldCAUsage.Total > 0:
			step.Waiting = DescribeOldCAUsage(rot.OldCAUsage)
		}
		return step
	case phase.RotationInProgress(), phase == v1alpha1.RotationAborted:
		// Aborted: whatever made the rotation due still holds, and starting
		// it again by itself would undo the user's abort.
		return AutomaticStep{}
	}
	var step AutomaticStep
	consider := func(due time.Time, why string) {
		if step.Operation == "" || due.Before(step.Due) {
			step = AutomaticStep{Operation: v1alpha1.OperationStartCARotation, Due: due, Why: why}
		}
	}
	percent := policy.ValidityUsedPercentOrDefault()
	for _, ca := range cas {
		if ca.Current == nil {
			continue
		}
		from, to := ca.Current.NotBefore.Time, ca.Current.NotAfter.Time
		validity := to.Sub(from)
		if validity <= 0 {
			continue
		}
		due := from.Add(validity / 100 * time.Duration(percent))
		consider(due, fmt.Sprintf("the %s CA, valid from %s to %s, has used %d%% of its validity at %s",
			ca.Role, formatTime(from), formatTime(to), percent, formatTime(due)))
	}
	if interval, ok := policy.IntervalOrNone(); ok {
		since, rotated := lastRenewed(rot, created)
		what := "the Cluster was created at %s and never rotated"
		if rotated {
			what = "the last rotation completed at %s"
		}
		consider(since.Add(interval), fmt.Sprintf(what+"; spec.caRotation.automatic.interval is %s", formatTime(since), interval))
	}
	return step
}

// AutomaticOf is what c's spec.caRotation.automatic schedules, from the CAs
// its status lists.
func AutomaticOf(c *v1alpha1.Cluster) AutomaticStep {
	var cas []v1alpha1.CertificateAuthorityInventory
	if c.Status.Credentials != nil {
		cas = c.Status.Credentials.CertificateAuthorities
	}
	return Automatic(c.Spec.CARotation.Automatic, c.CARotation(), cas, c.CreationTimestamp.Time)
}

func formatTime(t time.Time) string { return t.UTC().Format(time.RFC3339) }
