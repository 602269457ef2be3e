package cluster

import (
	"context"
	"errors"
	"maps"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
	"github.com/carousel-dev/carousel/pkg/credentials"
	"github.com/carousel-dev/carousel/pkg/scheme"
)

// TestWriteSecretLeavesTheReadSecretAsItWas: loadObjects hands out the
// cache's own Secrets, so a write that keeps a Secret's data (here, one that
// only gives it back its owner) must not decode the API server's answer into
// the data map it read. The interceptor plays a server whose answer adds a
// key, as a mutating webhook may.
func TestWriteSecretLeavesTheReadSecretAsItWas(t *testing.T) {
	c := &v1alpha1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: "fleet", Name: "prod", UID: "prod-uid"}}
	read := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: "fleet", Name: "prod-service-account-key", Labels: map[string]string{v1alpha1.LabelCluster: "prod"}},
		Data:       map[string][]byte{"key.pem": []byte("key")},
	}
	cached := read.DeepCopy()
	r := &Reconciler{Client: fake.NewClientBuilder().WithScheme(scheme.New()).WithObjects(read.DeepCopy()).WithInterceptorFuncs(interceptor.Funcs{
		Update: func(ctx context.Context, cl client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			if err := cl.Update(ctx, obj, opts...); err != nil {
				return err
			}
			obj.(*corev1.Secret).Data["added-by-the-server"] = []byte("answer")
			return nil
		},
	}).Build()}
	objs := &objects{secrets: map[string]*corev1.Secret{read.Name: read}}

	if err := r.writeSecret(context.Background(), c, objs, desiredSecret{name: read.Name, labels: read.Labels, data: read.Data}); err != nil {
		t.Fatal(err)
	}
	if !ownedBy(objs.secrets[read.Name], c) {
		t.Errorf("the written Secret is not owned by the Cluster: %v", objs.secrets[read.Name].OwnerReferences)
	}
	if !equality.Semantic.DeepEqual(read, cached) {
		t.Errorf("writing changed the Secret that was read:\n got %+v\nwant %+v", read, cached)
	}
}

// An object that the cache cannot see (it lacks the carousel.dev/cluster
// label) holds the name of one Carousel writes for the Cluster: the pass stops
// with a reason a person can act on, announced once, instead of being retried
// each second as a pass on a cache behind the API server is, and leaves the
// object as it is. Once it is relabelled, or moved out of the way, the next
// pass issues everything.
func TestAnObjectTheCacheCannotSeeBlocksTheCluster(t *testing.T) {
	c := newCluster("taken")
	owner := metav1.OwnerReference{APIVersion: v1alpha1.SchemeGroupVersion.String(), Kind: "Cluster", Name: c.Name, UID: c.UID,
		Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}
	relabel := func(ctx context.Context, api *fakeAPI, obj client.Object) error {
		obj.SetLabels(map[string]string{v1alpha1.LabelCluster: c.Name})
		return api.Update(ctx, obj)
	}
	remove := func(ctx context.Context, api *fakeAPI, obj client.Object) error { return api.Delete(ctx, obj) }
	for _, tc := range []struct {
		name   string
		obj    client.Object
		reason string
		want   string
		clear  func(context.Context, *fakeAPI, client.Object) error
	}{
		{
			name: "a Secret Carousel wrote, unlabelled",
			obj: &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: c.Namespace, Name: credentials.CertificateSecretName(c.Name, credentials.CertOperator),
				OwnerReferences: []metav1.OwnerReference{owner}}, Data: map[string][]byte{"note": []byte("by hand")}},
			reason: v1alpha1.ReasonObjectUnlabelled,
			want:   "put it back: kubectl label --overwrite secret -n fleet " + credentials.CertificateSecretName(c.Name, credentials.CertOperator) + " carousel.dev/cluster=taken",
			clear:  relabel,
		},
		{
			name: "another Cluster's Secret",
			obj: &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: c.Namespace, Name: credentials.CertificateSecretName(c.Name, credentials.CertKubeControllerManager),
				Labels: map[string]string{v1alpha1.LabelCluster: "taken-too"}}, Data: map[string][]byte{"note": []byte("theirs")}},
			reason: v1alpha1.ReasonNameTaken,
			want:   "belongs to Cluster taken-too (label carousel.dev/cluster=taken-too): the names of the two Clusters' objects collide",
			clear:  remove,
		},
		{
			name: "someone else's ConfigMap",
			obj: &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: c.Namespace, Name: credentials.BundleConfigMapName(c.Name, v1alpha1.CARoleCluster),
				Labels: map[string]string{"app": "theirs"}}, Data: map[string]string{"note": "theirs"}},
			reason: v1alpha1.ReasonNameTaken,
			want:   "configmap " + credentials.BundleConfigMapName(c.Name, v1alpha1.CARoleCluster) + " is in the way",
			clear:  remove,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			api := newFakeAPI(c.DeepCopy(), tc.obj.DeepCopyObject().(client.Object))
			r, _ := reconcilerOn(api)
			recorder := events.NewFakeRecorder(100)
			r.Recorder = recorder
			key := client.ObjectKeyFromObject(c)
			var firstPassWrites int64
			for pass := range 3 {
				if _, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: key}); err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("pass %d: %v, want %q", pass, err, tc.want)
				}
				if pass == 0 {
					firstPassWrites = api.statusPatches.Load()
				}
			}
			if n := api.statusPatches.Load() - firstPassWrites; n != 0 {
				t.Errorf("the passes after the first wrote the status %d times, want 0", n)
			}
			got := &v1alpha1.Cluster{}
			if err := api.Get(ctx, key, got); err != nil {
				t.Fatal(err)
			}
			if ready := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionReady); ready == nil ||
				ready.Status != metav1.ConditionFalse || ready.Reason != tc.reason {
				t.Errorf("Ready is %+v, want False %s", ready, tc.reason)
			}
			if n := eventReasons(recorder)[tc.reason]; n != 1 {
				t.Errorf("%d %s events, want 1", n, tc.reason)
			}
			there := tc.obj.DeepCopyObject().(client.Object)
			if err := api.Get(ctx, client.ObjectKeyFromObject(tc.obj), there); err != nil {
				t.Fatal(err)
			}
			there.SetResourceVersion(tc.obj.GetResourceVersion())
			if !equality.Semantic.DeepEqual(there, tc.obj) {
				t.Errorf("the object in the way was changed: %+v", there)
			}

			if err := tc.clear(ctx, api, there); err != nil {
				t.Fatal(err)
			}
			expectAPassIssuesEverything(t, r, api, key)
		})
	}
}

// An object on its way out (deleted, a finalizer holding it) that holds the
// name of one Carousel writes is waited for with the controller's backoff
// (the pass ends in an error that names its finalizers), and is not
// reported as one a person must move.
func TestAnObjectOnItsWayOutIsWaitedFor(t *testing.T) {
	ctx := context.Background()
	c := newCluster("waits")
	going := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: c.Namespace, Name: credentials.BundleConfigMapName(c.Name, v1alpha1.CARoleEtcd),
		Finalizers: []string{"example.com/hold"}}}
	api := newFakeAPI(c.DeepCopy(), going.DeepCopy())
	if err := api.Delete(ctx, going); err != nil {
		t.Fatal(err)
	}
	r, _ := reconcilerOn(api)
	key := client.ObjectKeyFromObject(c)
	if _, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: key}); err == nil || !strings.Contains(err.Error(), "is being deleted (finalizers [example.com/hold])") {
		t.Fatalf("%v; want the pass to wait for the object's deletion", err)
	}
	got := &v1alpha1.Cluster{}
	if err := api.Get(ctx, key, got); err != nil {
		t.Fatal(err)
	}
	if ready := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionReady); ready == nil || ready.Reason != v1alpha1.ReasonReconcileFailed {
		t.Errorf("Ready is %+v while the object goes, want False %s", ready, v1alpha1.ReasonReconcileFailed)
	}

	if err := api.Get(ctx, client.ObjectKeyFromObject(going), going); err != nil {
		t.Fatal(err)
	}
	going.Finalizers = nil
	if err := api.Update(ctx, going); err != nil {
		t.Fatal(err)
	}
	expectAPassIssuesEverything(t, r, api, key)
}

// expectAPassIssuesEverything runs a pass of the Cluster key and fails t
// unless it leaves Ready True.
func expectAPassIssuesEverything(t *testing.T, r *Reconciler, api *fakeAPI, key client.ObjectKey) {
	t.Helper()
	if _, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: key}); err != nil {
		t.Fatal(err)
	}
	got := &v1alpha1.Cluster{}
	if err := api.Get(context.Background(), key, got); err != nil {
		t.Fatal(err)
	}
	if !meta.IsStatusConditionTrue(got.Status.Conditions, v1alpha1.ConditionReady) {
		t.Errorf("Ready is %+v after the pass, want True", meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionReady))
	}
}

func TestNameHolder(t *testing.T) {
	c := newCluster("prod")
	controller := func(kind, name string, uid types.UID) []metav1.OwnerReference {
		return []metav1.OwnerReference{{APIVersion: "v1", Kind: kind, Name: name, UID: uid, Controller: ptr.To(true)}}
	}
	deleting := ptr.To(metav1.Now())
	for _, tc := range []struct {
		name   string
		meta   metav1.ObjectMeta
		stale  bool   // errStaleCache: retried in a second
		reason string // the blocked reason; "" for neither stale nor blocked
		want   string // in the message
	}{
		{name: "the Cluster's own", meta: metav1.ObjectMeta{Labels: map[string]string{v1alpha1.LabelCluster: "prod"}}, stale: true},
		{name: "the Cluster's own, being deleted", stale: true,
			meta: metav1.ObjectMeta{Labels: map[string]string{v1alpha1.LabelCluster: "prod"}, DeletionTimestamp: deleting, Finalizers: []string{"x"}}},
		{name: "unlabelled, being deleted", meta: metav1.ObjectMeta{DeletionTimestamp: deleting, Finalizers: []string{"example.com/hold"}},
			want: "is being deleted (finalizers [example.com/hold])"},
		{name: "another Cluster's", meta: metav1.ObjectMeta{Labels: map[string]string{v1alpha1.LabelCluster: "prod-ca"}},
			reason: v1alpha1.ReasonNameTaken, want: "belongs to Cluster prod-ca"},
		{name: "another Cluster's, controlled by this one", reason: v1alpha1.ReasonNameTaken, want: "belongs to Cluster prod-ca",
			meta: metav1.ObjectMeta{Labels: map[string]string{v1alpha1.LabelCluster: "prod-ca"}, OwnerReferences: controller("Cluster", "prod", c.UID)}},
		{name: "another owner's", meta: metav1.ObjectMeta{OwnerReferences: controller("Deployment", "web", "web-uid")},
			reason: v1alpha1.ReasonNameTaken, want: "is controlled by Deployment web"},
		{name: "a Cluster of the same name's, deleted since", meta: metav1.ObjectMeta{OwnerReferences: controller("Cluster", "prod", "earlier-uid")},
			reason: v1alpha1.ReasonNameTaken, want: "is controlled by Cluster prod"},
		{name: "the Cluster's, unlabelled", meta: metav1.ObjectMeta{OwnerReferences: controller("Cluster", "prod", c.UID)},
			reason: v1alpha1.ReasonObjectUnlabelled, want: "kubectl label --overwrite secret -n fleet prod-admin carousel.dev/cluster=prod"},
		{name: "no label, no controller", meta: metav1.ObjectMeta{Labels: map[string]string{"app": "theirs"}},
			reason: v1alpha1.ReasonNameTaken, want: "has no controller"},
		{name: "owned by the Cluster, not as its controller", reason: v1alpha1.ReasonNameTaken, want: "has no controller",
			meta: metav1.ObjectMeta{OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Cluster", Name: "prod", UID: c.UID}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			found := &metav1.PartialObjectMetadata{ObjectMeta: tc.meta}
			found.Namespace, found.Name = c.Namespace, "prod-admin"
			err := nameHolder("secret", found, c)
			var b *blockedError
			switch {
			case err == nil:
				t.Fatal("no verdict")
			case errors.Is(err, errStaleCache) != tc.stale:
				t.Errorf("%v: stale %t, want %t", err, !tc.stale, tc.stale)
			case errors.As(err, &b) != (tc.reason != "") || b != nil && b.reason != tc.reason:
				t.Errorf("%v: want the reason %q", err, tc.reason)
			case !strings.Contains(err.Error(), tc.want):
				t.Errorf("%v: want %q in it", err, tc.want)
			}
			if nameTaken(err) != (tc.reason != "") {
				t.Errorf("nameTaken is %t for %v", nameTaken(err), err)
			}
		})
	}
}

// FuzzNameHolder checks nameHolder's verdict on any holder: the cache is
// behind exactly when the holder carries the Cluster's label; otherwise one
// on its way out is waited for, and any other stops the Cluster, as
// ObjectUnlabelled only when the Cluster controls it and no other Cluster's
// label claims it.
func FuzzNameHolder(f *testing.F) {
	f.Add("prod", false, "Cluster", true, true)
	f.Add("", true, "", false, false)
	f.Add("prod-ca", false, "Cluster", true, true)
	f.Add("", false, "Deployment", true, false)
	f.Add("", false, "Cluster", false, true)
	c := newCluster("prod")
	f.Fuzz(func(t *testing.T, label string, deleting bool, ownerKind string, controller, sameUID bool) {
		found := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Namespace: c.Namespace, Name: "prod-admin"}}
		if label != "" {
			found.Labels = map[string]string{v1alpha1.LabelCluster: label}
		}
		if deleting {
			found.DeletionTimestamp = ptr.To(metav1.Now())
		}
		uid := types.UID("another-uid")
		if sameUID {
			uid = c.UID
		}
		if ownerKind != "" {
			found.OwnerReferences = []metav1.OwnerReference{{Kind: ownerKind, Name: "owner", UID: uid, Controller: ptr.To(controller)}}
		}
		err := nameHolder("secret", found, c)
		var b *blockedError
		blockedBy := errors.As(err, &b)
		switch {
		case err == nil:
			t.Fatal("no verdict")
		case errors.Is(err, errStaleCache) != (label == c.Name):
			t.Fatalf("%v: stale, with the label %q", err, label)
		case blockedBy != (label != c.Name && !deleting):
			t.Fatalf("%v: blocked %t, label %q, being deleted %t", err, blockedBy, label, deleting)
		case blockedBy && b.reason == v1alpha1.ReasonObjectUnlabelled && (!controller || !sameUID || label != ""):
			t.Fatalf("%v: ObjectUnlabelled for a holder the Cluster does not control, or another Cluster's label claims", err)
		case blockedBy != nameTaken(err):
			t.Fatalf("%v: nameTaken %t", err, nameTaken(err))
		}
	})
}

// operatorSecretBehind is what a cache behind the API server shows of the
// settled Cluster's operator certificate Secret (fakeAPI.behind): an older
// version, with a trust bundle a pass then writes over, on a resourceVersion
// the API server does not hold, so that every write of it conflicts.
func operatorSecretBehind(t *testing.T, sc *settledCluster) map[string]*corev1.Secret {
	t.Helper()
	key := client.ObjectKey{Namespace: sc.key.Namespace, Name: credentials.CertificateSecretName(sc.key.Name, credentials.CertOperator)}
	live := &corev1.Secret{}
	if err := sc.api.Get(context.Background(), key, live); err != nil {
		t.Fatal(err)
	}
	behind := live.DeepCopy()
	behind.ResourceVersion = live.ResourceVersion + "0"
	behind.Data = maps.Clone(live.Data)
	behind.Data[v1alpha1.DataKeyCABundle] = []byte("a bundle from before")
	return map[string]*corev1.Secret{key.Name: behind}
}

// A write that conflicts (the cache showed a Secret, or a consumer's
// Deployment, one version behind the API server: routine while a rotation
// rolls them) is a stale read, not a failure: the pass is retried in a
// second, and Ready stays as it was, with no status write. It used to turn
// Ready False (ReconcileFailed, "the object has been modified") until the
// next pass turned it back: two status writes, and a campaign counting the
// Cluster failed meanwhile.
func TestAConflictingWriteLeavesReadyAsItWas(t *testing.T) {
	ctx := context.Background()
	sc := newSettledCluster(t)
	sc.api.behind = operatorSecretBehind(t, sc)
	statusPatches := sc.api.statusPatches.Load()

	result, err := sc.r.Reconcile(ctx, ctrl.Request{NamespacedName: sc.key})
	if err != nil || result.RequeueAfter != time.Second {
		t.Fatalf("the pass whose write conflicted ended with %v, %+v; want it retried in a second", err, result)
	}
	if ready := meta.FindStatusCondition(sc.cluster().Status.Conditions, v1alpha1.ConditionReady); ready == nil || ready.Status != metav1.ConditionTrue {
		t.Errorf("after a conflicting write, Ready is %+v, want it True as it was", ready)
	}
	if n := sc.api.statusPatches.Load() - statusPatches; n != 0 {
		t.Errorf("%d status writes for a pass that read a cache behind", n)
	}
}

// A cache that never catches up is retried every second for StaleReadLimit,
// Ready as it was, and from then on reported: Ready False, and an error that
// hands the retries to the controller's backoff. A pass that gets through
// starts the count again.
func TestACacheBehindForOverAMinuteIsReported(t *testing.T) {
	ctx := context.Background()
	sc := newSettledCluster(t)
	clock := clocktesting.NewFakePassiveClock(time.Now())
	sc.r.Clock = clock
	behind := operatorSecretBehind(t, sc)

	pass := func(after time.Duration) (ctrl.Result, *metav1.Condition, error) {
		t.Helper()
		clock.SetTime(clock.Now().Add(after))
		result, err := sc.r.Reconcile(ctx, ctrl.Request{NamespacedName: sc.key})
		return result, meta.FindStatusCondition(sc.cluster().Status.Conditions, v1alpha1.ConditionReady), err
	}
	sc.api.behind = behind
	for _, after := range []time.Duration{0, 30 * time.Second, StaleReadLimit - 30*time.Second - time.Millisecond} {
		if result, ready, err := pass(after); err != nil || result.RequeueAfter != time.Second || ready.Status != metav1.ConditionTrue {
			t.Fatalf("a stale pass within %s ended with %v, %+v, Ready %s; want it retried in a second, Ready True", StaleReadLimit, err, result, ready.Status)
		}
	}
	result, ready, err := pass(time.Millisecond)
	if err == nil || result.RequeueAfter != 0 {
		t.Errorf("a pass %s after the first stale one ended with %v, %+v; want an error, for the controller's backoff", StaleReadLimit, err, result)
	}
	if ready.Status != metav1.ConditionFalse || ready.Reason != v1alpha1.ReasonReconcileFailed || !strings.Contains(ready.Message, "behind the API server for over 1m0s") {
		t.Errorf("a cache behind for %s leaves Ready %s %s %q; want False ReconcileFailed, saying so", StaleReadLimit, ready.Status, ready.Reason, ready.Message)
	}
	if _, _, err := pass(time.Second); err == nil {
		t.Error("the next stale pass is retried in a second again; want the error kept until a pass gets through")
	}

	sc.api.behind = nil
	if _, ready, err := pass(time.Second); err != nil || ready.Status != metav1.ConditionTrue {
		t.Fatalf("once the cache caught up the pass ended with %v, Ready %s; want no error, Ready True", err, ready.Status)
	}
	sc.api.behind = behind
	if result, _, err := pass(time.Second); err != nil || result.RequeueAfter != time.Second {
		t.Errorf("a stale pass after one that got through ended with %v, %+v; want the count started again: retried in a second", err, result)
	}
}
