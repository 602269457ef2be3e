package campaign

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
)

var (
	started      = time.Date(2026, 11, 26, 10, 0, 0, 0, time.UTC)
	completeStep = started.Add(20 * time.Minute)
	now          = started.Add(30 * time.Minute)
	deadline     = time.Hour
)

// cluster builds a Ready Cluster in phase, its last rotation initiated at
// initiated (zero: never) and its completion triggered at triggered.
func cluster(phase v1alpha1.CARotationPhase, initiated, triggered time.Time, mutate ...func(*v1alpha1.Cluster)) *v1alpha1.Cluster {
	c := &v1alpha1.Cluster{ObjectMeta: metav1.ObjectMeta{Name: "c", Generation: 1}}
	meta.SetStatusCondition(&c.Status.Conditions, metav1.Condition{Type: v1alpha1.ConditionReady, Status: metav1.ConditionTrue,
		Reason: v1alpha1.ReasonCredentialsIssued, ObservedGeneration: 1})
	c.Status.Credentials = &v1alpha1.ClusterCredentials{}
	for _, role := range v1alpha1.CARoles() {
		c.Status.Credentials.CertificateAuthorities = append(c.Status.Credentials.CertificateAuthorities,
			v1alpha1.CertificateAuthorityInventory{Role: role, Current: &v1alpha1.CertificateInfo{Fingerprint: string(role)}})
	}
	if phase != "" || !initiated.IsZero() {
		rot := &v1alpha1.CARotation{Phase: phase}
		if !initiated.IsZero() {
			rot.LastInitiationTime = &metav1.Time{Time: initiated}
		}
		if !triggered.IsZero() {
			rot.LastCompletionTriggeredTime = &metav1.Time{Time: triggered}
		}
		c.Status.Credentials.Rotation = &v1alpha1.CredentialsRotation{CertificateAuthorities: rot}
	}
	for _, m := range mutate {
		m(c)
	}
	return c
}

func annotated(value string) func(*v1alpha1.Cluster) {
	return func(c *v1alpha1.Cluster) { c.Annotations = map[string]string{v1alpha1.OperationAnnotation: value} }
}

func notReady(reason string) func(*v1alpha1.Cluster) {
	return func(c *v1alpha1.Cluster) {
		meta.SetStatusCondition(&c.Status.Conditions, metav1.Condition{Type: v1alpha1.ConditionReady, Status: metav1.ConditionFalse,
			Reason: reason, Message: "secret c-ca-client is missing", ObservedGeneration: 1})
	}
}

// oldCAUsage records the old-CA usage gate's verdict: total dependents.
func oldCAUsage(total int32) func(*v1alpha1.Cluster) {
	return func(c *v1alpha1.Cluster) {
		usage := &v1alpha1.OldCAUsage{Total: total}
		if total > 0 {
			usage.Dependents = []v1alpha1.OldCADependent{{Kind: v1alpha1.OldCADependentNode, Name: "w1", Message: "its client certificate is from the old client CA"}}
		}
		c.CARotation().OldCAUsage = usage
	}
}

// abortedAt records an abort requested at t.
func abortedAt(t time.Time) func(*v1alpha1.Cluster) {
	return func(c *v1alpha1.Cluster) { c.CARotation().LastAbortTriggeredTime = &metav1.Time{Time: t} }
}

func TestClassify(t *testing.T) {
	before, during := started.Add(-24*time.Hour), started.Add(10*time.Minute)
	afterCompleteStep := completeStep.Add(time.Minute)
	overdue := now.Add(-deadline - time.Minute)
	none := time.Time{}
	tests := []struct {
		name     string
		step     v1alpha1.CampaignStep
		c        *v1alpha1.Cluster
		state    v1alpha1.CampaignClusterState
		rotating bool
		message  string
		failsAt  time.Time
	}{
		{"start: never rotated", v1alpha1.CampaignStart, cluster("", none, none), v1alpha1.CampaignClusterPending, false, "", none},
		{"start: completed before the campaign", v1alpha1.CampaignStart, cluster(v1alpha1.RotationCompleted, before, before), v1alpha1.CampaignClusterPending, false, "", none},
		{"start: requested", v1alpha1.CampaignStart, cluster(v1alpha1.RotationCompleted, before, before, annotated("start-ca-rotation")),
			v1alpha1.CampaignClusterInProgress, true, "requested: start-ca-rotation", none},
		{"start: requested before its credentials are issued holds no place", v1alpha1.CampaignStart,
			cluster("", none, none, annotated("start-ca-rotation"), func(c *v1alpha1.Cluster) { c.Status.Credentials = nil }),
			v1alpha1.CampaignClusterWaiting, false, "its credentials are not issued yet: the start requested (start-ca-rotation) waits for them", none},
		{"start: requested without workers rollout", v1alpha1.CampaignStart, cluster("", none, none, annotated("start-ca-rotation-without-workers-rollout")),
			v1alpha1.CampaignClusterInProgress, true, "requested: start-ca-rotation-without-workers-rollout", none},
		{"start: requested with the service-account key", v1alpha1.CampaignStart, cluster("", none, none, annotated("rotate-credentials-start")),
			v1alpha1.CampaignClusterInProgress, true, "requested: rotate-credentials-start", none},
		{"start: another operation pending waits, not to replace it", v1alpha1.CampaignStart, cluster("", none, none, annotated("reconcile")),
			v1alpha1.CampaignClusterWaiting, false, "another operation is pending (carousel.dev/operation=reconcile)", none},
		{"start: prepared, with another operation pending", v1alpha1.CampaignStart, cluster(v1alpha1.RotationPrepared, before, none, annotated("reconcile")),
			v1alpha1.CampaignClusterDone, false, "", none},
		{"start: preparing", v1alpha1.CampaignStart, cluster(v1alpha1.RotationPreparing, during, none), v1alpha1.CampaignClusterInProgress, true, "Preparing", during.Add(deadline)},
		{"start: waiting for held pools", v1alpha1.CampaignStart, cluster(v1alpha1.RotationWaitingForWorkersRollout, during, none),
			v1alpha1.CampaignClusterInProgress, true, "WaitingForWorkersRollout", during.Add(deadline)},
		{"start: preparing past the deadline", v1alpha1.CampaignStart, cluster(v1alpha1.RotationPreparing, overdue, none),
			v1alpha1.CampaignClusterFailed, true, "exceeded its progress deadline of 1h0m0s", none},
		{"start: prepared", v1alpha1.CampaignStart, cluster(v1alpha1.RotationPrepared, during, none), v1alpha1.CampaignClusterDone, false, "", none},
		{"start: prepared before the campaign", v1alpha1.CampaignStart, cluster(v1alpha1.RotationPrepared, before, none), v1alpha1.CampaignClusterDone, false, "", none},
		{"start: finalizing", v1alpha1.CampaignStart, cluster(v1alpha1.RotationFinalizing, during, during), v1alpha1.CampaignClusterDone, true, "", none},
		{"start: finalizing a rotation prepared before the campaign, completed since", v1alpha1.CampaignStart, cluster(v1alpha1.RotationFinalizing, before, during),
			v1alpha1.CampaignClusterDone, true, "", none},
		{"start: finalizing a rotation from before the campaign", v1alpha1.CampaignStart, cluster(v1alpha1.RotationFinalizing, before, before),
			v1alpha1.CampaignClusterWaiting, true, "started before the campaign is finishing", none},
		{"start: completed since, a rotation prepared before the campaign", v1alpha1.CampaignStart, cluster(v1alpha1.RotationCompleted, before, during),
			v1alpha1.CampaignClusterDone, false, "", none},
		{"start: completed during the campaign", v1alpha1.CampaignStart, cluster(v1alpha1.RotationCompleted, during, during), v1alpha1.CampaignClusterDone, false, "", none},
		// Failed from the abort on: an abort of the Cluster that halted the
		// campaign does not lift the halt while it runs.
		{"start: aborting since the campaign started", v1alpha1.CampaignStart, cluster(v1alpha1.RotationAborting, during, none, abortedAt(during)),
			v1alpha1.CampaignClusterFailed, true, "being aborted (abort-ca-rotation) since the campaign started", none},
		{"start: aborting since before the campaign", v1alpha1.CampaignStart, cluster(v1alpha1.RotationAborting, before, none, abortedAt(before)),
			v1alpha1.CampaignClusterWaiting, true, "being aborted", none},
		{"complete: aborting", v1alpha1.CampaignComplete, cluster(v1alpha1.RotationAborting, during, none, abortedAt(during)),
			v1alpha1.CampaignClusterWaiting, true, "being aborted", none},
		// Not Prepared: it fails, and the campaign does not start it again.
		{"start: aborted during the campaign", v1alpha1.CampaignStart, cluster(v1alpha1.RotationAborted, during, none, abortedAt(during)),
			v1alpha1.CampaignClusterFailed, false, "aborted (abort-ca-rotation) since the campaign started: the campaign does not start it again", none},
		{"start: aborted before the campaign", v1alpha1.CampaignStart, cluster(v1alpha1.RotationAborted, before, none, abortedAt(before)),
			v1alpha1.CampaignClusterPending, false, "", none},
		{"complete: aborted during the campaign", v1alpha1.CampaignComplete, cluster(v1alpha1.RotationAborted, during, none, abortedAt(during)),
			v1alpha1.CampaignClusterSkipped, false, "aborted", none},
		{"start: not ready", v1alpha1.CampaignStart, cluster("", none, none, notReady(v1alpha1.ReasonCALost)),
			v1alpha1.CampaignClusterFailed, false, "not Ready (CALost): secret c-ca-client is missing", none},
		{"start: no Ready condition yet", v1alpha1.CampaignStart, cluster("", none, none, func(c *v1alpha1.Cluster) { c.Status.Conditions = nil }),
			v1alpha1.CampaignClusterWaiting, false, "not issued yet", none},
		{"start: Ready for an older generation", v1alpha1.CampaignStart, cluster("", none, none, func(c *v1alpha1.Cluster) { c.Generation = 2 }),
			v1alpha1.CampaignClusterWaiting, false, "not issued yet", none},

		{"complete: prepared", v1alpha1.CampaignComplete, cluster(v1alpha1.RotationPrepared, during, none, oldCAUsage(0)), v1alpha1.CampaignClusterPending, false, "", none},
		{"complete: prepared before the campaign", v1alpha1.CampaignComplete, cluster(v1alpha1.RotationPrepared, before, none, oldCAUsage(0)), v1alpha1.CampaignClusterPending, false, "", none},
		// The Cluster webhook would refuse the completion: waiting, not a
		// refusal that counts as failed and may halt the campaign.
		{"complete: prepared, the old-CA usage gate's verdict not in yet", v1alpha1.CampaignComplete, cluster(v1alpha1.RotationPrepared, during, none),
			v1alpha1.CampaignClusterWaiting, false, "the old-CA usage gate holds the completion: the old-CA usage gate has not yet worked out", none},
		{"complete: prepared, a node still on the old client CA", v1alpha1.CampaignComplete, cluster(v1alpha1.RotationPrepared, during, none, oldCAUsage(1)),
			v1alpha1.CampaignClusterWaiting, false, "the old-CA usage gate holds the completion: ", none},
		// Started by someone else (automatic rotation, by hand) after the
		// campaign's Complete step began, or after it was done.
		{"complete: prepared by a rotation started after the Complete step began", v1alpha1.CampaignComplete,
			cluster(v1alpha1.RotationPrepared, afterCompleteStep, none, oldCAUsage(0)), v1alpha1.CampaignClusterSkipped, false, "after the campaign's Complete step began", none},
		{"complete: preparing a rotation started after the Complete step began", v1alpha1.CampaignComplete,
			cluster(v1alpha1.RotationPreparing, afterCompleteStep, none), v1alpha1.CampaignClusterSkipped, false, "after the campaign's Complete step began", none},
		// Its starter completes or aborts it: not InProgress nor Waiting,
		// with the campaign's deadline and a place.
		{"complete: completing a rotation started after the Complete step began", v1alpha1.CampaignComplete,
			cluster(v1alpha1.RotationPrepared, afterCompleteStep, none, oldCAUsage(0), annotated("complete-ca-rotation")), v1alpha1.CampaignClusterSkipped, false, "after the campaign's Complete step began", none},
		{"complete: finalizing a rotation started after the Complete step began", v1alpha1.CampaignComplete,
			cluster(v1alpha1.RotationFinalizing, afterCompleteStep, afterCompleteStep.Add(time.Minute)), v1alpha1.CampaignClusterSkipped, false, "after the campaign's Complete step began", none},
		{"complete: aborting a rotation started after the Complete step began", v1alpha1.CampaignComplete,
			cluster(v1alpha1.RotationAborting, afterCompleteStep, none), v1alpha1.CampaignClusterSkipped, false, "after the campaign's Complete step began", none},
		{"complete: completed, a rotation started after the Complete step began", v1alpha1.CampaignComplete,
			cluster(v1alpha1.RotationCompleted, afterCompleteStep, afterCompleteStep.Add(time.Minute)), v1alpha1.CampaignClusterSkipped, false, "after the campaign's Complete step began", none},
		{"complete: requested", v1alpha1.CampaignComplete, cluster(v1alpha1.RotationPrepared, during, none, annotated("complete-ca-rotation")),
			v1alpha1.CampaignClusterInProgress, true, "requested: complete-ca-rotation", none},
		{"complete: a start request is not the complete", v1alpha1.CampaignComplete, cluster("", none, none, annotated("start-ca-rotation")),
			v1alpha1.CampaignClusterSkipped, false, "nothing to complete", none},
		{"complete: still preparing waits, holding its place", v1alpha1.CampaignComplete, cluster(v1alpha1.RotationPreparing, during, none),
			v1alpha1.CampaignClusterWaiting, true, "not Prepared yet: Preparing", during.Add(deadline)},
		{"complete: preparing past the deadline", v1alpha1.CampaignComplete, cluster(v1alpha1.RotationPreparing, overdue, none),
			v1alpha1.CampaignClusterFailed, true, "exceeded its progress deadline", none},
		{"complete: finalizing", v1alpha1.CampaignComplete, cluster(v1alpha1.RotationFinalizing, during, during.Add(time.Minute)),
			v1alpha1.CampaignClusterInProgress, true, "Finalizing", during.Add(time.Minute + deadline)},
		{"complete: finalizing past the deadline from its trigger", v1alpha1.CampaignComplete, cluster(v1alpha1.RotationFinalizing, overdue.Add(-time.Hour), overdue),
			v1alpha1.CampaignClusterFailed, true, "exceeded its progress deadline", none},
		{"complete: completed", v1alpha1.CampaignComplete, cluster(v1alpha1.RotationCompleted, during, during), v1alpha1.CampaignClusterDone, false, "", none},
		{"complete: completed since, a rotation prepared before the campaign", v1alpha1.CampaignComplete, cluster(v1alpha1.RotationCompleted, before, during),
			v1alpha1.CampaignClusterDone, false, "", none},
		{"complete: prepared, with another operation pending", v1alpha1.CampaignComplete, cluster(v1alpha1.RotationPrepared, during, none, oldCAUsage(0), annotated("rollout-workers=a")),
			v1alpha1.CampaignClusterWaiting, false, "another operation is pending", none},
		{"complete: completed before the campaign", v1alpha1.CampaignComplete, cluster(v1alpha1.RotationCompleted, before, before),
			v1alpha1.CampaignClusterSkipped, false, "not rotated since the campaign started", none},
		{"complete: never rotated", v1alpha1.CampaignComplete, cluster("", none, none), v1alpha1.CampaignClusterSkipped, false, "nothing to complete", none},
		{"complete: prepared but not ready", v1alpha1.CampaignComplete, cluster(v1alpha1.RotationPrepared, during, none, notReady(v1alpha1.ReasonCASecretUnlabelled)),
			v1alpha1.CampaignClusterFailed, false, "not Ready (CASecretUnlabelled)", none},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Classify(tt.step, started, completeStep, deadline, tt.c, now)
			if got.State != tt.state || got.Rotating != tt.rotating || !got.FailsAt.Equal(tt.failsAt) {
				t.Errorf("got state %s, rotating %t, failsAt %s; want %s, %t, %s", got.State, got.Rotating, got.FailsAt, tt.state, tt.rotating, tt.failsAt)
			}
			if !strings.Contains(got.Message, tt.message) || (tt.message == "" && got.Message != "") {
				t.Errorf("message %q, want it to contain %q", got.Message, tt.message)
			}
		})
	}
}

// At the Complete step, before its time is recorded, a start not taken up
// yet (the campaign's own, perhaps) holds its place and is waited for; once
// the step's time is recorded, a start requested is someone else's.
func TestClassifyAStartNotTakenUpAtTheCompleteStep(t *testing.T) {
	c := cluster(v1alpha1.RotationCompleted, started.Add(-24*time.Hour), started.Add(-24*time.Hour), annotated("start-ca-rotation"))
	got := Classify(v1alpha1.CampaignComplete, started, time.Time{}, deadline, c, now)
	if got.State != v1alpha1.CampaignClusterWaiting || !got.Rotating || !strings.Contains(got.Message, "not taken up yet") {
		t.Errorf("before the Complete step's time: %+v; want it waiting and rotating", got)
	}
	got = Classify(v1alpha1.CampaignComplete, started, completeStep, deadline, c, now)
	if got.State != v1alpha1.CampaignClusterSkipped || got.Rotating {
		t.Errorf("after the Complete step's time: %+v; want it skipped", got)
	}
	// Two Clusters Prepared and two starts not taken up, one place: the
	// starts hold it, and the step is not done.
	prepared := cluster(v1alpha1.RotationPrepared, started.Add(time.Minute), time.Time{}, oldCAUsage(0))
	var ss []Standing
	for i, c := range []*v1alpha1.Cluster{prepared, prepared.DeepCopy(), c, c.DeepCopy()} {
		s := Classify(v1alpha1.CampaignComplete, started, time.Time{}, deadline, c, now)
		s.Name = fmt.Sprintf("c%d", i)
		ss = append(ss, s)
	}
	spec := &v1alpha1.RotationCampaignSpec{Step: v1alpha1.CampaignComplete, MaxConcurrent: ptr.To(intstr.FromInt32(2))}
	if d := Plan(spec, ss); len(d.Start) != 0 || d.Phase != v1alpha1.CampaignCompleting {
		t.Errorf("completes %v, phase %s; want none completed while two starts hold both places, Completing", d.Start, d.Phase)
	}
}

func standings(spec string) []Standing {
	// spec: one letter per Cluster, named c00, c01, ...: P pending, W waiting,
	// I in progress, D done, S skipped, F failed (not rotating), X failed
	// while rotating, R waiting while rotating (still preparing at the
	// Complete step).
	states := map[rune]Standing{
		'P': {State: v1alpha1.CampaignClusterPending}, 'W': {State: v1alpha1.CampaignClusterWaiting},
		'I': {State: v1alpha1.CampaignClusterInProgress, Rotating: true, Phase: v1alpha1.RotationPreparing},
		'D': {State: v1alpha1.CampaignClusterDone, Phase: v1alpha1.RotationPrepared}, 'S': {State: v1alpha1.CampaignClusterSkipped},
		'F': {State: v1alpha1.CampaignClusterFailed, Message: "not Ready"},
		'X': {State: v1alpha1.CampaignClusterFailed, Rotating: true, Phase: v1alpha1.RotationPreparing, Message: "exceeded"},
		'R': {State: v1alpha1.CampaignClusterWaiting, Rotating: true, Phase: v1alpha1.RotationPreparing},
	}
	var out []Standing
	// Reverse order: Plan sorts by name.
	for i := len(spec) - 1; i >= 0; i-- {
		s := states[rune(spec[i])]
		s.Name = fmt.Sprintf("c%02d", i)
		out = append(out, s)
	}
	return out
}

func TestPlan(t *testing.T) {
	n := func(v int) *intstr.IntOrString { return ptr.To(intstr.FromInt32(int32(v))) }
	pct := func(v string) *intstr.IntOrString { return ptr.To(intstr.FromString(v)) }
	tests := []struct {
		name      string
		spec      v1alpha1.RotationCampaignSpec
		clusters  string
		start     []string
		phase     v1alpha1.CampaignPhase
		reason    string
		inMessage string
	}{
		{"one at a time by default", v1alpha1.RotationCampaignSpec{}, "PPP", []string{"c00"}, v1alpha1.CampaignStarting, v1alpha1.ReasonCampaignProgressing, "0 of 3 Clusters done, 1 rotating (at most 1 at once), 2 pending"},
		{"the budget counts those rotating", v1alpha1.RotationCampaignSpec{MaxConcurrent: n(3)}, "IDPPPP", []string{"c02", "c03"}, v1alpha1.CampaignStarting, v1alpha1.ReasonCampaignProgressing, "3 rotating (at most 3 at once)"},
		{"a full budget starts none", v1alpha1.RotationCampaignSpec{MaxConcurrent: n(2)}, "IIPP", nil, v1alpha1.CampaignStarting, v1alpha1.ReasonCampaignProgressing, "2 pending"},
		{"a percentage rounds up", v1alpha1.RotationCampaignSpec{MaxConcurrent: pct("10%")}, "PPPPPPPPPPP", []string{"c00", "c01"}, v1alpha1.CampaignStarting, v1alpha1.ReasonCampaignProgressing, "at most 2 at once"},
		{"waiting and skipped Clusters are not started", v1alpha1.RotationCampaignSpec{MaxConcurrent: n(5)}, "WSP", []string{"c02"}, v1alpha1.CampaignStarting, v1alpha1.ReasonCampaignProgressing, "1 waiting"},
		{"a failure within the budget goes on", v1alpha1.RotationCampaignSpec{MaxConcurrent: n(2), MaxFailures: n(1)}, "FPP", []string{"c01", "c02"}, v1alpha1.CampaignStarting, v1alpha1.ReasonCampaignProgressing, "1 failed (at most 1 allowed)"},
		{"a failed Cluster still rotating keeps its place", v1alpha1.RotationCampaignSpec{MaxConcurrent: n(2), MaxFailures: n(1)}, "XPP", []string{"c01"}, v1alpha1.CampaignStarting, v1alpha1.ReasonCampaignProgressing, "2 rotating"},
		{"the first failure halts by default", v1alpha1.RotationCampaignSpec{MaxConcurrent: n(5)}, "DFPP", nil, v1alpha1.CampaignHalted, v1alpha1.ReasonCampaignHalted, "failed Clusters: 1, more than maxFailures allows (0 of 4): c01"},
		{"a percentage of failures rounds down", v1alpha1.RotationCampaignSpec{MaxFailures: pct("30%")}, "FFPPP", nil, v1alpha1.CampaignHalted, v1alpha1.ReasonCampaignHalted, "(1 of 5)"},
		{"halted before paused", v1alpha1.RotationCampaignSpec{Paused: true}, "FP", nil, v1alpha1.CampaignHalted, v1alpha1.ReasonCampaignHalted, "c00"},
		{"paused starts none", v1alpha1.RotationCampaignSpec{Paused: true, MaxConcurrent: n(5)}, "IPP", nil, v1alpha1.CampaignPaused, v1alpha1.ReasonCampaignPaused, "1 rotating, 2 pending"},
		{"start done", v1alpha1.RotationCampaignSpec{}, "DD", nil, v1alpha1.CampaignPrepared, v1alpha1.ReasonCampaignStepDone, "every selected Cluster (2) is Prepared (or completed since): set spec.step to Complete"},
		{"complete done, skipped named", v1alpha1.RotationCampaignSpec{Step: v1alpha1.CampaignComplete}, "DSD", nil, v1alpha1.CampaignCompleted, v1alpha1.ReasonCampaignStepDone, "Completed: 2 of the 3 selected Clusters; the others are skipped: 1 not rotated since the campaign started"},
		{"complete done with every Cluster skipped", v1alpha1.RotationCampaignSpec{Step: v1alpha1.CampaignComplete}, "SS", nil, v1alpha1.CampaignCompleted, v1alpha1.ReasonCampaignStepDone, "nothing to do: every selected Cluster (2) is skipped: 2 not rotated since the campaign started"},
		{"done even when paused", v1alpha1.RotationCampaignSpec{Paused: true}, "D", nil, v1alpha1.CampaignPrepared, v1alpha1.ReasonCampaignStepDone, ""},
		{"complete step in progress", v1alpha1.RotationCampaignSpec{Step: v1alpha1.CampaignComplete, MaxConcurrent: pct("100%")}, "PWP", []string{"c00", "c02"}, v1alpha1.CampaignCompleting, v1alpha1.ReasonCampaignProgressing, "complete-ca-rotation: 0 of 3"},
		{"a Cluster still preparing at the Complete step keeps its place", v1alpha1.RotationCampaignSpec{Step: v1alpha1.CampaignComplete, MaxConcurrent: n(2)}, "RPP", []string{"c01"}, v1alpha1.CampaignCompleting, v1alpha1.ReasonCampaignProgressing, "2 rotating (at most 2 at once), 1 pending, 1 waiting"},
		{"no Cluster selected is not done", v1alpha1.RotationCampaignSpec{}, "", nil, v1alpha1.CampaignStarting, v1alpha1.ReasonCampaignNoClusterSelected, "picks no Cluster"},
		{"only failures within the budget left, none rotating, says so", v1alpha1.RotationCampaignSpec{MaxFailures: n(1)}, "DFS", nil, v1alpha1.CampaignStarting,
			v1alpha1.ReasonCampaignFailedClustersLeft, "1 of 3 Clusters done; failed, within maxFailures (1) and not rotating: c01"},
		{"a failure within the budget still rotating may yet finish", v1alpha1.RotationCampaignSpec{MaxFailures: n(1)}, "DX", nil, v1alpha1.CampaignStarting,
			v1alpha1.ReasonCampaignProgressing, "1 failed (at most 1 allowed)"},
		{"paused, with only failures within the budget left", v1alpha1.RotationCampaignSpec{Paused: true, MaxFailures: n(1)}, "DF", nil, v1alpha1.CampaignPaused,
			v1alpha1.ReasonCampaignPaused, "0 rotating, 0 pending"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := Plan(&tt.spec, standings(tt.clusters))
			if fmt.Sprint(d.Start) != fmt.Sprint(tt.start) {
				t.Errorf("start %v, want %v", d.Start, tt.start)
			}
			if d.Phase != tt.phase || d.Progressing.Reason != tt.reason || !strings.Contains(d.Progressing.Message, tt.inMessage) {
				t.Errorf("phase %s, condition %s %q; want %s, %s containing %q", d.Phase, d.Progressing.Reason, d.Progressing.Message, tt.phase, tt.reason, tt.inMessage)
			}
			c := d.Counts
			if sum := c.Pending + c.Waiting + c.InProgress + c.Done + c.Skipped + c.Failed; sum != c.Selected || int(c.Selected) != len(tt.clusters) {
				t.Errorf("counts %+v do not add up to %d", c, len(tt.clusters))
			}
		})
	}
}

// A step whose Clusters were aborted is not done as if they had reached
// its phase: at the Start step an aborted Cluster is not Prepared, and
// fails; at the Complete step, skipped, the message says why each is, not
// that none was rotated. Before, a Start step whose Clusters were all
// aborted was Prepared, "none of them rotated since the campaign started".
func TestAStepDoneSaysWhyClustersAreSkipped(t *testing.T) {
	during, afterCompleteStep, none := started.Add(10*time.Minute), completeStep.Add(time.Minute), time.Time{}
	aborted := func() *v1alpha1.Cluster {
		return cluster(v1alpha1.RotationAborted, during, none, abortedAt(during.Add(time.Minute)))
	}
	prepared := func() *v1alpha1.Cluster { return cluster(v1alpha1.RotationPrepared, during, none) }
	completed := func() *v1alpha1.Cluster { return cluster(v1alpha1.RotationCompleted, during, during) }
	someoneElses := func() *v1alpha1.Cluster { return cluster(v1alpha1.RotationPrepared, afterCompleteStep, none) }
	neverRotated := func() *v1alpha1.Cluster { return cluster("", none, none) }
	tests := []struct {
		name      string
		step      v1alpha1.CampaignStep
		failures  *intstr.IntOrString
		clusters  []*v1alpha1.Cluster
		phase     v1alpha1.CampaignPhase
		reason    string
		inMessage string
	}{
		{"start: every Cluster aborted halts", v1alpha1.CampaignStart, nil, []*v1alpha1.Cluster{aborted(), aborted()},
			v1alpha1.CampaignHalted, v1alpha1.ReasonCampaignHalted, "failed Clusters: 2"},
		{"start: every Cluster aborted, within the budget, is held", v1alpha1.CampaignStart, n100(), []*v1alpha1.Cluster{aborted(), aborted()},
			v1alpha1.CampaignStarting, v1alpha1.ReasonCampaignFailedClustersLeft, "0 of 2 Clusters done"},
		{"start: one Prepared, one aborted within the budget, is held", v1alpha1.CampaignStart, n100(), []*v1alpha1.Cluster{prepared(), aborted()},
			v1alpha1.CampaignStarting, v1alpha1.ReasonCampaignFailedClustersLeft, "1 of 2 Clusters done"},
		{"complete: skipped, each for its reason", v1alpha1.CampaignComplete, nil, []*v1alpha1.Cluster{completed(), aborted(), someoneElses(), neverRotated()},
			v1alpha1.CampaignCompleted, v1alpha1.ReasonCampaignStepDone,
			"Completed: 1 of the 4 selected Clusters; the others are skipped: 1 aborted since the campaign started, 1 started after the Complete step began (left to whoever started them), 1 not rotated since the campaign started"},
		{"complete: every Cluster aborted", v1alpha1.CampaignComplete, nil, []*v1alpha1.Cluster{aborted(), aborted()},
			v1alpha1.CampaignCompleted, v1alpha1.ReasonCampaignStepDone, "nothing to do: every selected Cluster (2) is skipped: 2 aborted since the campaign started"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var ss []Standing
			for i, c := range tt.clusters {
				c.Name = fmt.Sprintf("c%d", i)
				ss = append(ss, Classify(tt.step, started, completeStep, deadline, c, now))
			}
			d := Plan(&v1alpha1.RotationCampaignSpec{Step: tt.step, MaxFailures: tt.failures}, ss)
			if d.Phase != tt.phase || d.Progressing.Reason != tt.reason || !strings.Contains(d.Progressing.Message, tt.inMessage) {
				t.Errorf("phase %s, condition %s %q; want %s, %s containing %q", d.Phase, d.Progressing.Reason, d.Progressing.Message, tt.phase, tt.reason, tt.inMessage)
			}
		})
	}
}

func TestPlanBlockingOrderAndBound(t *testing.T) {
	d := Plan(&v1alpha1.RotationCampaignSpec{MaxFailures: n100()}, standings("WIF"+strings.Repeat("I", 30)))
	if len(d.Blocking) != v1alpha1.MaxCampaignBlocking {
		t.Fatalf("blocking lists %d, want %d", len(d.Blocking), v1alpha1.MaxCampaignBlocking)
	}
	if d.Blocking[0].Name != "c02" || d.Blocking[0].State != v1alpha1.CampaignClusterFailed || d.Blocking[1].Name != "c01" {
		t.Errorf("blocking starts %+v, want the failed c02, then the in-progress c01", d.Blocking[:2])
	}
	for _, b := range d.Blocking {
		if b.Name == "c00" {
			t.Errorf("the waiting c00 is listed though %d in-progress Clusters come first", v1alpha1.MaxCampaignBlocking)
		}
	}
}

func TestPlanRecheckAtIsTheEarliestDeadline(t *testing.T) {
	ss := standings("III")
	ss[0].FailsAt, ss[1].FailsAt = now.Add(time.Hour), now.Add(time.Minute)
	if got := Plan(&v1alpha1.RotationCampaignSpec{}, ss).RecheckAt; !got.Equal(now.Add(time.Minute)) {
		t.Errorf("RecheckAt %s, want %s", got, now.Add(time.Minute))
	}
}

func n100() *intstr.IntOrString { return ptr.To(intstr.FromString("100%")) }

// TestCompleteStepTime: the Complete step begins at now, or at the latest
// rotation start of the selected Clusters when a clock ahead of now wrote it.
func TestCompleteStepTime(t *testing.T) {
	now := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	started := func(at time.Time) *v1alpha1.Cluster {
		c := &v1alpha1.Cluster{}
		c.Status.Credentials = &v1alpha1.ClusterCredentials{Rotation: &v1alpha1.CredentialsRotation{CertificateAuthorities: &v1alpha1.CARotation{
			Phase: v1alpha1.RotationPrepared, LastInitiationTime: &metav1.Time{Time: at}}}}
		return c
	}
	for _, tc := range []struct {
		name     string
		clusters []*v1alpha1.Cluster
		want     time.Time
	}{
		{"no Clusters", nil, now},
		{"never rotated", []*v1alpha1.Cluster{{}}, now},
		{"every start before now", []*v1alpha1.Cluster{started(now.Add(-time.Hour)), started(now.Add(-time.Second))}, now},
		{"a start written by a clock ahead", []*v1alpha1.Cluster{started(now.Add(-time.Hour)), started(now.Add(3 * time.Second)), started(now.Add(time.Second))}, now.Add(3 * time.Second)},
		{"a start far ahead (hand-written)", []*v1alpha1.Cluster{started(now.Add(24 * time.Hour))}, now.Add(maxClockLead)},
	} {
		if got := CompleteStepTime(now, tc.clusters); !got.Equal(tc.want) {
			t.Errorf("%s: CompleteStepTime = %s, want %s", tc.name, got, tc.want)
		}
	}
}
