// Package campaign decides what a RotationCampaign does next: where each of
// its Clusters stands in the campaign's step (Classify), and, from that,
// which Clusters to start, whether the campaign is halted, paused or done,
// and what its status says (Plan). It reads and writes nothing; the
// campaign controller carries its decisions out.
package campaign

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
	"github.com/carousel-dev/carousel/pkg/rotation"
)

// Standing is where one Cluster stands in a campaign's step.
type Standing struct {
	Name  string
	State v1alpha1.CampaignClusterState
	// Rotating is true while the Cluster's phase for the step is requested,
	// or any phase of its rotation is under way (Preparing, Finalizing,
	// Aborting: each rolls what the Cluster's certificates reach), failed
	// or not: it takes one of maxConcurrent's places.
	Rotating bool
	// Message says why the Cluster is in its state; empty for Pending and Done.
	Message string
	// Phase is the Cluster's CA rotation phase.
	Phase v1alpha1.CARotationPhase
	// FailsAt is when a rotating Cluster fails its progress deadline; zero
	// when it is not rotating or has already failed.
	FailsAt time.Time
	// Skip is why the Cluster is Skipped, when it is: a done step's
	// message says so.
	Skip Skip
}

// Skip is why a Cluster is Skipped at the Complete step: a done step's
// message says how many are skipped for each reason, rather than that
// none was rotated when some were aborted or are someone else's.
type Skip int

// The reasons a Cluster is Skipped.
const (
	// SkipNotRotated: not rotated since the campaign started, nothing to
	// complete.
	SkipNotRotated Skip = iota
	// SkipAborted: its rotation was aborted since the campaign started.
	SkipAborted
	// SkipStartedAfter: its rotation started after the Complete step
	// began; whoever started it completes it.
	SkipStartedAfter
)

// Classify says where c stands in a campaign at step, at now. The campaign
// began at started (status.startTime), its Complete step at completeStep
// (status.completeStepTime; zero before it), and its Clusters may each take
// deadline for their phase. A rotation counts as the campaign's when it was
// started, or its completion requested, since started: a Cluster Prepared
// before the campaign is not rotated again, and is completed at the
// Complete step. One started after the Complete step began (by hand, or
// spec.caRotation.automatic, while the campaign completes others or after
// it is done) is not: the campaign leaves its completion to whoever
// started it. A Prepared Cluster whose old-CA usage gate would refuse the
// completion waits for it, rather than being refused. A rotation aborted
// since the campaign started is not started again: at the Start step the
// Cluster fails (it is not Prepared), at the Complete step it is skipped.
func Classify(step v1alpha1.CampaignStep, started, completeStep time.Time, deadline time.Duration, c *v1alpha1.Cluster, now time.Time) Standing {
	s := Standing{Name: c.Name, Phase: c.CARotationPhase()}
	rot := c.CARotation()
	if rot == nil {
		rot = &v1alpha1.CARotation{}
	}
	since := func(t *metav1.Time) bool { return t != nil && !t.Time.Before(started) }
	ours := since(rot.LastInitiationTime) || since(rot.LastCompletionTriggeredTime)
	if step == v1alpha1.CampaignComplete && !completeStep.IsZero() && rot.LastInitiationTime != nil && rot.LastInitiationTime.After(completeStep) {
		// In any phase: whoever started it completes it (or aborts it),
		// without the campaign's deadline, failures or places.
		s.State, s.Skip, s.Message = v1alpha1.CampaignClusterSkipped, SkipStartedAfter, fmt.Sprintf(
			"its rotation started at %s, after the campaign's Complete step began: the campaign does not complete it",
			rot.LastInitiationTime.UTC().Format(time.RFC3339))
		return s
	}
	if requestedCAVerb(c) == Operation(step) {
		if step == v1alpha1.CampaignStart && !c.CredentialsIssued() {
			// Someone else's (the campaign starts only Ready Clusters),
			// deferred by the Cluster controller until the credentials
			// are issued: it holds no place, having no deadline.
			s.State, s.Message = v1alpha1.CampaignClusterWaiting, "its credentials are not issued yet: the start requested ("+
				c.Annotations[v1alpha1.OperationAnnotation]+") waits for them"
			return s
		}
		s.State, s.Rotating, s.Message = v1alpha1.CampaignClusterInProgress, true, "requested: "+c.Annotations[v1alpha1.OperationAnnotation]
		return s
	}
	if step == v1alpha1.CampaignComplete && completeStep.IsZero() && StartRequested(c) {
		// A start not taken up yet, the campaign's own perhaps (the Cluster
		// controller is behind): the Complete step begins once none is
		// pending, and the rotation is the campaign's to complete.
		return StartNotTakenUp(s)
	}
	switch {
	case s.Phase.BothCAsTrusted() && s.Phase != v1alpha1.RotationPrepared:
		s = rotating(s, c, timeOf(rot.LastInitiationTime), deadline, now)
		if step == v1alpha1.CampaignComplete && s.State == v1alpha1.CampaignClusterInProgress {
			// Its first phase is not over: it is completed once it is
			// Prepared. It rotates meanwhile (rolls its workers), so it
			// holds its place: maxConcurrent bounds the Clusters rotating
			// at once, in either phase.
			s.State, s.Message = v1alpha1.CampaignClusterWaiting, "not Prepared yet: "+s.Message
		}
		return s
	case s.Phase == v1alpha1.RotationPrepared && step == v1alpha1.CampaignStart:
		s.State = v1alpha1.CampaignClusterDone
		return s
	case s.Phase == v1alpha1.RotationFinalizing && step == v1alpha1.CampaignComplete:
		return rotating(s, c, timeOf(rot.LastCompletionTriggeredTime), deadline, now)
	case s.Phase == v1alpha1.RotationFinalizing && !ours:
		s.State, s.Rotating, s.Message = v1alpha1.CampaignClusterWaiting, true, "a rotation started before the campaign is finishing: it is started again once Completed"
		return s
	case s.Phase == v1alpha1.RotationFinalizing:
		// Completed early (by hand, or spec.caRotation.automatic): done
		// with the Start step, but still rotating.
		s.State, s.Rotating = v1alpha1.CampaignClusterDone, true
		return s
	case s.Phase == v1alpha1.RotationCompleted && ours:
		s.State = v1alpha1.CampaignClusterDone
		return s
	case s.Phase == v1alpha1.RotationAborting && since(rot.LastAbortTriggeredTime) && step == v1alpha1.CampaignStart:
		// It fails as it will once Aborted (below), from the abort on: an
		// abort of the Cluster that halted the campaign must not lift the
		// halt, nor start more Clusters while it runs. It holds its place.
		s.State, s.Rotating, s.Message = v1alpha1.CampaignClusterFailed, true, "its rotation is being aborted ("+v1alpha1.OperationAbortCARotation+
			") since the campaign started: the campaign does not start it again; start it again by hand once Aborted, or take it out of the campaign"
		return s
	case s.Phase == v1alpha1.RotationAborting:
		s.State, s.Rotating, s.Message = v1alpha1.CampaignClusterWaiting, true, "its rotation is being aborted"
		return s
	case s.Phase == v1alpha1.RotationAborted && since(rot.LastAbortTriggeredTime) && step == v1alpha1.CampaignStart:
		// The campaign does not undo an abort, nor is a Cluster whose
		// rotation was aborted Prepared: it fails, so that the step is not
		// done without it, and a wave whose rotations are being aborted
		// halts (maxFailures 0) rather than start more. Started again, it
		// counts anew; taken out of the campaign, it no longer counts.
		s.State, s.Message = v1alpha1.CampaignClusterFailed, "its rotation was aborted ("+v1alpha1.OperationAbortCARotation+
			") since the campaign started: the campaign does not start it again; start it again by hand, or take it out of the campaign"
		return s
	case s.Phase == v1alpha1.RotationAborted && since(rot.LastAbortTriggeredTime):
		// At the Complete step there is nothing to complete: an abort at
		// the Start step failed it there already.
		s.State, s.Skip, s.Message = v1alpha1.CampaignClusterSkipped, SkipAborted, "its rotation was aborted ("+v1alpha1.OperationAbortCARotation+") since the campaign started: nothing to complete"
		return s
	case step == v1alpha1.CampaignComplete && s.Phase != v1alpha1.RotationPrepared:
		s.State, s.Skip, s.Message = v1alpha1.CampaignClusterSkipped, SkipNotRotated, "not rotated since the campaign started: nothing to complete"
		return s
	}
	// Not rotating, and the step's operation is next.
	ready := meta.FindStatusCondition(c.Status.Conditions, v1alpha1.ConditionReady)
	value, otherOperation := c.Annotations[v1alpha1.OperationAnnotation]
	var gate error
	if step == v1alpha1.CampaignComplete {
		gate = rotation.OldCAsUnused(v1alpha1.Operation{Verb: Operation(step)}, c)
	}
	switch {
	case ready == nil || ready.ObservedGeneration < c.Generation && ready.Status != metav1.ConditionFalse:
		s.State, s.Message = v1alpha1.CampaignClusterWaiting, "its credentials are not issued yet (no current Ready condition)"
	case ready.Status != metav1.ConditionTrue:
		s.State, s.Message = v1alpha1.CampaignClusterFailed, fmt.Sprintf("not Ready (%s): %s", ready.Reason, ready.Message)
	case otherOperation:
		// Setting the step's operation would replace it.
		s.State, s.Message = v1alpha1.CampaignClusterWaiting, fmt.Sprintf("another operation is pending (%s=%s)", v1alpha1.OperationAnnotation, value)
	case gate != nil:
		// The Cluster webhook would refuse the completion: the gate's verdict
		// is not in yet (or its audit events are still being collected), or
		// something still depends on the old CAs.
		s.State, s.Message = v1alpha1.CampaignClusterWaiting, "the old-CA usage gate holds the completion: "+gate.Error()
	default:
		s.State = v1alpha1.CampaignClusterPending
	}
	return s
}

// StartNotTakenUp is s at the Complete step for a Cluster whose start,
// requested before the step began, is not taken up yet: waiting, and
// holding its place.
func StartNotTakenUp(s Standing) Standing {
	s.State, s.Rotating, s.Message = v1alpha1.CampaignClusterWaiting, true, "its start is requested and not taken up yet: it is completed once Prepared"
	return s
}

// rotating is a Cluster whose phase is under way since since: in progress
// until the deadline, then failed.
func rotating(s Standing, c *v1alpha1.Cluster, since time.Time, deadline time.Duration, now time.Time) Standing {
	s.Rotating = true
	waitingFor := string(s.Phase)
	if cond := meta.FindStatusCondition(c.Status.Conditions, v1alpha1.ConditionCARotation); cond != nil && cond.Status == metav1.ConditionTrue {
		waitingFor = fmt.Sprintf("%s, %s: %s", s.Phase, cond.Reason, cond.Message)
	}
	if failsAt := since.Add(deadline); !since.IsZero() && !now.Before(failsAt) {
		s.State = v1alpha1.CampaignClusterFailed
		s.Message = fmt.Sprintf("exceeded its progress deadline of %s (started %s): %s", deadline, since.UTC().Format(time.RFC3339), waitingFor)
		return s
	} else if !since.IsZero() {
		s.FailsAt = failsAt
	}
	s.State, s.Message = v1alpha1.CampaignClusterInProgress, waitingFor
	return s
}

// requestedCAVerb is the CA part of the operation c's annotation requests,
// when it starts or completes a CA rotation; empty otherwise.
func requestedCAVerb(c *v1alpha1.Cluster) v1alpha1.OperationVerb {
	value, ok := c.Annotations[v1alpha1.OperationAnnotation]
	if !ok {
		return ""
	}
	op, err := v1alpha1.ParseOperation(value)
	if err != nil {
		return ""
	}
	switch {
	case op.Verb.StartsCARotation():
		return v1alpha1.VerbStartCARotation
	case op.Verb.CAVerb() == v1alpha1.VerbCompleteCARotation:
		return v1alpha1.VerbCompleteCARotation
	}
	return ""
}

// StartRequested reports whether c's operation annotation starts a CA
// rotation (OperationVerb.StartsCARotation) that is not taken up yet, and
// will be: the Cluster controller defers a start until the Cluster's
// credentials are issued, and the campaign starts only Clusters that are
// Ready, so a start on one whose credentials are not issued is someone
// else's, which nothing bounds.
func StartRequested(c *v1alpha1.Cluster) bool {
	return requestedCAVerb(c) == v1alpha1.VerbStartCARotation && c.CredentialsIssued()
}

// CompleteStepTime is the time the Complete step begins, stamped at now
// once none of clusters has a start pending: now, or the latest
// lastInitiationTime among them when that is later. Every rotation started
// so far is then one the campaign completes (Classify skips only those
// started after the Complete step began), although the clock of the process
// that took a start up, another shard's, may run ahead of this one's (by
// maxClockLead at most: a time further ahead, hand-written, would have the
// campaign complete rotations started long after its step began).
func CompleteStepTime(now time.Time, clusters []*v1alpha1.Cluster) time.Time {
	latest := now
	for _, c := range clusters {
		if rot := c.CARotation(); rot != nil && rot.LastInitiationTime != nil && rot.LastInitiationTime.After(latest) {
			latest = rot.LastInitiationTime.Time
		}
	}
	return minTime(latest, now.Add(maxClockLead))
}

// maxClockLead is how far ahead of the campaign's clock CompleteStepTime
// takes another process's clock to run.
const maxClockLead = time.Minute

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// Operation is the operation a campaign at step sets on a Cluster.
func Operation(step v1alpha1.CampaignStep) v1alpha1.OperationVerb {
	if step == v1alpha1.CampaignComplete {
		return v1alpha1.VerbCompleteCARotation
	}
	return v1alpha1.VerbStartCARotation
}

func timeOf(t *metav1.Time) time.Time {
	if t == nil {
		return time.Time{}
	}
	return t.Time
}

// Decision is what a campaign does next, and the status that says so.
type Decision struct {
	// Start names the Clusters to start the step's operation on, in order.
	Start []string
	// Counts, RotationPhases, Blocking, Phase and Progressing are the
	// campaign's status after Start is carried out.
	Counts         v1alpha1.CampaignClusterCounts
	RotationPhases []v1alpha1.RotationPhaseCount
	Blocking       []v1alpha1.CampaignCluster
	Phase          v1alpha1.CampaignPhase
	Progressing    metav1.Condition
	// RecheckAt is when a Cluster fails its progress deadline unless it
	// finishes first; zero when none can.
	RecheckAt time.Time
}

// Plan decides what a campaign with spec does next, given where each of its
// Clusters stands.
func Plan(spec *v1alpha1.RotationCampaignSpec, standings []Standing) Decision {
	standings = slices.SortedFunc(slices.Values(standings), func(a, b Standing) int { return cmp.Compare(a.Name, b.Name) })
	var d Decision
	selected := len(standings)
	d.Counts.Selected = int32(selected)
	phases := map[string]int32{}
	skips := map[Skip]int32{}
	var failed []string
	occupied, failedRotating := 0, 0
	for _, s := range standings {
		switch s.State {
		case v1alpha1.CampaignClusterPending:
			d.Counts.Pending++
		case v1alpha1.CampaignClusterWaiting:
			d.Counts.Waiting++
		case v1alpha1.CampaignClusterInProgress:
			d.Counts.InProgress++
		case v1alpha1.CampaignClusterDone:
			d.Counts.Done++
		case v1alpha1.CampaignClusterSkipped:
			d.Counts.Skipped++
			skips[s.Skip]++
		case v1alpha1.CampaignClusterFailed:
			d.Counts.Failed++
			failed = append(failed, s.Name)
			if s.Rotating {
				failedRotating++
			}
		}
		if s.Rotating {
			occupied++
		}
		phases[cmp.Or(string(s.Phase), "None")]++
		if !s.FailsAt.IsZero() && (d.RecheckAt.IsZero() || s.FailsAt.Before(d.RecheckAt)) {
			d.RecheckAt = s.FailsAt
		}
	}
	for _, phase := range slices.Sorted(maps.Keys(phases)) {
		d.RotationPhases = append(d.RotationPhases, v1alpha1.RotationPhaseCount{Phase: phase, Count: phases[phase]})
	}
	d.Blocking = blocking(standings)

	step := spec.StepOrDefault()
	running, done := v1alpha1.CampaignStarting, v1alpha1.CampaignPrepared
	if step == v1alpha1.CampaignComplete {
		running, done = v1alpha1.CampaignCompleting, v1alpha1.CampaignCompleted
	}
	maxFailures := spec.MaxFailuresOf(selected)
	halted := len(failed) > maxFailures
	left := d.Counts.Pending + d.Counts.Waiting + d.Counts.InProgress + d.Counts.Failed
	switch {
	case selected == 0:
		d.Phase = running
		d.Progressing = condition(metav1.ConditionFalse, v1alpha1.ReasonCampaignNoClusterSelected,
			"the selector picks no Cluster of the namespace that is not being deleted")
	case left == 0:
		d.Phase = done
		d.Progressing = condition(metav1.ConditionFalse, v1alpha1.ReasonCampaignStepDone, stepDoneMessage(step, d.Counts, skips))
	case halted:
		d.Phase = v1alpha1.CampaignHalted
		d.Progressing = condition(metav1.ConditionFalse, v1alpha1.ReasonCampaignHalted, fmt.Sprintf(
			"failed Clusters: %d, more than maxFailures allows (%d of %d): %s. No further Cluster is started until they recover or the budget is raised",
			len(failed), maxFailures, selected, NameList(failed)))
	case spec.Paused:
		d.Phase = v1alpha1.CampaignPaused
		d.Progressing = condition(metav1.ConditionFalse, v1alpha1.ReasonCampaignPaused,
			fmt.Sprintf("paused: no further Cluster is started; %d rotating, %d pending", occupied, d.Counts.Pending))
	case left == d.Counts.Failed && failedRotating == 0:
		// Nothing left to start or wait for: the failures within the
		// budget would hold the step open for good, with nothing to say so.
		d.Phase = running
		d.Progressing = condition(metav1.ConditionFalse, v1alpha1.ReasonCampaignFailedClustersLeft, fmt.Sprintf(
			"%d of %d Clusters done; failed, within maxFailures (%d) and not rotating: %s. The step ends once they recover (Ready again, or changed since they refused the operation) or leave the selection",
			d.Counts.Done, selected, maxFailures, NameList(failed)))
	default:
		d.Phase = running
		budget := spec.MaxConcurrentOf(selected)
		for _, s := range standings {
			if occupied >= budget {
				break
			}
			if s.State == v1alpha1.CampaignClusterPending {
				d.Start = append(d.Start, s.Name)
				occupied++
			}
		}
		d.Counts.Pending -= int32(len(d.Start))
		d.Counts.InProgress += int32(len(d.Start))
		d.Progressing = condition(metav1.ConditionTrue, v1alpha1.ReasonCampaignProgressing, fmt.Sprintf(
			"%s: %d of %d Clusters done, %d rotating (at most %d at once), %d pending, %d waiting, %d failed (at most %d allowed)",
			Operation(step), d.Counts.Done, selected, occupied, budget, d.Counts.Pending, d.Counts.Waiting, d.Counts.Failed, maxFailures))
	}
	return d
}

// stepDoneMessage says that a step is done: how many of the selected
// Clusters reached its phase, and how many were skipped, and why (skips
// counts them by reason), so that it never says a Cluster was not rotated
// when its rotation was aborted or is someone else's.
func stepDoneMessage(step v1alpha1.CampaignStep, n v1alpha1.CampaignClusterCounts, skips map[Skip]int32) string {
	// A Cluster completed early (by hand, or spec.caRotation.automatic) is
	// done with the Start step too.
	phase, next := string(v1alpha1.RotationPrepared)+" (or completed since)", "set spec.step to Complete to complete their rotations"
	if step == v1alpha1.CampaignComplete {
		phase, next = string(v1alpha1.RotationCompleted), ""
	}
	switch {
	case n.Skipped == 0 && next != "":
		return fmt.Sprintf("every selected Cluster (%d) is %s: %s", n.Selected, phase, next)
	case n.Skipped == 0:
		return fmt.Sprintf("every selected Cluster (%d) is %s", n.Selected, phase)
	case n.Done == 0:
		return fmt.Sprintf("nothing to do: every selected Cluster (%d) is skipped: %s", n.Selected, skipped(skips))
	case next != "":
		return fmt.Sprintf("%s: %d of the %d selected Clusters; the others are skipped: %s; %s", phase, n.Done, n.Selected, skipped(skips), next)
	}
	return fmt.Sprintf("%s: %d of the %d selected Clusters; the others are skipped: %s", phase, n.Done, n.Selected, skipped(skips))
}

// skipped says how many Clusters are skipped for each reason.
func skipped(skips map[Skip]int32) string {
	var why []string
	for _, skip := range []struct {
		reason Skip
		says   string
	}{
		{SkipAborted, "aborted since the campaign started"},
		{SkipStartedAfter, "started after the Complete step began (left to whoever started them)"},
		{SkipNotRotated, "not rotated since the campaign started"},
	} {
		if skips[skip.reason] > 0 {
			why = append(why, fmt.Sprintf("%d %s", skips[skip.reason], skip.says))
		}
	}
	return strings.Join(why, ", ")
}

// blocking lists the Clusters that hold the step up: failed first, then in
// progress, then waiting, each group by name, at most MaxCampaignBlocking.
func blocking(standings []Standing) []v1alpha1.CampaignCluster {
	var out []v1alpha1.CampaignCluster
	for _, state := range []v1alpha1.CampaignClusterState{v1alpha1.CampaignClusterFailed, v1alpha1.CampaignClusterInProgress, v1alpha1.CampaignClusterWaiting} {
		for _, s := range standings {
			if s.State == state && len(out) < v1alpha1.MaxCampaignBlocking {
				out = append(out, v1alpha1.CampaignCluster{Name: s.Name, State: s.State, Message: s.Message})
			}
		}
	}
	return out
}

// NameList names at most ten Clusters for a message, and how many more.
func NameList(names []string) string {
	const most = 10
	if len(names) <= most {
		return strings.Join(names, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(names[:most], ", "), len(names)-most)
}

func condition(status metav1.ConditionStatus, reason, message string) metav1.Condition {
	return metav1.Condition{Type: v1alpha1.ConditionCampaignProgressing, Status: status, Reason: reason, Message: message}
}
