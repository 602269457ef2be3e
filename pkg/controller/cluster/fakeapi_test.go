package cluster

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
	"github.com/carousel-dev/carousel/pkg/rotation"
	"github.com/carousel-dev/carousel/pkg/scheme"
)

// fakeAPI is an in-memory management cluster indexed as the manager's cache
// is, which counts the writes made to it. With throughCache set it reads
// Secrets and ConfigMaps as the manager's cache holds them (cacheSecret,
// cacheConfigMap), transformed twice as a watch-list sync does: it lists
// both so, and gets ConfigMaps so. apiServer reads them as they are.
type fakeAPI struct {
	client.WithWatch
	apiServer client.Reader
	writes    atomic.Int64
	// statusPatches counts the writes of the Clusters' status made.
	statusPatches atomic.Int64
	throughCache  atomic.Bool

	mu sync.Mutex
	// statusWriteErrors are the errors the next writes of a Cluster's status
	// fail with, one each.
	statusWriteErrors []error
	// uncached names the Secrets and ConfigMaps the cache has not seen yet:
	// lists of Secrets leave them out, gets of ConfigMaps do not find them.
	uncached map[string]bool
	// behind are Secrets as a cache behind the API server shows them: lists
	// give them instead of the API server's, by name.
	behind map[string]*corev1.Secret
	// behindConfigMaps are the same for ConfigMaps.
	behindConfigMaps map[string]*corev1.ConfigMap
	// staleCluster, when set, is what a Get of the Cluster reads (a cache
	// whose Clusters are behind its Secrets); the API server (apiServer)
	// has the Cluster as it is.
	staleCluster *v1alpha1.Cluster
	// listPanics has every list panic, as a bug in a pass would.
	listPanics bool
	// beforeCreate, if set, runs before each create, on the API server's
	// own client; the create fails with its error, if any.
	beforeCreate func(context.Context, client.WithWatch, client.Object) error
}

// failStatusWrites has the next writes of a Cluster's status fail with errs,
// one each.
func (api *fakeAPI) failStatusWrites(errs ...error) {
	api.mu.Lock()
	defer api.mu.Unlock()
	api.statusWriteErrors = append(api.statusWriteErrors, errs...)
}

func (api *fakeAPI) statusWriteError() error {
	api.mu.Lock()
	defer api.mu.Unlock()
	if len(api.statusWriteErrors) == 0 {
		return nil
	}
	err := api.statusWriteErrors[0]
	api.statusWriteErrors = api.statusWriteErrors[1:]
	return err
}

// conflict is the error of a write based on a Cluster that changed since it
// was read.
func conflict(c client.Object) error {
	return apierrors.NewConflict(v1alpha1.SchemeGroupVersion.WithResource("clusters").GroupResource(), c.GetName(), errors.New("changed since read"))
}

func newFakeAPI(c *v1alpha1.Cluster, objs ...client.Object) *fakeAPI {
	builder := fake.NewClientBuilder().WithScheme(scheme.New()).WithObjects(append(objs, c)...).WithStatusSubresource(c)
	for _, obj := range []client.Object{&corev1.Secret{}, &corev1.ConfigMap{}, &appsv1.Deployment{}, &appsv1.StatefulSet{}} {
		builder = builder.WithIndex(obj, clusterIndex, clusterLabel)
	}
	apiServer := builder.Build()
	api := &fakeAPI{apiServer: apiServer}
	count := func() { api.writes.Add(1) }
	// cached applies transform to obj twice, when the cache is read.
	cached := func(transform func(any) (any, error), obj any) error {
		if !api.throughCache.Load() {
			return nil
		}
		for range 2 {
			if _, err := transform(obj); err != nil {
				return err
			}
		}
		return nil
	}
	api.WithWatch = interceptor.NewClient(apiServer, interceptor.Funcs{
		Get: func(ctx context.Context, cl client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			api.mu.Lock()
			uncached := api.uncached[key.Name]
			api.mu.Unlock()
			if _, ok := obj.(*corev1.ConfigMap); ok && uncached {
				return apierrors.NewNotFound(corev1.Resource("configmaps"), key.Name)
			}
			api.mu.Lock()
			stale := api.staleCluster
			api.mu.Unlock()
			if c, ok := obj.(*v1alpha1.Cluster); ok && stale != nil {
				stale.DeepCopyInto(c)
				return nil
			}
			if err := cl.Get(ctx, key, obj, opts...); err != nil {
				return err
			}
			if cm, ok := obj.(*corev1.ConfigMap); ok {
				return cached(cacheConfigMap, cm)
			}
			return nil
		},
		List: func(ctx context.Context, cl client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			api.mu.Lock()
			panics := api.listPanics
			api.mu.Unlock()
			if panics {
				panic("a bug in the pass")
			}
			if err := cl.List(ctx, list, opts...); err != nil {
				return err
			}
			switch l := list.(type) {
			case *corev1.SecretList:
				api.mu.Lock()
				l.Items = slices.DeleteFunc(l.Items, func(s corev1.Secret) bool { return api.uncached[s.Name] })
				for i := range l.Items {
					if old := api.behind[l.Items[i].Name]; old != nil {
						l.Items[i] = *old.DeepCopy()
					}
				}
				api.mu.Unlock()
				for i := range l.Items {
					if err := cached(cacheSecret, &l.Items[i]); err != nil {
						return err
					}
				}
			case *corev1.ConfigMapList:
				api.mu.Lock()
				for i := range l.Items {
					if old := api.behindConfigMaps[l.Items[i].Name]; old != nil {
						l.Items[i] = *old.DeepCopy()
					}
				}
				api.mu.Unlock()
				for i := range l.Items {
					if err := cached(cacheConfigMap, &l.Items[i]); err != nil {
						return err
					}
				}
			}
			return nil
		},
		Create: func(ctx context.Context, cl client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			count()
			api.mu.Lock()
			hook := api.beforeCreate
			api.mu.Unlock()
			if hook != nil {
				if err := hook(ctx, cl, obj); err != nil {
					return err
				}
			}
			return cl.Create(ctx, obj, opts...)
		},
		Update: func(ctx context.Context, cl client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			count()
			return cl.Update(ctx, obj, opts...)
		},
		Patch: func(ctx context.Context, cl client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			count()
			return cl.Patch(ctx, obj, patch, opts...)
		},
		SubResourcePatch: func(ctx context.Context, cl client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
			count()
			_, isCluster := obj.(*v1alpha1.Cluster)
			if isCluster && sub == "status" {
				if err := api.statusWriteError(); err != nil {
					return err
				}
			}
			err := cl.SubResource(sub).Patch(ctx, obj, patch, opts...)
			if isCluster && sub == "status" && err == nil {
				api.statusPatches.Add(1)
			}
			return err
		},
	})
	return api
}

// settledCluster is a Cluster without an endpoint (so no check of a managed
// cluster is ever due) on a fakeAPI, reconciled by a Reconciler with the
// manager's default recommendation policy until its credentials are issued
// and its status settled.
type settledCluster struct {
	t   *testing.T
	api *fakeAPI
	r   *Reconciler
	key client.ObjectKey
}

func newSettledCluster(t *testing.T, objs ...client.Object) *settledCluster {
	t.Helper()
	c := newCluster("prod")
	api := newFakeAPI(c, objs...)
	r, _ := reconcilerOn(api)
	r.Recommendations = rotation.RecommendationPolicy{RotationInterval: 90 * 24 * time.Hour, PreparedWarning: 7 * 24 * time.Hour}
	sc := &settledCluster{t: t, api: api, key: client.ObjectKeyFromObject(c), r: r}
	for range 3 { // the first pass issues everything, the next ones settle the status
		sc.reconcile()
	}
	writes := api.writes.Load()
	if sc.reconcile(); api.writes.Load() != writes {
		t.Fatalf("the Cluster is not settled after three passes: the fourth made %d writes", api.writes.Load()-writes)
	}
	return sc
}

func (sc *settledCluster) reconcile() {
	sc.t.Helper()
	if _, err := sc.r.Reconcile(context.Background(), ctrl.Request{NamespacedName: sc.key}); err != nil {
		sc.t.Fatal(err)
	}
}

func (sc *settledCluster) cluster() *v1alpha1.Cluster {
	sc.t.Helper()
	c := &v1alpha1.Cluster{}
	if err := sc.api.Get(context.Background(), sc.key, c); err != nil {
		sc.t.Fatal(err)
	}
	return c
}

// rotationAfter reconciles passes times and returns the Cluster and its
// CARotationInProgress condition.
func (sc *settledCluster) rotationAfter(passes int) (*v1alpha1.Cluster, *metav1.Condition) {
	sc.t.Helper()
	for range passes {
		sc.reconcile()
	}
	c := sc.cluster()
	return c, meta.FindStatusCondition(c.Status.Conditions, v1alpha1.ConditionCARotation)
}

// setEndpoint sets the Cluster's spec.controlPlane.endpoint, as a user does.
func (sc *settledCluster) setEndpoint(endpoint string) {
	sc.t.Helper()
	c := sc.cluster()
	c.Spec.ControlPlane.Endpoint = endpoint
	if err := sc.api.Update(context.Background(), c); err != nil {
		sc.t.Fatal(err)
	}
}

// annotate sets the operation annotation, as a user does.
func (sc *settledCluster) annotate(operation string) {
	sc.t.Helper()
	c := sc.cluster()
	metav1.SetMetaDataAnnotation(&c.ObjectMeta, v1alpha1.OperationAnnotation, operation)
	if err := sc.api.Update(context.Background(), c); err != nil {
		sc.t.Fatal(err)
	}
}

// statusWritesUntil reconciles until the Cluster is in phase want and
// returns the status writes that took; it fails the test after ten passes.
func (sc *settledCluster) statusWritesUntil(want v1alpha1.CARotationPhase) (statusPatches int64) {
	sc.t.Helper()
	before := sc.api.statusPatches.Load()
	for range 10 {
		sc.reconcile()
		if sc.cluster().CARotationPhase() == want {
			return sc.api.statusPatches.Load() - before
		}
	}
	sc.t.Fatalf("phase %s after 10 passes, want %s", sc.cluster().CARotationPhase(), want)
	return 0
}

// getSecret reads a Secret through r, or fails the test.
func getSecret(t *testing.T, r client.Reader, namespace, name string) *corev1.Secret {
	t.Helper()
	s := &corev1.Secret{}
	if err := r.Get(context.Background(), client.ObjectKey{Namespace: namespace, Name: name}, s); err != nil {
		t.Fatal(err)
	}
	return s
}

// newCluster is a Cluster without an endpoint, so that no check of a managed
// cluster is ever due.
func newCluster(name string) *v1alpha1.Cluster {
	return &v1alpha1.Cluster{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "fleet", UID: types.UID(name + "-uid")},
		Spec: v1alpha1.ClusterSpec{KubernetesVersion: "1.36.3"}}
}

// reconcilerOn is a Reconciler on api that reads the API server through a
// readCounter.
func reconcilerOn(api *fakeAPI) (*Reconciler, *readCounter) {
	reads := &readCounter{Reader: api.apiServer}
	return &Reconciler{Client: api, APIReader: reads, Clock: clock.RealClock{}, Recorder: events.NewFakeRecorder(1000), indexedByCluster: true}, reads
}

// readCounter counts the Secrets read through it, whole or their metadata.
type readCounter struct {
	client.Reader
	secrets int
}

func (r *readCounter) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if m, ok := obj.(*metav1.PartialObjectMetadata); ok && m.Kind == "Secret" {
		r.secrets++
	}
	if _, ok := obj.(*corev1.Secret); ok {
		r.secrets++
	}
	return r.Reader.Get(ctx, key, obj, opts...)
}

// eventReasons takes the events recorded so far and counts them by reason.
func eventReasons(recorder *events.FakeRecorder) map[string]int {
	out := map[string]int{}
	for len(recorder.Events) > 0 {
		out[strings.Fields(<-recorder.Events)[1]]++
	}
	return out
}
