package cluster

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
	"github.com/carousel-dev/carousel/pkg/pki"
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
// The API is an in-memory fake indexed as the manager's cache is, and read
// as it holds Secrets, so the figure is the operator's CPU cost, its fake
// reads included.
func BenchmarkReconcileUnchanged(b *testing.B) {
	c := &v1alpha1.Cluster{
		ObjectMeta: metav1.ObjectMeta{Name: "bench", Namespace: "default", UID: "bench-uid"},
		Spec:       v1alpha1.ClusterSpec{KubernetesVersion: "1.36.3"},
	}
	api := newFakeAPI(c)
	api.throughCache.Store(true)
	r := &Reconciler{Client: api, Clock: clock.RealClock{}, Recorder: events.NewFakeRecorder(1000), indexedByCluster: true}
	ctx, req := context.Background(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(c)}
	for range 3 { // the first pass issues everything, the next ones settle the status
		if _, err := r.Reconcile(ctx, req); err != nil {
			b.Fatal(err)
		}
	}
	keys, settled := pki.KeysGenerated(), api.writes.Load()
	for b.Loop() {
		if _, err := r.Reconcile(ctx, req); err != nil {
			b.Fatal(err)
		}
	}
	if generated, written := pki.KeysGenerated()-keys, api.writes.Load()-settled; generated != 0 || written != 0 {
		b.Fatalf("an unchanged Cluster's reconciles generated %d keys and made %d writes", generated, written)
	}
}
