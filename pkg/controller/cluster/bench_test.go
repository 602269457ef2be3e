package cluster

import (
	"context"
	"sync/atomic"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
	"github.com/carousel-dev/carousel/pkg/pki"
	"github.com/carousel-dev/carousel/pkg/scheme"
)

// BenchmarkIssueClusterCredentials measures issuing every credential of a
// new Cluster (seven CAs, their bundles, every leaf certificate and
// kubeconfig, the service-account key) through the reconciler's own steps.
// The API is an in-memory fake, so the figure is the operator's CPU cost.
func BenchmarkIssueClusterCredentials(b *testing.B) {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		b.Fatal(err)
	}
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		b.Fatal(err)
	}
	for _, alg := range []v1alpha1.KeyAlgorithm{v1alpha1.KeyAlgorithmECDSAP256, v1alpha1.KeyAlgorithmRSA3072} {
		b.Run(string(alg), func(b *testing.B) {
			c := &v1alpha1.Cluster{
				ObjectMeta: metav1.ObjectMeta{Name: "bench", Namespace: "default", UID: "bench-uid"},
				Spec:       v1alpha1.ClusterSpec{KubernetesVersion: "1.36.3", Certificates: v1alpha1.CertificateSettings{KeyAlgorithm: alg}},
			}
			ctx := context.Background()
			for b.Loop() {
				r := &Reconciler{Client: fake.NewClientBuilder().WithScheme(scheme).Build(), Clock: clock.RealClock{}}
				objs := &objects{secrets: map[string]*corev1.Secret{}, configMaps: map[string]*corev1.ConfigMap{}}
				cas, err := r.ensureCAs(ctx, c, objs)
				if err != nil {
					b.Fatal(err)
				}
				if err := r.ensureServiceAccountKey(ctx, c, objs); err != nil {
					b.Fatal(err)
				}
				trust, err := r.ensureBundles(ctx, c, objs, cas)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := r.ensureCertificates(ctx, c, objs, cas, trust, true); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkReconcileUnchanged measures a reconcile of a Cluster whose
// credentials are all in place: the pass that writes nothing, which every
// Cluster of a fleet makes after its own writes' events and at each resync.
// The API is an in-memory fake indexed as the manager's cache is, so the
// figure is the operator's CPU cost, its fake reads included.
func BenchmarkReconcileUnchanged(b *testing.B) {
	c := &v1alpha1.Cluster{
		ObjectMeta: metav1.ObjectMeta{Name: "bench", Namespace: "default", UID: "bench-uid"},
		Spec:       v1alpha1.ClusterSpec{KubernetesVersion: "1.36.3"},
	}
	var writes atomic.Int64
	count := func() { writes.Add(1) }
	builder := fake.NewClientBuilder().WithScheme(scheme.New()).WithObjects(c).WithStatusSubresource(c).WithInterceptorFuncs(interceptor.Funcs{
		Create: func(ctx context.Context, cl client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			count()
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
			return cl.SubResource(sub).Patch(ctx, obj, patch, opts...)
		},
	})
	for _, obj := range []client.Object{&corev1.Secret{}, &corev1.ConfigMap{}, &appsv1.Deployment{}, &appsv1.StatefulSet{}} {
		builder = builder.WithIndex(obj, clusterIndex, clusterLabel)
	}
	r := &Reconciler{Client: builder.Build(), Clock: clock.RealClock{}, Recorder: events.NewFakeRecorder(1000), indexedByCluster: true}
	ctx, req := context.Background(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(c)}
	for range 3 { // the first pass issues everything, the next ones settle the status
		if _, err := r.Reconcile(ctx, req); err != nil {
			b.Fatal(err)
		}
	}
	keys, settled := pki.KeysGenerated(), writes.Load()
	for b.Loop() {
		if _, err := r.Reconcile(ctx, req); err != nil {
			b.Fatal(err)
		}
	}
	if generated, written := pki.KeysGenerated()-keys, writes.Load()-settled; generated != 0 || written != 0 {
		b.Fatalf("an unchanged Cluster's reconciles generated %d keys and made %d writes", generated, written)
	}
}
