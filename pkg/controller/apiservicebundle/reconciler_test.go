package apiservicebundle

import (
	"crypto/x509"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
	"github.com/carousel-dev/carousel/pkg/clustercache"
	"github.com/carousel-dev/carousel/pkg/credentials"
	"github.com/carousel-dev/carousel/pkg/pki"
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
	if _, ok := connections.Client(key); ok {
		t.Error("the controller connected to the managed cluster")
	}
	if n := dialled.Load(); n != 0 {
		t.Errorf("the managed API server was dialled %d times", n)
	}
}
