package cluster

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
	"github.com/carousel-dev/carousel/pkg/credentials"
	"github.com/carousel-dev/carousel/pkg/pki"
	"github.com/carousel-dev/carousel/pkg/rotation"
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

// A condition that newly calls on the user is announced by one Warning event,
// once the status write that records it has succeeded: a write that conflicts
// (the Cluster changed since it was read) announces nothing, and the pass
// that retries it announces it once.
func TestAConditionsWarningIsEmittedOnceItsStatusIsWritten(t *testing.T) {
	sc := newSettledCluster(t)
	sc.annotate(v1alpha1.OperationStartCARotation)
	sc.statusWritesUntil(v1alpha1.RotationPrepared)
	recorder := events.NewFakeRecorder(100)
	// Prepared for longer than the policy's warning, and every CA within
	// the expiry warning.
	sc.r.Recorder, sc.r.CAExpiryWarning = recorder, 20*365*24*time.Hour
	sc.r.Clock = clocktesting.NewFakeClock(time.Now().Add(sc.r.Recommendations.PreparedWarning + time.Hour))
	sc.api.failStatusWrites(conflict(sc.cluster()))
	sc.reconcile() // its status write conflicts
	if n := len(recorder.Events); n != 0 {
		t.Errorf("the pass whose status write conflicted emitted %d events, want none", n)
	}
	if got := sc.statusWritesUntil(v1alpha1.RotationPrepared); got != 1 {
		t.Fatalf("the pass after the conflict wrote the status %d times, want 1", got)
	}
	writes := sc.api.writes.Load()
	if sc.reconcile(); sc.api.writes.Load() != writes {
		t.Errorf("the pass after the conditions were recorded made %d writes, want none", sc.api.writes.Load()-writes)
	}
	got := eventReasons(recorder)
	for _, reason := range []string{v1alpha1.EventCARotationRecommended, v1alpha1.EventCAExpiringSoon} {
		if got[reason] != 1 {
			t.Errorf("%d %s events, want 1 (all events: %v)", got[reason], reason, got)
		}
	}
	for _, condition := range []string{v1alpha1.ConditionCARotationRecommended, v1alpha1.ConditionCAExpiring} {
		if !meta.IsStatusConditionTrue(sc.cluster().Status.Conditions, condition) {
			t.Errorf("%s is not True", condition)
		}
	}
}

func TestNewConditionWarnings(t *testing.T) {
	ready := func(status metav1.ConditionStatus, reason, message string) metav1.Condition {
		return metav1.Condition{Type: v1alpha1.ConditionReady, Status: status, Reason: reason, Message: message}
	}
	condition := func(condition string, status metav1.ConditionStatus, message string) metav1.Condition {
		return metav1.Condition{Type: condition, Status: status, Reason: "Any", Message: message}
	}
	lost := ready(metav1.ConditionFalse, v1alpha1.ReasonCALost, "the client CA's Secret is gone")
	recommended := condition(v1alpha1.ConditionCARotationRecommended, metav1.ConditionTrue, "start a CA rotation")
	expiring := condition(v1alpha1.ConditionCAExpiring, metav1.ConditionTrue, "the cluster CA expires")
	for _, tc := range []struct {
		name        string
		before, now []metav1.Condition
		want        []conditionWarning
	}{
		{name: "nothing recorded yet", want: nil},
		{name: "a blocked Ready, newly", before: []metav1.Condition{ready(metav1.ConditionTrue, v1alpha1.ReasonCredentialsIssued, "issued")},
			now: []metav1.Condition{lost}, want: []conditionWarning{{v1alpha1.ReasonCALost, lost.Message}}},
		{name: "a blocked Ready on the first status", now: []metav1.Condition{lost}, want: []conditionWarning{{v1alpha1.ReasonCALost, lost.Message}}},
		{name: "the same blocked Ready", before: []metav1.Condition{lost}, now: []metav1.Condition{lost}},
		{name: "a blocked Ready with another message", before: []metav1.Condition{lost},
			now:  []metav1.Condition{ready(metav1.ConditionFalse, v1alpha1.ReasonCALost, "the etcd CA's Secret is gone")},
			want: []conditionWarning{{v1alpha1.ReasonCALost, "the etcd CA's Secret is gone"}}},
		{name: "a failed reconcile is not a blocked Ready", now: []metav1.Condition{ready(metav1.ConditionFalse, v1alpha1.ReasonReconcileFailed, "timeout")}},
		{name: "a recommendation and an expiry, newly", before: []metav1.Condition{
			condition(v1alpha1.ConditionCARotationRecommended, metav1.ConditionFalse, "nothing is due"),
		}, now: []metav1.Condition{recommended, expiring}, want: []conditionWarning{
			{v1alpha1.EventCAExpiringSoon, expiring.Message}, {v1alpha1.EventCARotationRecommended, recommended.Message},
		}},
		{name: "a recommendation still True, with another message", before: []metav1.Condition{recommended},
			now: []metav1.Condition{condition(v1alpha1.ConditionCARotationRecommended, metav1.ConditionTrue, "complete it")}},
		{name: "a recommendation gone", before: []metav1.Condition{recommended},
			now: []metav1.Condition{condition(v1alpha1.ConditionCARotationRecommended, metav1.ConditionFalse, "nothing is due")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := newConditionWarnings(tc.before, tc.now); !slices.Equal(got, tc.want) {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}

// An operation whose status write failed keeps its annotation, and no event
// says it was refused: the next pass takes it up. A conflict (the Cluster
// changed since it was read) is retried in a second; any other failure with
// an error, and a Warning event that says it. One the phase does not allow
// is refused: a Warning event, and its annotation removed.
func TestAnOperationIsRefusedForWhatItAsksNotForAFailedWrite(t *testing.T) {
	sc := newSettledCluster(t)
	recorder := events.NewFakeRecorder(100)
	sc.r.Recorder = recorder
	phase := sc.cluster().CARotationPhase()
	sc.annotate(v1alpha1.OperationStartCARotation)
	for _, failure := range []struct {
		err         error
		notRecorded int // OperationNotRecorded events
	}{
		{conflict(sc.cluster()), 0},
		{apierrors.NewTooManyRequests("the API server is busy", 1), 1},
		{apierrors.NewInternalError(errors.New("etcdserver: request timed out")), 1},
	} {
		sc.api.failStatusWrites(failure.err)
		result, err := sc.r.Reconcile(context.Background(), ctrl.Request{NamespacedName: sc.key})
		if apierrors.IsConflict(failure.err) != (err == nil && result.RequeueAfter == time.Second) || !apierrors.IsConflict(failure.err) && err == nil {
			t.Errorf("%v: result %+v, error %v; want a retry in a second after a conflict, an error otherwise", failure.err, result, err)
		}
		c := sc.cluster()
		if _, kept := c.Annotations[v1alpha1.OperationAnnotation]; !kept || c.CARotationPhase() != phase {
			t.Fatalf("%v: annotation kept %t, phase %q; want it kept and the operation not taken up", failure.err, kept, c.CARotationPhase())
		}
		if got := eventReasons(recorder); got[v1alpha1.EventOperationRefused] != 0 || got[v1alpha1.EventOperationNotRecorded] != failure.notRecorded {
			t.Errorf("%v: events %v, want no OperationRefused and %d OperationNotRecorded", failure.err, got, failure.notRecorded)
		}
	}
	if got := sc.statusWritesUntil(v1alpha1.RotationPreparing); got != 1 {
		t.Errorf("the operation taken up in %d status writes, want 1", got)
	}
	if got := eventReasons(recorder); got[v1alpha1.EventOperationRefused] != 0 {
		t.Errorf("events %v, want no OperationRefused", got)
	}

	sc.statusWritesUntil(v1alpha1.RotationPrepared)
	sc.annotate(v1alpha1.OperationStartCARotation) // a rotation is under way
	sc.reconcile()
	if _, kept := sc.cluster().Annotations[v1alpha1.OperationAnnotation]; kept {
		t.Error("a refused operation's annotation is kept")
	}
	if got := eventReasons(recorder); got[v1alpha1.EventOperationRefused] != 1 {
		t.Errorf("events %v, want one OperationRefused for start-ca-rotation in Prepared", got)
	}

	// The old-CA usage gate closed: a completion would lock a client out.
	c := sc.cluster()
	c.CARotation().OldCAUsage = &v1alpha1.OldCAUsage{Total: 1, Dependents: []v1alpha1.OldCADependent{
		{Kind: v1alpha1.OldCADependentNode, Name: "worker-1", Message: "its kubelet's client certificate is from the old client CA"}}}
	if err := sc.api.Status().Update(context.Background(), c); err != nil {
		t.Fatal(err)
	}
	sc.annotate(v1alpha1.OperationCompleteCARotation)
	if _, err := sc.r.Reconcile(context.Background(), ctrl.Request{NamespacedName: sc.key}); err != nil {
		t.Fatal(err)
	}
	c = sc.cluster()
	if _, kept := c.Annotations[v1alpha1.OperationAnnotation]; kept || c.CARotationPhase() != v1alpha1.RotationPrepared {
		t.Errorf("annotation kept %t, phase %q; want the completion refused, in Prepared", kept, c.CARotationPhase())
	}
	if got := eventReasons(recorder); got[v1alpha1.EventOperationRefused] != 1 || got[v1alpha1.EventOperationNotRecorded] != 0 {
		t.Errorf("events %v, want one OperationRefused for a completion the old-CA usage gate holds", got)
	}
}

// A pass that fails before the old-CA usage gate judges, for more than a
// conflict, drops the gate's earlier verdict: a client seen since may depend
// on the old CAs, and a completion waits for a pass that judges again.
func TestAFailedPassLeavesNoOldCAUsageVerdictToCompleteOn(t *testing.T) {
	sc := newSettledCluster(t)
	sc.annotate(v1alpha1.OperationStartCARotation)
	sc.statusWritesUntil(v1alpha1.RotationPrepared)
	c := sc.cluster()
	c.CARotation().OldCAUsage = &v1alpha1.OldCAUsage{} // nothing depends on the old CAs, as a pass found
	if err := sc.api.Status().Update(context.Background(), c); err != nil {
		t.Fatal(err)
	}
	// The next pass fails in the certificates phase: a Secret to write again
	// cannot be created.
	secrets := &corev1.SecretList{}
	if err := sc.api.List(context.Background(), secrets, client.InNamespace(c.Namespace), client.HasLabels{v1alpha1.LabelCertificate}); err != nil || len(secrets.Items) == 0 {
		t.Fatalf("no certificate Secret to delete (%v)", err)
	}
	if err := sc.api.Delete(context.Background(), &secrets.Items[0]); err != nil {
		t.Fatal(err)
	}
	failCreates := func(err error) {
		sc.api.mu.Lock()
		defer sc.api.mu.Unlock()
		sc.api.beforeCreate = func(context.Context, client.WithWatch, client.Object) error { return err }
	}
	// A conflict is looked at again in a second: the verdict stays.
	failCreates(conflict(c))
	if result, err := sc.r.Reconcile(context.Background(), ctrl.Request{NamespacedName: sc.key}); err != nil || result.RequeueAfter != time.Second {
		t.Fatalf("the pass ended with %v, %+v; want the conflict retried in a second", err, result)
	}
	if c = sc.cluster(); c.CARotation().OldCAUsage == nil {
		t.Error("a pass that ended on a conflict dropped the verdict")
	}
	failCreates(errors.New("etcdserver: request timed out"))
	if _, err := sc.r.Reconcile(context.Background(), ctrl.Request{NamespacedName: sc.key}); err == nil {
		t.Fatal("the pass did not fail")
	}
	c = sc.cluster()
	if c.CARotation().OldCAUsage != nil || meta.FindStatusCondition(c.Status.Conditions, v1alpha1.ConditionOldCAsUnused) != nil {
		t.Errorf("oldCAUsage %+v and OldCAsUnused %+v after a failed pass, want neither", c.CARotation().OldCAUsage,
			meta.FindStatusCondition(c.Status.Conditions, v1alpha1.ConditionOldCAsUnused))
	}
	if err := rotation.OldCAsUnused(v1alpha1.Operation{Verb: v1alpha1.VerbCompleteCARotation}, c); err == nil {
		t.Error("a completion would be let through on the verdict of an earlier pass")
	}
}

// A pass that a panic unwinds writes, on its way out, a Ready condition that
// says so, not that the credentials are issued.
func TestAPanickedPassDoesNotSayReady(t *testing.T) {
	c := newCluster("panics")
	api := newFakeAPI(c)
	api.listPanics = true
	r, _ := reconcilerOn(api)
	func() {
		defer func() {
			if recover() == nil {
				t.Error("the pass did not panic")
			}
		}()
		_, _ = r.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(c)})
	}()
	got := &v1alpha1.Cluster{}
	if err := api.Get(context.Background(), client.ObjectKeyFromObject(c), got); err != nil {
		t.Fatal(err)
	}
	if ready := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionReady); ready == nil || ready.Status != metav1.ConditionFalse ||
		ready.Message != errPanicked.Error() {
		t.Errorf("Ready is %+v after a panic, want False: %s", ready, errPanicked)
	}
}

// A phase that polls the managed cluster, backed off to minutes while its
// checks fail, does not push back a time that came before it: the
// service-account key rotation's (workloadTokenRefresh), due in 30 s.
func TestAManagedPollKeepsAnEarlierTimeToLookAgain(t *testing.T) {
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	r := &Reconciler{Clock: clocktesting.NewFakeClock(now)}
	c := newCluster("prod")
	r.failingChecks.start(client.ObjectKeyFromObject(c), now.Add(-time.Hour))
	for _, tt := range []struct {
		name string
		key  *rotation.ServiceAccountKeyDecision
		want time.Duration
	}{
		{"the key due in 30s", &rotation.ServiceAccountKeyDecision{Until: now.Add(30 * time.Second)}, 30 * time.Second},
		{"nothing sooner", nil, DefaultMaxManagedPollInterval},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := &scope{cluster: c, managedCheckFailed: true, keyDecision: tt.key,
				decision: &rotation.Decision{Wait: &rotation.Wait{PollManaged: true}}}
			s.certs.nextRenewal = now.Add(24 * time.Hour)
			if got := r.requeue(s).RequeueAfter; got != tt.want {
				t.Errorf("looks again after %s, want %s", got, tt.want)
			}
		})
	}
}

// The managed polls back off from when the checks began to fail: not from
// when ControlPlaneReachable turned False for an endpoint removed (or empty)
// an hour before, which a failed check keeps as its lastTransitionTime; and
// from anew after a pass in which none failed, a check passing or none due.
func TestAManagedPollBacksOffFromWhenTheChecksBeganToFail(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC))
	r := &Reconciler{Clock: clk, ManagedPollInterval: 5 * time.Second, Recorder: events.NewFakeRecorder(100)}
	c := newCluster("prod")
	c.Spec.ControlPlane.Endpoint = "https://api.prod.example"
	pass := func(reason string, status metav1.ConditionStatus) {
		t.Helper()
		if reason != "" {
			r.setCondition(c, *reachability(status, reason, reason))
		}
		r.trackFailingChecks(client.ObjectKeyFromObject(c), reason == v1alpha1.ReasonEndpointUnreachable, true)
	}
	for _, step := range []struct {
		after  time.Duration
		reason string // "" for a pass that checks nothing
		status metav1.ConditionStatus
		want   time.Duration
	}{
		{0, v1alpha1.ReasonEndpointRemoved, metav1.ConditionFalse, 5 * time.Second},
		{time.Hour, v1alpha1.ReasonEndpointUnreachable, metav1.ConditionFalse, 5 * time.Second}, // failing since now
		{time.Hour, v1alpha1.ReasonEndpointUnreachable, metav1.ConditionFalse, DefaultMaxManagedPollInterval},
		{time.Minute, v1alpha1.ReasonEndpointReachable, metav1.ConditionTrue, 5 * time.Second},
		{time.Hour, v1alpha1.ReasonEndpointUnreachable, metav1.ConditionFalse, 5 * time.Second},
		{time.Hour, v1alpha1.ReasonEndpointUnreachable, metav1.ConditionFalse, DefaultMaxManagedPollInterval},
		{time.Minute, "", "", 5 * time.Second}, // the rotation moved on (aborted, say): no check failed
		{30 * 24 * time.Hour, v1alpha1.ReasonEndpointUnreachable, metav1.ConditionFalse, 5 * time.Second},
	} {
		clk.Step(step.after)
		pass(step.reason, step.status)
		if got := r.managedPollDelay(c, true); got != step.want {
			t.Errorf("%s %s at %s: a failed check looks again after %s, want %s", step.status, step.reason, clk.Now().Format(time.TimeOnly), got, step.want)
		}
	}
}

// ControlPlaneReachable does not go on speaking of an endpoint that was empty
// or removed once the spec names one, in a pass that checks nothing.
func TestNoCheckDue(t *testing.T) {
	for _, tt := range []struct {
		name         string
		endpoint     string
		reason       string // "" for no condition
		checkingStep bool
		want         bool
	}{
		{name: "no condition, no step with checks"},
		{name: "no condition, a step with checks", endpoint: "https://api.prod.example", checkingStep: true, want: true},
		{name: "no condition, no endpoint", checkingStep: true},
		{name: "no endpoint, still none", reason: v1alpha1.ReasonNoEndpoint},
		{name: "no endpoint before, one now", endpoint: "https://api.prod.example", reason: v1alpha1.ReasonNoEndpoint, want: true},
		{name: "removed before, set again", endpoint: "https://api.prod.example", reason: v1alpha1.ReasonEndpointRemoved, want: true},
		{name: "a check's verdict stays", endpoint: "https://api.prod.example", reason: v1alpha1.ReasonEndpointUnreachable, checkingStep: true},
		{name: "a passed check stays", endpoint: "https://api.prod.example", reason: v1alpha1.ReasonEndpointReachable},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := newCluster("prod")
			c.Spec.ControlPlane.Endpoint = tt.endpoint
			if tt.reason != "" {
				meta.SetStatusCondition(&c.Status.Conditions, metav1.Condition{Type: v1alpha1.ConditionControlPlaneReachable, Status: metav1.ConditionFalse, Reason: tt.reason})
			}
			if got := noCheckDue(c, tt.checkingStep); got != tt.want {
				t.Errorf("noCheckDue = %t, want %t", got, tt.want)
			}
		})
	}
}

// During a rotation, the CA that expires soon is named with its generation,
// and the advice is the rotation's next step: the webhook refuses a start.
func TestCAExpiringSoonAdvisesWhatThePhaseAllows(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	ca := func(name string, validity time.Duration) *pki.KeyPair {
		key, err := pki.GenerateKey(pki.ECDSAP256)
		if err != nil {
			t.Fatal(err)
		}
		kp, err := pki.NewCA(pki.CATemplate{CommonName: name, Validity: validity}, key, now)
		if err != nil {
			t.Fatal(err)
		}
		return kp
	}
	soon, late := ca("old", 24*time.Hour), ca("new", 365*24*time.Hour)
	all := map[v1alpha1.CARole]*credentials.CAs{}
	for _, role := range v1alpha1.CARoles() {
		all[role] = &credentials.CAs{Current: late, Previous: soon}
	}
	r := &Reconciler{Clock: clocktesting.NewFakeClock(now), CAExpiryWarning: 30 * 24 * time.Hour}
	for phase, want := range map[v1alpha1.CARotationPhase]string{
		v1alpha1.RotationPrepared:  "the previous cluster CA, which the rotation under way drops, expires at 2026-12-01T12:00:00Z: complete it with carousel.dev/operation=complete-ca-rotation",
		v1alpha1.RotationCompleted: "the cluster CA expires at 2026-12-01T12:00:00Z: start a CA rotation with carousel.dev/operation=start-ca-rotation",
	} {
		c := &v1alpha1.Cluster{}
		c.Status.Credentials = &v1alpha1.ClusterCredentials{Rotation: &v1alpha1.CredentialsRotation{CertificateAuthorities: &v1alpha1.CARotation{Phase: phase}}}
		r.updateInventory(c, all)
		if got := meta.FindStatusCondition(c.Status.Conditions, v1alpha1.ConditionCAExpiring); got == nil || got.Message != want {
			t.Errorf("%s: %+v, want the message %q", phase, got, want)
		}
	}
}

// A condition's message is cut to the schema's limit: past it, the API server
// refused every write of the status.
func TestAConditionMessageIsCutToTheSchemasLimit(t *testing.T) {
	r := &Reconciler{Clock: clocktesting.NewFakeClock(time.Now())}
	c := &v1alpha1.Cluster{}
	r.setCondition(c, metav1.Condition{Type: v1alpha1.ConditionCARotation, Status: metav1.ConditionTrue, Reason: "Waiting",
		Message: strings.Repeat("node (last seen 2026-11-23T10:30:00Z), ", 2000)})
	if n := len(c.Status.Conditions[0].Message); n > maxConditionMessage || n < maxConditionMessage-4 {
		t.Fatalf("message of %d bytes, want it cut to %d", n, maxConditionMessage)
	}
}

// An operation queued for the maintenance window that nothing holds any
// more (the window open, the phase allowing it) is still queued until a
// pass carries it out: the condition says so, not that nothing is queued.
func TestAQueuedOperationDueAtTheNextPassIsStillSaidToBeQueued(t *testing.T) {
	at := time.Date(2026, 3, 1, 22, 30, 0, 0, time.UTC)
	r := &Reconciler{Clock: clocktesting.NewFakeClock(at)}
	c := newCluster("prod")
	c.Spec.Maintenance = &v1alpha1.MaintenanceSpec{TimeWindow: v1alpha1.MaintenanceTimeWindow{Begin: "220000+0000", End: "230000+0000"}}
	metav1.SetMetaDataAnnotation(&c.ObjectMeta, v1alpha1.MaintenanceOperationAnnotation, v1alpha1.OperationStartCARotation)
	if next := r.setMaintenanceCondition(c); !next.Equal(at) {
		t.Errorf("look again at %s, want now (%s)", next, at)
	}
	cond := meta.FindStatusCondition(c.Status.Conditions, v1alpha1.ConditionMaintenanceOperationQueued)
	if cond == nil || cond.Status != metav1.ConditionTrue || cond.Reason != v1alpha1.ReasonMaintenanceWindowOpen || !strings.Contains(cond.Message, "start-ca-rotation is carried out at the next pass") {
		t.Errorf("MaintenanceOperationQueued is %+v, want True %s naming the operation", cond, v1alpha1.ReasonMaintenanceWindowOpen)
	}
	// Behind an operation requested (deferred, say), it waits for that one.
	metav1.SetMetaDataAnnotation(&c.ObjectMeta, v1alpha1.OperationAnnotation, "reconcile")
	r.setMaintenanceCondition(c)
	if cond := meta.FindStatusCondition(c.Status.Conditions, v1alpha1.ConditionMaintenanceOperationQueued); cond == nil ||
		!strings.Contains(cond.Message, "start-ca-rotation is carried out once carousel.dev/operation=reconcile is") {
		t.Errorf("MaintenanceOperationQueued is %+v, want it waiting for the operation requested", cond)
	}
}
