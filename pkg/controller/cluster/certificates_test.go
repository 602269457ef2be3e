package cluster

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
	"github.com/carousel-dev/carousel/pkg/credentials"
	"github.com/carousel-dev/carousel/pkg/pki"
	"github.com/carousel-dev/carousel/pkg/scheme"
)

// A certificate issued and stored is announced even when a later one's write
// fails: the next pass does not issue it again, and would not announce it.
func TestACertificateStoredIsAnnouncedWhenALaterWriteFails(t *testing.T) {
	ctx := context.Background()
	c := &v1alpha1.Cluster{ObjectMeta: metav1.ObjectMeta{Name: "events", Namespace: "default", UID: "events-uid"},
		Spec: v1alpha1.ClusterSpec{KubernetesVersion: "1.36.3"}}
	var stored []string
	api := fake.NewClientBuilder().WithScheme(scheme.New()).WithInterceptorFuncs(interceptor.Funcs{
		Create: func(ctx context.Context, cl client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			if obj.GetLabels()[v1alpha1.LabelCertificate] != "" {
				if len(stored) == 1 {
					return apierrors.NewConflict(corev1.Resource("secrets"), obj.GetName(), nil)
				}
				stored = append(stored, obj.GetLabels()[v1alpha1.LabelCertificate])
			}
			return cl.Create(ctx, obj, opts...)
		}}).Build()
	recorder := events.NewFakeRecorder(100)
	r := &Reconciler{Client: api, Clock: clock.RealClock{}, Recorder: recorder}
	objs := &objects{secrets: map[string]*corev1.Secret{}, configMaps: map[string]*corev1.ConfigMap{}}
	all, err := r.ensureCAs(ctx, c, objs)
	if err != nil {
		t.Fatal(err)
	}
	for len(recorder.Events) > 0 {
		<-recorder.Events // the CAs'
	}
	trust, err := r.ensureBundles(ctx, c, objs, all)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.ensureCertificates(ctx, c, objs, all, trust, false); !apierrors.IsConflict(err) {
		t.Fatalf("ensureCertificates = %v, want the second certificate's conflict", err)
	}
	var announced []string
	for len(recorder.Events) > 0 {
		announced = append(announced, <-recorder.Events)
	}
	if len(stored) != 1 || len(announced) != 1 || !strings.Contains(announced[0], v1alpha1.EventCertificateIssued+" ") ||
		!strings.HasSuffix(announced[0], "Issued "+stored[0]) {
		t.Errorf("stored %v, events %q; want one %s event naming the certificate stored", stored, announced, v1alpha1.EventCertificateIssued)
	}
}

// A leaf that ends with its CA (pki.Issue caps it there) is not renewed: a
// new one would not outlive it. Renewed all the same, it rolled its
// consumers at two thirds of each shorter lifetime, and in the CA's last
// minutes in every pass, a new key each time.
func TestALeafThatEndsWithItsCAIsNotRenewed(t *testing.T) {
	c := newCluster("prod")
	c.Spec.Certificates.CAValidity = &metav1.Duration{Duration: 24 * time.Hour}
	c.Spec.Certificates.LeafValidity = &metav1.Duration{Duration: 23 * time.Hour}
	api := newFakeAPI(c)
	r, _ := reconcilerOn(api)
	start := time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)
	clk := clocktesting.NewFakeClock(start)
	r.Clock = clk
	ctx, key := context.Background(), client.ObjectKeyFromObject(c)
	reconcile := func() {
		t.Helper()
		if _, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: key}); err != nil {
			t.Fatal(err)
		}
	}
	for range 3 {
		reconcile()
	}
	clk.SetTime(start.Add(16 * time.Hour)) // past two thirds of 23h: renewed, up to the CA's end
	reconcile()
	reconcile()
	secret := func(name string) *corev1.Secret { return getSecret(t, api, c.Namespace, name) }
	cas, err := credentials.DecodeCASecret(secret(credentials.CASecretName(c.Name, v1alpha1.CARoleCluster)))
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := pki.ParseCertificates(secret(credentials.CertificateSecretName(c.Name, credentials.CertKubeAPIServer)).Data[v1alpha1.DataKeyCertificate])
	if err != nil || !leaf[0].NotAfter.Equal(cas.Current.Cert.NotAfter) {
		t.Fatalf("kube-apiserver's certificate renewed at 16h: %v; want it to end with its CA, at %s", err, cas.Current.Cert.NotAfter)
	}
	for _, at := range []time.Time{start.Add(22 * time.Hour), start.Add(24*time.Hour - 2*time.Minute)} {
		clk.SetTime(at)
		keys, writes := pki.KeysGenerated(), api.writes.Load()
		reconcile()
		reconcile()
		if k, w := pki.KeysGenerated()-keys, api.writes.Load()-writes; k != 0 || w != 0 {
			t.Errorf("at %s, with every leaf ending with its CA: %d keys generated, %d writes; want none", at.Sub(start), k, w)
		}
	}
}

func TestSameDNSNames(t *testing.T) {
	for _, tc := range []struct {
		name      string
		got, want []string
		same      bool
	}{
		{"the same", []string{"a", "b"}, []string{"a", "b"}, true},
		{"another case", []string{"API.Example", "b"}, []string{"api.example", "b"}, true},
		{"a repeat in another case, issued before the catalogue left it out", []string{"a", "API.Example", "api.example"}, []string{"a", "API.Example"}, true},
		{"a name missing", []string{"a"}, []string{"a", "b"}, false},
		{"a name more", []string{"a", "b", "c"}, []string{"a", "b"}, false},
		{"another name", []string{"a", "c"}, []string{"a", "b"}, false},
		{"another order", []string{"b", "a"}, []string{"a", "b"}, false},
		{"none", nil, []string{}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := sameDNSNames(tc.got, tc.want); got != tc.same {
				t.Errorf("sameDNSNames(%q, %q) = %t, want %t", tc.got, tc.want, got, tc.same)
			}
		})
	}
}
