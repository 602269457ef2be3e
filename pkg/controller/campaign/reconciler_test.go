package campaign

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
	"github.com/carousel-dev/carousel/pkg/scheme"
)

// readyCluster is a Ready Cluster of the fleet, never rotated.
func readyCluster(name string) *v1alpha1.Cluster {
	c := &v1alpha1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: "fleet", Name: name, UID: types.UID("uid-" + name), Generation: 1,
		Labels: map[string]string{"fleet": "blue"}}}
	meta.SetStatusCondition(&c.Status.Conditions, metav1.Condition{Type: v1alpha1.ConditionReady, Status: metav1.ConditionTrue,
		Reason: v1alpha1.ReasonCredentialsIssued, ObservedGeneration: 1})
	c.Status.Credentials = &v1alpha1.ClusterCredentials{}
	for _, role := range v1alpha1.CARoles() {
		c.Status.Credentials.CertificateAuthorities = append(c.Status.Credentials.CertificateAuthorities,
			v1alpha1.CertificateAuthorityInventory{Role: role, Current: &v1alpha1.CertificateInfo{Fingerprint: string(role)}})
	}
	return c
}

// fixture is a campaign of one at a time over the Clusters a, b and c, whose
// Cluster patches go through patch.
func fixture(t *testing.T, patch func(ctx context.Context, c client.WithWatch, obj client.Object, p client.Patch, opts ...client.PatchOption) error) (*Reconciler, *events.FakeRecorder) {
	t.Helper()
	rc := &v1alpha1.RotationCampaign{ObjectMeta: metav1.ObjectMeta{Namespace: "fleet", Name: "wave", Generation: 1},
		Spec: v1alpha1.RotationCampaignSpec{Selector: metav1.LabelSelector{MatchLabels: map[string]string{"fleet": "blue"}},
			MaxConcurrent: ptr.To(intstr.FromInt32(1)), MaxFailures: ptr.To(intstr.FromInt32(5))}}
	c := fake.NewClientBuilder().WithScheme(scheme.New()).WithStatusSubresource(&v1alpha1.RotationCampaign{}).
		WithObjects(rc, readyCluster("a"), readyCluster("b"), readyCluster("c")).
		WithInterceptorFuncs(interceptor.Funcs{Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, p client.Patch, opts ...client.PatchOption) error {
			if _, ok := obj.(*v1alpha1.Cluster); ok {
				return patch(ctx, c, obj, p, opts...)
			}
			return c.Patch(ctx, obj, p, opts...)
		}}).Build()
	recorder := events.NewFakeRecorder(10)
	return &Reconciler{Client: c, Clock: clocktesting.NewFakeClock(time.Now()), Recorder: recorder}, recorder
}

func reconcileWave(t *testing.T, r *Reconciler) *v1alpha1.RotationCampaign {
	t.Helper()
	req := ctrl.Request{NamespacedName: types.NamespacedName{Namespace: "fleet", Name: "wave"}}
	if _, err := r.Reconcile(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	rc := &v1alpha1.RotationCampaign{}
	if err := r.Client.Get(context.Background(), req.NamespacedName, rc); err != nil {
		t.Fatal(err)
	}
	return rc
}

// A cache that does not show the annotation the campaign set yet must not
// make it start a second Cluster past its budget of one.
func TestAStartTheCacheDoesNotShowYetHoldsItsPlace(t *testing.T) {
	var patched []string
	r, _ := fixture(t, acceptedUnseen(&patched))
	reconcileWave(t, r)
	rc := reconcileWave(t, r)
	if len(patched) != 1 || patched[0] != "a" {
		t.Fatalf("patched %v, want only a: the budget is one", patched)
	}
	if rc.Status.Clusters.InProgress != 1 || rc.Status.Clusters.Pending != 2 {
		t.Errorf("counts %+v, want a in progress and two pending", rc.Status.Clusters)
	}
}

// A start made at the Start step that the cache does not show yet, when the
// step turns to Complete, keeps the Complete step from beginning: a
// rotation started before it is the campaign's to complete, and one that
// began after it would be skipped.
func TestAStartTheCacheDoesNotShowYetHoldsTheCompleteStep(t *testing.T) {
	var patched []string
	r, _ := fixture(t, acceptedUnseen(&patched))
	reconcileWave(t, r)
	rc := &v1alpha1.RotationCampaign{}
	if err := r.Client.Get(context.Background(), types.NamespacedName{Namespace: "fleet", Name: "wave"}, rc); err != nil {
		t.Fatal(err)
	}
	rc.Spec.Step = v1alpha1.CampaignComplete
	if err := r.Client.Update(context.Background(), rc); err != nil {
		t.Fatal(err)
	}
	reconcileWave(t, r)
	rc = reconcileWave(t, r)
	if rc.Status.CompleteStepTime != nil {
		t.Errorf("completeStepTime %s stored while a's start, not shown by the cache yet, is pending", rc.Status.CompleteStepTime)
	}
	if rc.Status.Clusters.Waiting != 1 || rc.Status.Phase == v1alpha1.CampaignCompleted {
		t.Errorf("counts %+v, phase %s; want a waiting, not Completed", rc.Status.Clusters, rc.Status.Phase)
	}
	if len(patched) != 1 {
		t.Errorf("patched %v, want only a's start", patched)
	}
}

// acceptedUnseen is a fixture's patch of Clusters that the API server
// accepts but the reads go on showing the Cluster as it was (a cache
// behind); it adds the name of every Cluster patched to patched.
func acceptedUnseen(patched *[]string) func(ctx context.Context, c client.WithWatch, obj client.Object, p client.Patch, opts ...client.PatchOption) error {
	return func(_ context.Context, _ client.WithWatch, obj client.Object, _ client.Patch, _ ...client.PatchOption) error {
		*patched = append(*patched, obj.GetName())
		return nil
	}
}

// refusingA is a fixture's patch of Clusters that refuses a's, as the Cluster
// webhook would, and adds the name of every Cluster patched to patched.
func refusingA(patched *[]string) func(ctx context.Context, c client.WithWatch, obj client.Object, p client.Patch, opts ...client.PatchOption) error {
	return refusing("a", patched)
}

// refusing is a fixture's patch of Clusters that refuses name's, as the
// Cluster webhook would, and adds the name of every Cluster patched to
// patched.
func refusing(name string, patched *[]string) func(ctx context.Context, c client.WithWatch, obj client.Object, p client.Patch, opts ...client.PatchOption) error {
	return func(ctx context.Context, c client.WithWatch, obj client.Object, p client.Patch, opts ...client.PatchOption) error {
		if obj.GetName() == name {
			*patched = append(*patched, obj.GetName())
			return apierrors.NewForbidden(v1alpha1.Resource("clusters"), "a", errors.New("the cluster says no"))
		}
		return recordingPatches(patched)(ctx, c, obj, p, opts...)
	}
}

// recordingPatches records the name of each Cluster patched, and patches it.
func recordingPatches(patched *[]string) func(ctx context.Context, c client.WithWatch, obj client.Object, p client.Patch, opts ...client.PatchOption) error {
	return func(ctx context.Context, c client.WithWatch, obj client.Object, p client.Patch, opts ...client.PatchOption) error {
		*patched = append(*patched, obj.GetName())
		return c.Patch(ctx, obj, p, opts...)
	}
}

// A Cluster that changed since the pass read it (its patch conflicts), or
// that the API server no longer has (deleted meanwhile), is looked at again
// in a second, as a stale campaign is, not
// failed with an error; the next pass starts it, here where the cache
// still shows it.
func TestAClusterThatChangedSinceItWasReadIsStartedOnTheNextPass(t *testing.T) {
	for name, stale := range map[string]error{
		"changed": apierrors.NewConflict(v1alpha1.Resource("clusters"), "a", errors.New("changed since read")),
		"deleted": apierrors.NewNotFound(v1alpha1.Resource("clusters"), "a"),
	} {
		t.Run(name, func(t *testing.T) {
			var patched []string
			staleOnce := 1
			r, _ := fixture(t, func(ctx context.Context, c client.WithWatch, obj client.Object, p client.Patch, opts ...client.PatchOption) error {
				if staleOnce > 0 {
					staleOnce--
					return stale
				}
				return recordingPatches(&patched)(ctx, c, obj, p, opts...)
			})
			req := ctrl.Request{NamespacedName: types.NamespacedName{Namespace: "fleet", Name: "wave"}}
			result, err := r.Reconcile(context.Background(), req)
			if err != nil || result.RequeueAfter != time.Second {
				t.Fatalf("result %+v, error %v; want a retry in a second", result, err)
			}
			rc := reconcileWave(t, r)
			if len(patched) != 1 || patched[0] != "a" || rc.Status.Clusters.InProgress != 1 || rc.Status.Clusters.Failed != 0 {
				t.Fatalf("patched %v, counts %+v; want a started on the next pass, nothing failed", patched, rc.Status.Clusters)
			}
		})
	}
}

// A refused Cluster fails, is not asked again while it does not change, and
// the same pass starts the next one in its place.
func TestARefusedClusterFailsAndTheNextOneStarts(t *testing.T) {
	var patched []string
	r, recorder := fixture(t, refusingA(&patched))
	rc := reconcileWave(t, r)
	if len(patched) != 2 || patched[0] != "a" || patched[1] != "b" {
		t.Fatalf("patched %v, want a (refused), then b in the same pass", patched)
	}
	if rc.Status.Clusters.Failed != 1 || rc.Status.Clusters.InProgress != 1 || rc.Status.Phase != v1alpha1.CampaignStarting {
		t.Errorf("status %+v in phase %s, want a failed, b in progress, still Starting", rc.Status.Clusters, rc.Status.Phase)
	}
	if len(rc.Status.Blocking) == 0 || rc.Status.Blocking[0].Name != "a" || rc.Status.Blocking[0].State != v1alpha1.CampaignClusterFailed {
		t.Errorf("blocking %+v, want a failed first", rc.Status.Blocking)
	}
	refusals := 0
	for len(recorder.Events) > 0 {
		if strings.HasPrefix(<-recorder.Events, "Warning "+v1alpha1.EventOperationRefused) {
			refusals++
		}
	}
	if refusals != 1 {
		t.Errorf("%d refusal events, want one", refusals)
	}
	reconcileWave(t, r)
	if len(patched) != 2 {
		t.Errorf("patched %v: a, unchanged since its refusal, was asked again", patched)
	}
}

// A refusal kept in the status carries the start of its message, cut at
// maxRefusalMessage bytes: the status keeps one for every Cluster that
// refused, and an admission webhook's message can be long.
func TestARefusalKeptInTheStatusIsCut(t *testing.T) {
	long := strings.Repeat("the old-CA usage gate names Node worker-n; ", 40)
	r, _ := fixture(t, func(ctx context.Context, c client.WithWatch, obj client.Object, p client.Patch, opts ...client.PatchOption) error {
		if obj.GetName() == "a" {
			return apierrors.NewForbidden(v1alpha1.Resource("clusters"), "a", errors.New(long))
		}
		return c.Patch(ctx, obj, p, opts...)
	})
	rc := reconcileWave(t, r)
	if len(rc.Status.Refused) != 1 {
		t.Fatalf("status.refused %+v, want a's refusal", rc.Status.Refused)
	}
	if msg := rc.Status.Refused[0].Message; len(msg) > maxRefusalMessage || !strings.HasSuffix(msg, "…") || !strings.Contains(msg, "the old-CA usage gate names Node worker-n") {
		t.Errorf("refusal message of %d bytes %q, want the start of the webhook's, cut at %d bytes", len(msg), msg, maxRefusalMessage)
	}
	// The pass after records b started; the one after that has nothing new.
	if settled := reconcileWave(t, r); reconcileWave(t, r).ResourceVersion != settled.ResourceVersion {
		t.Error("a pass with nothing new wrote the campaign again")
	}
}

// The refusal of a Cluster the campaign no longer selects (deleted, or
// relabelled) is forgotten, and so are a deleted campaign's.
func TestRefusalsAreForgottenWithTheirClusterOrCampaign(t *testing.T) {
	var patched []string
	r, _ := fixture(t, refusingA(&patched))
	reconcileWave(t, r)
	key := types.NamespacedName{Namespace: "fleet", Name: "wave"}
	if len(r.memory.campaigns[key].refused) != 1 {
		t.Fatalf("refusals %v, want a's", r.memory.campaigns[key].refused)
	}
	if err := r.Client.Delete(context.Background(), readyCluster("a")); err != nil {
		t.Fatal(err)
	}
	reconcileWave(t, r)
	if len(r.memory.campaigns[key].refused) != 0 {
		t.Errorf("refusals %v after a was deleted, want none", r.memory.campaigns[key].refused)
	}
	r.memory.refuse(key, readyCluster("b"), "no")
	r.Forget(ctrl.Request{NamespacedName: key})
	if len(r.memory.campaigns) != 0 {
		t.Errorf("%d campaigns held after the campaign was forgotten, want none", len(r.memory.campaigns))
	}
}

// A campaign deleted and created again under its name (kubectl replace
// --force) that the controller sees only as the new one, the workqueue
// having merged the two events, starts afresh: before, it took over the old
// one's refusals, counted a as failed and, with maxFailures 0, was halted
// at once.
func TestACampaignCreatedAgainUnderItsNameDoesNotInheritTheOldOnesRefusals(t *testing.T) {
	ctx := context.Background()
	var patched []string
	refuse := refusingA(&patched)
	r, _ := fixture(t, func(ctx context.Context, c client.WithWatch, obj client.Object, p client.Patch, opts ...client.PatchOption) error {
		return refuse(ctx, c, obj, p, opts...)
	})
	key := types.NamespacedName{Namespace: "fleet", Name: "wave"}
	old := &v1alpha1.RotationCampaign{}
	if err := r.Client.Get(ctx, key, old); err != nil {
		t.Fatal(err)
	}
	old.UID, old.Spec.MaxFailures = "uid-old", ptr.To(intstr.FromInt32(0))
	if err := r.Client.Delete(ctx, old); err != nil {
		t.Fatal(err)
	}
	old.ResourceVersion = ""
	if err := r.Client.Create(ctx, old); err != nil {
		t.Fatal(err)
	}
	if rc := reconcileWave(t, r); rc.Status.Phase != v1alpha1.CampaignHalted || len(rc.Status.Refused) != 1 {
		t.Fatalf("phase %s, status.refused %+v; want a refused and the campaign Halted", rc.Status.Phase, rc.Status.Refused)
	}

	if err := r.Client.Delete(ctx, old); err != nil {
		t.Fatal(err)
	}
	recreated := &v1alpha1.RotationCampaign{ObjectMeta: metav1.ObjectMeta{Namespace: "fleet", Name: "wave", UID: "uid-new", Generation: 1},
		Spec: *old.Spec.DeepCopy()}
	if err := r.Client.Create(ctx, recreated); err != nil {
		t.Fatal(err)
	}
	patched, refuse = nil, recordingPatches(&patched) // a takes the new campaign's start
	rc := reconcileWave(t, r)
	if rc.UID != "uid-new" {
		t.Fatalf("read the campaign %s, want the new one", rc.UID)
	}
	if rc.Status.Clusters.Failed != 0 || len(rc.Status.Refused) != 0 || rc.Status.Phase != v1alpha1.CampaignStarting ||
		!slices.Equal(patched, []string{"a"}) {
		t.Errorf("the new campaign: phase %s, counts %+v, status.refused %+v, patched %v; want nothing failed or refused, a started",
			rc.Status.Phase, rc.Status.Clusters, rc.Status.Refused, patched)
	}
}

// A Cluster whose controller drops the operation the webhook let in (the
// old-CA usage gate found a dependent since) fails, and the next Cluster
// takes its place; before, it held its place as "requested" for ever.
func TestAClusterThatDropsTheOperationFailsAndTheNextOneStarts(t *testing.T) {
	var patched []string
	r, _ := fixture(t, recordingPatches(&patched))
	reconcileWave(t, r)
	reconcileWave(t, r) // the campaign sees a's annotation
	a := &v1alpha1.Cluster{}
	if err := r.Client.Get(context.Background(), types.NamespacedName{Namespace: "fleet", Name: "a"}, a); err != nil {
		t.Fatal(err)
	}
	delete(a.Annotations, v1alpha1.OperationAnnotation) // as the Cluster controller refusing it does
	if err := r.Client.Update(context.Background(), a); err != nil {
		t.Fatal(err)
	}
	rc := reconcileWave(t, r)
	if len(patched) != 2 || patched[0] != "a" || patched[1] != "b" {
		t.Fatalf("patched %v, want a, then b in its place", patched)
	}
	if rc.Status.Clusters.Failed != 1 || len(rc.Status.Blocking) == 0 || rc.Status.Blocking[0].Name != "a" ||
		!strings.Contains(rc.Status.Blocking[0].Message, "dropped the operation") {
		t.Errorf("counts %+v, blocking %+v; want a failed for dropping the operation", rc.Status.Clusters, rc.Status.Blocking)
	}
	reconcileWave(t, r)
	if len(patched) != 2 {
		t.Errorf("patched %v: a, unchanged since it dropped the operation, was asked again", patched)
	}
}

// A Cluster deleted and created again under its name, before a pass saw the
// start take, is another Cluster: it did not drop the operation, and it is
// started (the campaign remembered its starts by name, and failed it).
func TestAClusterCreatedAgainUnderItsNameDidNotDropTheStart(t *testing.T) {
	var patched []string
	r, _ := fixture(t, recordingPatches(&patched))
	reconcileWave(t, r)
	ctx := context.Background()
	if err := r.Client.Delete(ctx, readyCluster("a")); err != nil {
		t.Fatal(err)
	}
	again := readyCluster("a")
	again.UID = "uid-a-again"
	if err := r.Client.Create(ctx, again); err != nil {
		t.Fatal(err)
	}
	rc := reconcileWave(t, r)
	if rc.Status.Clusters.Failed != 0 || !slices.Equal(patched, []string{"a", "a"}) {
		t.Errorf("counts %+v, blocking %+v, patched %v; want a started again, none failed", rc.Status.Clusters, rc.Status.Blocking, patched)
	}
}

// A pass on a stale read of the campaign, from before its start time was
// recorded, does not move that time: the decisions count from it.
func TestAStaleReadDoesNotMoveTheStartTime(t *testing.T) {
	r, _ := fixture(t, func(ctx context.Context, c client.WithWatch, obj client.Object, p client.Patch, opts ...client.PatchOption) error {
		return c.Patch(ctx, obj, p, opts...)
	})
	key := types.NamespacedName{Namespace: "fleet", Name: "wave"}
	stale := &v1alpha1.RotationCampaign{}
	if err := r.Client.Get(context.Background(), key, stale); err != nil {
		t.Fatal(err)
	}
	first := reconcileWave(t, r).Status.StartTime
	r.Clock.(*clocktesting.FakeClock).Step(time.Hour)
	stored := readStale(r, stale)
	if res, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: key}); err != nil || res.RequeueAfter != time.Second {
		t.Errorf("a pass on a stale read: %+v, %v; want it to look again in a second", res, err)
	}
	rc := &v1alpha1.RotationCampaign{}
	if err := stored.Get(context.Background(), key, rc); err != nil {
		t.Fatal(err)
	}
	if !rc.Status.StartTime.Equal(first) {
		t.Errorf("start time %s, want the first one, %s", rc.Status.StartTime, first)
	}
}

// A pass on a read that does not show the last pass's status yet neither
// stamps the step's end again, later, nor announces it a second time.
func TestAStaleReadDoesNotMoveTheTimeAStepWasDone(t *testing.T) {
	r, recorder := fixture(t, recordingPatches(new([]string)))
	ctx := context.Background()
	clk := r.Clock.(*clocktesting.FakeClock)
	key := types.NamespacedName{Namespace: "fleet", Name: "wave"}
	reconcileWave(t, r) // stamps the start, starts a
	clk.Step(time.Minute)
	for _, name := range []string{"a", "b", "c"} {
		c := &v1alpha1.Cluster{}
		if err := r.Client.Get(ctx, types.NamespacedName{Namespace: "fleet", Name: name}, c); err != nil {
			t.Fatal(err)
		}
		delete(c.Annotations, v1alpha1.OperationAnnotation)
		c.Status.Credentials = &v1alpha1.ClusterCredentials{Rotation: &v1alpha1.CredentialsRotation{CertificateAuthorities: &v1alpha1.CARotation{
			Phase: v1alpha1.RotationPrepared, LastInitiationTime: &metav1.Time{Time: clk.Now()}, OldCAUsage: &v1alpha1.OldCAUsage{}}}}
		if err := r.Client.Update(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	stale := &v1alpha1.RotationCampaign{}
	if err := r.Client.Get(ctx, key, stale); err != nil {
		t.Fatal(err)
	}
	rc := reconcileWave(t, r)
	if rc.Status.Phase != v1alpha1.CampaignPrepared || rc.Status.PreparedTime == nil {
		t.Fatalf("phase %s, prepared at %v; want Prepared, stamped", rc.Status.Phase, rc.Status.PreparedTime)
	}
	first := rc.Status.PreparedTime

	clk.Step(time.Hour)
	stored := readStale(r, stale)
	if res, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: key}); err != nil || res.RequeueAfter != time.Second {
		t.Errorf("a pass on a stale read: %+v, %v; want it to look again in a second", res, err)
	}
	if err := stored.Get(ctx, key, rc); err != nil {
		t.Fatal(err)
	}
	if !rc.Status.PreparedTime.Equal(first) {
		t.Errorf("prepared at %s, want the first time, %s", rc.Status.PreparedTime, first)
	}
	done := 0
	for len(recorder.Events) > 0 {
		if strings.Contains(<-recorder.Events, v1alpha1.EventCampaignStepDone) {
			done++
		}
	}
	if done != 1 {
		t.Errorf("%d %s events, want one", done, v1alpha1.EventCampaignStepDone)
	}
}

// readStale has r read the campaign as stale from now on, as a cache behind
// the API server does, and returns the client that reads it as stored.
func readStale(r *Reconciler, stale *v1alpha1.RotationCampaign) (stored client.Client) {
	stored = r.Client
	r.Client = interceptor.NewClient(stored.(client.WithWatch), interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, k client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if rc, ok := obj.(*v1alpha1.RotationCampaign); ok {
				stale.DeepCopyInto(rc)
				return nil
			}
			return c.Get(ctx, k, obj, opts...)
		}})
	return stored
}

// A refusal that uses up the failure budget halts the campaign before the
// rest of its wave starts.
func TestARefusalThatUsesUpTheFailureBudgetStartsNoMoreOfTheWave(t *testing.T) {
	var patched []string
	r, _ := fixture(t, refusingA(&patched))
	rc := &v1alpha1.RotationCampaign{}
	if err := r.Client.Get(context.Background(), types.NamespacedName{Namespace: "fleet", Name: "wave"}, rc); err != nil {
		t.Fatal(err)
	}
	rc.Spec.MaxConcurrent, rc.Spec.MaxFailures = ptr.To(intstr.FromInt32(3)), ptr.To(intstr.FromInt32(0))
	if err := r.Client.Update(context.Background(), rc); err != nil {
		t.Fatal(err)
	}
	rc = reconcileWave(t, r)
	if len(patched) != 1 || patched[0] != "a" {
		t.Fatalf("patched %v, want only a: its refusal used up a failure budget of 0", patched)
	}
	if rc.Status.Phase != v1alpha1.CampaignHalted {
		t.Errorf("phase %s, want Halted", rc.Status.Phase)
	}
}

// A campaign halted by a refusal stays halted in a manager that starts
// anew (a restart, or the shard that takes the campaign over), which holds
// none of the refusals its predecessor saw: it reads them from the status.
// Before, the refused Cluster counted as pending there, the campaign was no
// longer halted, and it started a Cluster the halt had held back.
func TestARefusalOutlivesTheProcessThatSawIt(t *testing.T) {
	ctx := context.Background()
	var patched []string
	r, _ := fixture(t, refusing("c", &patched))
	rc := &v1alpha1.RotationCampaign{}
	if err := r.Client.Get(ctx, types.NamespacedName{Namespace: "fleet", Name: "wave"}, rc); err != nil {
		t.Fatal(err)
	}
	rc.Spec.MaxFailures = ptr.To(intstr.FromInt32(0))
	if err := r.Client.Update(ctx, rc); err != nil {
		t.Fatal(err)
	}
	// a and b wait for an operation of their own, so that c is started.
	setOperation := func(name, operation string) {
		t.Helper()
		c := &v1alpha1.Cluster{}
		if err := r.Client.Get(ctx, types.NamespacedName{Namespace: "fleet", Name: name}, c); err != nil {
			t.Fatal(err)
		}
		if operation == "" {
			delete(c.Annotations, v1alpha1.OperationAnnotation)
		} else {
			c.Annotations = map[string]string{v1alpha1.OperationAnnotation: operation}
		}
		if err := r.Client.Update(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	setOperation("a", string(v1alpha1.VerbReconcile))
	setOperation("b", string(v1alpha1.VerbReconcile))
	if rc = reconcileWave(t, r); rc.Status.Phase != v1alpha1.CampaignHalted || !slices.Equal(patched, []string{"c"}) {
		t.Fatalf("phase %s after patching %v, want c refused and the campaign Halted", rc.Status.Phase, patched)
	}
	if len(rc.Status.Refused) != 1 || rc.Status.Refused[0].Name != "c" || rc.Status.Refused[0].UID != "uid-c" {
		t.Fatalf("status.refused %+v, want c's refusal", rc.Status.Refused)
	}
	setOperation("a", "")
	setOperation("b", "")

	restarted := &Reconciler{Client: r.Client, Clock: r.Clock, Recorder: events.NewFakeRecorder(10)}
	if rc = reconcileWave(t, restarted); rc.Status.Phase != v1alpha1.CampaignHalted || !slices.Equal(patched, []string{"c"}) {
		t.Fatalf("a restarted manager: phase %s after patching %v, want the campaign Halted and nothing started", rc.Status.Phase, patched)
	}

	// Once c changes, its refusal is forgotten, in the status too.
	setOperation("c", string(v1alpha1.VerbReconcile))
	if rc = reconcileWave(t, restarted); len(rc.Status.Refused) != 0 || rc.Status.Phase == v1alpha1.CampaignHalted {
		t.Fatalf("after c changed: phase %s, status.refused %+v; want the refusal forgotten and the campaign going on", rc.Status.Phase, rc.Status.Refused)
	}
}

// A campaign stored with an empty selector (the webhook off) selects every
// Cluster for the label selector it is: the controller starts none, and says
// why.
func TestACampaignWithAnInvalidSpecStartsNothing(t *testing.T) {
	var patched []string
	r, recorder := fixture(t, recordingPatches(&patched))
	rc := &v1alpha1.RotationCampaign{}
	if err := r.Client.Get(context.Background(), types.NamespacedName{Namespace: "fleet", Name: "wave"}, rc); err != nil {
		t.Fatal(err)
	}
	rc.Spec.Selector = metav1.LabelSelector{}
	if err := r.Client.Update(context.Background(), rc); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		rc = reconcileWave(t, r)
	}
	if len(patched) != 0 {
		t.Fatalf("patched %v, want none", patched)
	}
	cond := meta.FindStatusCondition(rc.Status.Conditions, v1alpha1.ConditionCampaignProgressing)
	if cond == nil || cond.Status != metav1.ConditionFalse || cond.Reason != v1alpha1.ReasonCampaignInvalidSpec || !strings.Contains(cond.Message, "spec.selector") {
		t.Errorf("Progressing = %+v, want False InvalidSpec naming spec.selector", cond)
	}
	if len(recorder.Events) != 1 {
		t.Errorf("%d events, want one warning for the two passes", len(recorder.Events))
	}
}

// A campaign whose step went back from Complete to Start (stored past the
// webhook) starts nothing, and says why: the Clusters skipped at the
// Complete step would be started again.
func TestACampaignBackAtTheStartStepStartsNothing(t *testing.T) {
	var patched []string
	r, _ := fixture(t, recordingPatches(&patched))
	rc := &v1alpha1.RotationCampaign{}
	if err := r.Client.Get(context.Background(), types.NamespacedName{Namespace: "fleet", Name: "wave"}, rc); err != nil {
		t.Fatal(err)
	}
	rc.Status.StartTime = &metav1.Time{Time: r.Clock.Now().Add(-time.Hour)}
	rc.Status.CompleteStepTime = &metav1.Time{Time: r.Clock.Now().Add(-time.Minute)}
	if err := r.Client.Status().Update(context.Background(), rc); err != nil {
		t.Fatal(err)
	}
	if rc = reconcileWave(t, r); len(patched) != 0 {
		t.Fatalf("patched %v, want none", patched)
	}
	cond := meta.FindStatusCondition(rc.Status.Conditions, v1alpha1.ConditionCampaignProgressing)
	if cond == nil || cond.Status != metav1.ConditionFalse || cond.Reason != v1alpha1.ReasonCampaignInvalidSpec || !strings.Contains(cond.Message, "does not go back to Start") {
		t.Errorf("Progressing = %+v, want False InvalidSpec saying the step does not go back", cond)
	}
}

// lendingReader lists Clusters the way the cache does when asked not to copy
// them: each item shares its maps, slices and pointers with the object the
// cache keeps.
type lendingReader struct {
	client.Reader
	kept []*v1alpha1.Cluster
}

func (l lendingReader) List(_ context.Context, list client.ObjectList, _ ...client.ListOption) error {
	clusters := list.(*v1alpha1.ClusterList)
	for _, c := range l.kept {
		clusters.Items = append(clusters.Items, *c)
	}
	return nil
}

// A pass reads the Clusters the cache lends it without copying them, so it
// must change none of them, even the one it starts.
func TestAPassChangesNoClusterTheCacheLends(t *testing.T) {
	r, _ := fixture(t, func(ctx context.Context, c client.WithWatch, obj client.Object, p client.Patch, opts ...client.PatchOption) error {
		return c.Patch(ctx, obj, p, opts...)
	})
	kept := []*v1alpha1.Cluster{readyCluster("a"), readyCluster("b"), readyCluster("c")}
	for _, c := range kept {
		if err := r.Client.Get(context.Background(), client.ObjectKeyFromObject(c), c); err != nil {
			t.Fatal(err)
		}
		c.Annotations = map[string]string{"team": "platform"} // a map the pass could write into
	}
	before := make([]*v1alpha1.Cluster, len(kept))
	for i, c := range kept {
		before[i] = c.DeepCopy()
	}
	r.Clusters = lendingReader{kept: kept}
	reconcileWave(t, r)
	started := &v1alpha1.Cluster{}
	if err := r.Client.Get(context.Background(), client.ObjectKey{Namespace: "fleet", Name: "a"}, started); err != nil {
		t.Fatal(err)
	}
	if started.Annotations[v1alpha1.OperationAnnotation] == "" {
		t.Fatal("the pass started no Cluster")
	}
	for i, c := range kept {
		if !equality.Semantic.DeepEqual(c, before[i]) {
			t.Errorf("the pass changed the cache's Cluster %s: annotations %v, want %v", c.Name, c.Annotations, before[i].Annotations)
		}
	}
}

// The Complete step's time, after which a rotation started is not the
// campaign's, is stored only once no selected Cluster has a start pending:
// a start the campaign set at its Start step and the Cluster controller took
// up only after the step moved on is completed all the same, not skipped,
// also when that controller's clock (another shard's) runs ahead of the
// campaign's.
func TestACampaignStartTakenUpAfterTheCompleteStepBeganIsCompleted(t *testing.T) {
	for _, tc := range []struct {
		name    string
		takenUp time.Duration // after the campaign's first pass at the Complete step, by the clock of the process that took it up
	}{
		{"by the campaign's clock", 30 * time.Second},
		{"by a clock 2s ahead of the campaign's", time.Minute + 2*time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var patched []string
			r, _ := fixture(t, recordingPatches(&patched))
			ctx := context.Background()
			clk := r.Clock.(*clocktesting.FakeClock)
			t0 := clk.Now()
			prepared := func(name string, initiated time.Time) {
				t.Helper()
				c := &v1alpha1.Cluster{}
				if err := r.Client.Get(ctx, types.NamespacedName{Namespace: "fleet", Name: name}, c); err != nil {
					t.Fatal(err)
				}
				delete(c.Annotations, v1alpha1.OperationAnnotation)
				c.Status.Credentials = &v1alpha1.ClusterCredentials{Rotation: &v1alpha1.CredentialsRotation{CertificateAuthorities: &v1alpha1.CARotation{
					Phase: v1alpha1.RotationPrepared, LastInitiationTime: &metav1.Time{Time: initiated}, OldCAUsage: &v1alpha1.OldCAUsage{}}}}
				if err := r.Client.Update(ctx, c); err != nil {
					t.Fatal(err)
				}
			}
			prepared("a", t0.Add(-10*time.Minute))
			prepared("c", t0.Add(-10*time.Minute))
			b := &v1alpha1.Cluster{}
			if err := r.Client.Get(ctx, types.NamespacedName{Namespace: "fleet", Name: "b"}, b); err != nil {
				t.Fatal(err)
			}
			metav1.SetMetaDataAnnotation(&b.ObjectMeta, v1alpha1.OperationAnnotation, v1alpha1.OperationStartCARotation) // set at the Start step, not taken up yet
			if err := r.Client.Update(ctx, b); err != nil {
				t.Fatal(err)
			}
			rc := &v1alpha1.RotationCampaign{}
			if err := r.Client.Get(ctx, types.NamespacedName{Namespace: "fleet", Name: "wave"}, rc); err != nil {
				t.Fatal(err)
			}
			rc.Spec.Step, rc.Spec.MaxConcurrent = v1alpha1.CampaignComplete, ptr.To(intstr.FromString("100%"))
			if err := r.Client.Update(ctx, rc); err != nil {
				t.Fatal(err)
			}
			rc.Status.StartTime = &metav1.Time{Time: t0.Add(-time.Hour)}
			if err := r.Client.Status().Update(ctx, rc); err != nil {
				t.Fatal(err)
			}

			if rc = reconcileWave(t, r); rc.Status.CompleteStepTime != nil {
				t.Fatalf("completeStepTime %s stored while b's start is pending", rc.Status.CompleteStepTime)
			}
			clk.Step(time.Minute)
			takenUp := t0.Add(tc.takenUp) // after the Complete step began
			prepared("b", takenUp)
			rc = reconcileWave(t, r)
			if !slices.Contains(patched, "b") {
				t.Fatalf("patched %v, want b completed: the campaign started its rotation", patched)
			}
			want := clk.Now()
			if takenUp.After(want) {
				want = takenUp
			}
			if rc.Status.CompleteStepTime == nil || !rc.Status.CompleteStepTime.Time.Equal(want.Truncate(time.Second)) {
				t.Errorf("completeStepTime %v, want the pass that found no start pending, or b's start when later (%s)", rc.Status.CompleteStepTime, want)
			}
		})
	}
}

// At the Complete step, a start requested on a Cluster whose credentials
// were never issued, which the Cluster controller defers until they are and
// which the campaign never made (it starts only Ready Clusters), neither
// holds up the Complete step's time nor a place: the Prepared Clusters are
// completed in the first pass.
func TestAStartThatCannotBeTakenUpDoesNotHoldUpTheCompleteStep(t *testing.T) {
	var patched []string
	r, _ := fixture(t, recordingPatches(&patched))
	ctx := context.Background()
	t0 := r.Clock.Now()
	for _, name := range []string{"a", "b", "c"} {
		c := &v1alpha1.Cluster{}
		if err := r.Client.Get(ctx, types.NamespacedName{Namespace: "fleet", Name: name}, c); err != nil {
			t.Fatal(err)
		}
		if name == "b" {
			c.Status.Credentials = nil // never issued
			metav1.SetMetaDataAnnotation(&c.ObjectMeta, v1alpha1.OperationAnnotation, v1alpha1.OperationStartCARotation)
		} else {
			c.Status.Credentials.Rotation = &v1alpha1.CredentialsRotation{CertificateAuthorities: &v1alpha1.CARotation{
				Phase: v1alpha1.RotationPrepared, LastInitiationTime: &metav1.Time{Time: t0.Add(-10 * time.Minute)}, OldCAUsage: &v1alpha1.OldCAUsage{}}}
		}
		if err := r.Client.Update(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	rc := &v1alpha1.RotationCampaign{}
	if err := r.Client.Get(ctx, types.NamespacedName{Namespace: "fleet", Name: "wave"}, rc); err != nil {
		t.Fatal(err)
	}
	rc.Spec.Step = v1alpha1.CampaignComplete
	if err := r.Client.Update(ctx, rc); err != nil {
		t.Fatal(err)
	}
	rc.Status.StartTime = &metav1.Time{Time: t0.Add(-time.Hour)}
	if err := r.Client.Status().Update(ctx, rc); err != nil {
		t.Fatal(err)
	}

	if rc = reconcileWave(t, r); rc.Status.CompleteStepTime == nil {
		t.Error("no completeStepTime stored: b's start, which cannot be taken up, holds up the Complete step")
	}
	if !slices.Contains(patched, "a") {
		t.Errorf("patched %v, want a completed in the first pass (one place, b's start must not hold it)", patched)
	}
}
