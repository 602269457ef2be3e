package apiservicebundle

import (
	"context"
	"crypto/x509"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	apiregistrationv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
	"github.com/carousel-dev/carousel/pkg/clustercache"
	"github.com/carousel-dev/carousel/pkg/credentials"
	"github.com/carousel-dev/carousel/pkg/pki"
	"github.com/carousel-dev/carousel/pkg/pki/pkitest"
	"github.com/carousel-dev/carousel/pkg/scheme"
)

// Only the kubelet-bootstrap controller connects to a managed cluster: a
// connection this controller made could outlive the Disconnect of a Cluster
// handed to another shard, or deleted, with the CSR approval it starts. So
// a Cluster whose credentials are issued, whose API server listens, but
// that is not connected yet, is looked at again soon, and nothing reaches
// its API server.
func TestAClusterNotConnectedYetIsLookedAtAgainWithoutConnecting(t *testing.T) {
	var dialled atomic.Int32
	server := httptest.NewUnstartedServer(http.NotFoundHandler())
	server.Config.ConnState = func(_ net.Conn, state http.ConnState) {
		if state == http.StateNew {
			dialled.Add(1)
		}
	}
	server.StartTLS()
	t.Cleanup(server.Close)

	now := time.Now()
	caKey, err := pki.GenerateKey(pki.ECDSAP256)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := pki.NewCA(pki.CATemplate{CommonName: "cluster", Validity: time.Hour}, caKey, now)
	if err != nil {
		t.Fatal(err)
	}
	operator, err := ca.IssueKeyPair(pki.LeafTemplate{CommonName: "carousel:operator", Usages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		Validity: time.Hour}, pki.ECDSAP256, now)
	if err != nil {
		t.Fatal(err)
	}
	operatorKey, err := operator.KeyPEM()
	if err != nil {
		t.Fatal(err)
	}
	c := &v1alpha1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: "fleet", Name: "a"},
		Spec: v1alpha1.ClusterSpec{ControlPlane: v1alpha1.ControlPlaneSpec{Endpoint: server.URL}}}
	bundle := func(role v1alpha1.CARole) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: c.Namespace, Name: credentials.BundleConfigMapName(c.Name, role)},
			Data: map[string]string{v1alpha1.DataKeyCABundle: string(ca.CertPEM())}}
	}
	management := fake.NewClientBuilder().WithScheme(scheme.New()).WithObjects(c, bundle(v1alpha1.CARoleCluster), bundle(v1alpha1.CARoleMetricsServer),
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: c.Namespace, Name: credentials.CertificateSecretName(c.Name, credentials.CertOperator)},
			Data: map[string][]byte{v1alpha1.DataKeyCertificate: operator.CertPEM(), v1alpha1.DataKeyPrivateKey: operatorKey}}).Build()
	connections := &clustercache.Cache{Management: management, Scheme: scheme.New()}
	key := client.ObjectKeyFromObject(c)
	t.Cleanup(func() { connections.Disconnect(key) })
	r := &Reconciler{Client: management, Connections: connections, Resync: time.Minute}

	got, err := r.Reconcile(t.Context(), ctrl.Request{NamespacedName: key})
	if err != nil {
		t.Fatal(err)
	}
	if got.RequeueAfter != 6*time.Second {
		t.Errorf("looks again after %s, want a tenth of the resync (6s)", got.RequeueAfter)
	}
	if _, ok := connections.Connection(key); ok {
		t.Error("the controller connected to the managed cluster")
	}
	if n := dialled.Load(); n != 0 {
		t.Errorf("the managed API server was dialled %d times", n)
	}
}

// An APIService whose caBundle cannot be written holds up none of the
// others, and a local one (served by the API server itself, which refuses
// it a caBundle) is left alone.
func TestAnAPIServiceThatCannotBeWrittenHoldsUpNoOther(t *testing.T) {
	c := &v1alpha1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: "fleet", Name: "a"},
		Spec: v1alpha1.ClusterSpec{ControlPlane: v1alpha1.ControlPlaneSpec{Endpoint: "https://192.0.2.1:6443"}}}
	newBundle := pkitest.NewCA(t, "metrics-server-ca-1").CertPEM()
	bundle := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: c.Namespace, Name: credentials.BundleConfigMapName(c.Name, v1alpha1.CARoleMetricsServer)},
		Data: map[string]string{v1alpha1.DataKeyCABundle: string(newBundle)}}
	management := fake.NewClientBuilder().WithScheme(scheme.New()).WithObjects(c, bundle).Build()
	labelled := map[string]string{v1alpha1.LabelCABundle: string(v1alpha1.CARoleMetricsServer)}
	aggregated := func(name string) *apiregistrationv1.APIService {
		return &apiregistrationv1.APIService{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labelled},
			Spec: apiregistrationv1.APIServiceSpec{CABundle: []byte("old bundle"), Service: &apiregistrationv1.ServiceReference{Namespace: "kube-system", Name: "metrics-server"}}}
	}
	local := &apiregistrationv1.APIService{ObjectMeta: metav1.ObjectMeta{Name: "v1.apps", Labels: labelled}}
	var patched []string
	managed := fake.NewClientBuilder().WithScheme(scheme.New()).WithObjects(aggregated("v1alpha1.refused.example.com"), aggregated("v1beta1.metrics.k8s.io"), local).
		WithInterceptorFuncs(interceptor.Funcs{Patch: func(ctx context.Context, cl client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			patched = append(patched, obj.GetName())
			switch obj.GetName() {
			case "v1beta1.metrics.k8s.io":
				return cl.Patch(ctx, obj, patch, opts...)
			case "v1.gone.example.com": // deleted since it was listed
				return apierrors.NewNotFound(apiregistrationv1.Resource("apiservices"), obj.GetName())
			case "v1.down.example.com": // not refused: the API server failed to serve it
				return apierrors.NewServiceUnavailable("the API server is restarting")
			}
			return apierrors.NewForbidden(apiregistrationv1.Resource("apiservices"), obj.GetName(), errors.New("a webhook refuses it"))
		}}).Build()
	for _, name := range []string{"v1.gone.example.com", "v1.down.example.com"} {
		if err := managed.Create(t.Context(), aggregated(name)); err != nil {
			t.Fatal(err)
		}
	}
	recorder := events.NewFakeRecorder(10)
	r := &Reconciler{Client: management, Connections: connectedTo{managed}, Resync: time.Minute, Recorder: recorder}

	got, err := r.Reconcile(t.Context(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(c)})
	if err != nil || got.RequeueAfter != 6*time.Second {
		t.Errorf("Reconcile = %+v, %v; want it to look again after a tenth of the resync (6s)", got, err)
	}
	metrics := &apiregistrationv1.APIService{}
	if err := managed.Get(t.Context(), client.ObjectKey{Name: "v1beta1.metrics.k8s.io"}, metrics); err != nil {
		t.Fatal(err)
	}
	if string(metrics.Spec.CABundle) != string(newBundle) {
		t.Errorf("the APIService listed after the refused one has caBundle %q, want the new bundle", metrics.Spec.CABundle)
	}
	if slices.Contains(patched, local.Name) {
		t.Errorf("the local APIService was patched (%v)", patched)
	}
	// An event for the write and one for the refusal: the deleted APIService
	// was not updated, and the one the API server failed to serve was not
	// refused.
	close(recorder.Events)
	var recorded []string
	for e := range recorder.Events {
		recorded = append(recorded, e)
	}
	if len(recorded) != 2 ||
		!strings.HasPrefix(recorded[0], "Warning "+v1alpha1.EventAPIServiceCABundleNotWritten) ||
		!strings.Contains(recorded[0], "for APIService v1alpha1.refused.example.com, which a CA rotation waits for") ||
		!strings.Contains(recorded[0], "a webhook refuses it") ||
		!strings.Contains(recorded[1], "APIService v1beta1.metrics.k8s.io of the managed cluster now trusts") {
		t.Errorf("events %q, want a warning that names the refused APIService and the answer, then the write of v1beta1.metrics.k8s.io", recorded)
	}
}

// A bundle ConfigMap that does not hold CA certificates alone (a namespace
// writer changed it, before the Cluster controller writes it back) is given
// to no APIService: the aggregator could no longer verify metrics-server.
func TestABundleOfAnythingButCACertificatesIsGivenToNoAPIService(t *testing.T) {
	now := time.Now()
	ca := pkitest.NewCA(t, "metrics-server-ca-1")
	leaf, err := ca.IssueKeyPair(pki.LeafTemplate{CommonName: "metrics-server", Usages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		Validity: time.Hour}, pki.ECDSAP256, now)
	if err != nil {
		t.Fatal(err)
	}
	key, err := leaf.KeyPEM()
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct{ name, bundle, wantErr string }{
		{"none", "", "no certificate"},
		{"not PEM", "not PEM", "no certificate"},
		{"a private key", string(ca.CertPEM()) + string(key), "unexpected PEM block"},
		{"a leaf certificate", string(ca.CertPEM()) + string(leaf.CertPEM()), `"metrics-server" is not a CA certificate`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := &v1alpha1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: "fleet", Name: "a"},
				Spec: v1alpha1.ClusterSpec{ControlPlane: v1alpha1.ControlPlaneSpec{Endpoint: "https://192.0.2.1:6443"}}}
			bundle := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: c.Namespace, Name: credentials.BundleConfigMapName(c.Name, v1alpha1.CARoleMetricsServer)},
				Data: map[string]string{v1alpha1.DataKeyCABundle: tt.bundle}}
			var patched int
			managed := fake.NewClientBuilder().WithScheme(scheme.New()).WithObjects(&apiregistrationv1.APIService{
				ObjectMeta: metav1.ObjectMeta{Name: "v1beta1.metrics.k8s.io", Labels: map[string]string{v1alpha1.LabelCABundle: string(v1alpha1.CARoleMetricsServer)}},
				Spec:       apiregistrationv1.APIServiceSpec{Service: &apiregistrationv1.ServiceReference{Namespace: "kube-system", Name: "metrics-server"}}}).
				WithInterceptorFuncs(interceptor.Funcs{Patch: func(ctx context.Context, cl client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
					patched++
					return cl.Patch(ctx, obj, patch, opts...)
				}}).Build()
			r := &Reconciler{Client: fake.NewClientBuilder().WithScheme(scheme.New()).WithObjects(c, bundle).Build(), Connections: connectedTo{managed}, Resync: time.Minute}
			_, err := r.Reconcile(t.Context(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(c)})
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) || patched != 0 {
				t.Errorf("Reconcile = %v after %d patches; want an error saying %q and none", err, patched, tt.wantErr)
			}
		})
	}
}

// connectedTo is a managed cluster the Cluster is connected to.
type connectedTo struct{ managed client.Client }

func (c connectedTo) Client(*v1alpha1.Cluster) (client.Client, bool) { return c.managed, true }
