package plugin

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
	outputv1alpha1 "github.com/carousel-dev/carousel/apis/output/v1alpha1"
	"github.com/carousel-dev/carousel/pkg/credentials"
	"github.com/carousel-dev/carousel/pkg/pki"
	"github.com/carousel-dev/carousel/pkg/pki/pkitest"
	"github.com/carousel-dev/carousel/pkg/scheme"
)

// A managed API server that takes the connection and never answers (its
// endpoint and bundle are the tenant's to write) holds a plan for
// --request-timeout, not for ever: the pool's nodes are reported unknown.
func TestAPlanDoesNotWaitForAManagedAPIServerThatNeverAnswers(t *testing.T) {
	// Far longer than the request timeout: without it, the plan would wait
	// until this context ends.
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	plan, unknown := planOfPoolA(t, ctx, func(_ http.ResponseWriter, r *http.Request) { <-r.Context().Done() })
	if unknown != plan.NodesUnknown {
		t.Errorf("the nodes unknown: %q, pool a's %q; want the same reason", unknown, plan.NodesUnknown)
	}
	// The request's deadline and its HTTP client's timeout are the same
	// second: either may end it.
	if ctx.Err() != nil || !strings.Contains(plan.NodesUnknown, "deadline exceeded") && !strings.Contains(plan.NodesUnknown, "Client.Timeout") {
		t.Errorf("pool a: nodes unknown %q, the command's context %v; want the request's own deadline, before the command's", plan.NodesUnknown, ctx.Err())
	}
	if got := (&env{}).managedRequestTimeout(); got != defaultManagedRequestTimeout {
		t.Errorf("without --request-timeout: %s, want %s", got, defaultManagedRequestTimeout)
	}
}

// A managed API server that answers the list of nodes without end, within
// the request timeout, has the plan read no more than
// bounded.MaxResponseBytes of it: the pool's nodes are reported unknown.
func TestAPlanReadsABoundedAnswerOfAManagedAPIServer(t *testing.T) {
	plan, _ := planOfPoolA(t, context.Background(), func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"kind":"NodeList","apiVersion":"v1","metadata":{},"items":[`))
		padding := []byte(strings.Repeat(" ", 1<<20))
		for r.Context().Err() == nil {
			if _, err := w.Write(padding); err != nil {
				return
			}
		}
	})
	if !strings.Contains(plan.NodesUnknown, "larger than 16 MiB") {
		t.Errorf("pool a: nodes unknown %q, want the answer refused as too large", plan.NodesUnknown)
	}
}

// planOfPoolA plans, for a Cluster whose endpoint is a TLS server that
// answers with handler, the nodes of its worker pool a, with a request
// timeout of a second.
func planOfPoolA(t *testing.T, ctx context.Context, handler http.HandlerFunc) (outputv1alpha1.WorkerPoolPlan, string) {
	t.Helper()
	plan, _, unknown := planWithin(t, ctx, "1s", handler)
	return plan, unknown
}

// planWithin is planOfPoolA with a request timeout of requestTimeout, and
// the nodes in no pool too.
func planWithin(t *testing.T, ctx context.Context, requestTimeout string, handler http.HandlerFunc) (outputv1alpha1.WorkerPoolPlan, []string, string) {
	t.Helper()
	now := time.Now()
	ca := pkitest.NewCA(t, "cluster-ca")
	issue := func(usage x509.ExtKeyUsage, ips ...net.IP) *pki.KeyPair {
		kp, err := ca.IssueKeyPair(pki.LeafTemplate{CommonName: "test", IPAddresses: ips, Usages: []x509.ExtKeyUsage{usage}, Validity: time.Hour},
			pki.ECDSAP256, now)
		if err != nil {
			t.Fatal(err)
		}
		return kp
	}
	serving, admin := issue(x509.ExtKeyUsageServerAuth, net.IPv4(127, 0, 0, 1)), issue(x509.ExtKeyUsageClientAuth)
	api := httptest.NewUnstartedServer(handler)
	api.TLS = &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{serving.Cert.Raw}, PrivateKey: serving.Key}}}
	api.StartTLS()
	t.Cleanup(api.Close)

	adminKey, err := admin.KeyPEM()
	if err != nil {
		t.Fatal(err)
	}
	cl := &v1alpha1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "prod"},
		Spec: v1alpha1.ClusterSpec{ControlPlane: v1alpha1.ControlPlaneSpec{Endpoint: api.URL}, Workers: []v1alpha1.WorkerPool{{Name: "a"}}}}
	c := fake.NewClientBuilder().WithScheme(scheme.New()).WithObjects(
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: credentials.CertificateSecretName("prod", credentials.CertAdmin)},
			Data: map[string][]byte{v1alpha1.DataKeyCertificate: admin.CertPEM(), v1alpha1.DataKeyPrivateKey: adminKey}},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: credentials.BundleConfigMapName("prod", v1alpha1.CARoleCluster)},
			Data: map[string]string{v1alpha1.DataKeyCABundle: string(ca.CertPEM())}},
	).Build()
	flags := genericclioptions.NewConfigFlags(false)
	flags.APIServer, flags.Timeout = ptr.To("https://127.0.0.1:1"), ptr.To(requestTimeout)
	pools, outside, unknown := (&env{flags: flags}).poolNodes(ctx, c, cl)
	return pools["a"], outside, unknown
}

// A plan lists the managed cluster's nodes in pages, as kubectl does: a
// large cluster's list, taken whole, would pass the bound on an answer.
func TestAPlanListsTheNodesInPages(t *testing.T) {
	plan, unknown := planOfPoolA(t, context.Background(), func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		node, next := "n1", "page-2"
		if q.Get("continue") == "page-2" {
			node, next = "n2", ""
		}
		if q.Get("limit") == "" {
			http.Error(w, "a list without a limit", http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = fmt.Fprintf(w, `{"kind":"NodeList","apiVersion":"v1","metadata":{"continue":%q},"items":[{"metadata":{"name":%q,"labels":{%q:"a"}}}]}`,
			next, node, v1alpha1.LabelPool)
	})
	if unknown != "" || !slices.Equal(plan.Nodes, []string{"n1", "n2"}) {
		t.Errorf("pool a: nodes %v (unknown: %q), want both pages' n1 and n2", plan.Nodes, unknown)
	}
}

// A managed API server that answers each page of Nodes within the request
// timeout, but with no end to them, holds a plan for planListPages request
// timeouts, not for every page bounded.EachItem allows.
func TestAPlanDoesNotWaitForPagesWithoutEnd(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	plan, _, _ := planWithin(t, ctx, "100ms", func(w http.ResponseWriter, _ *http.Request) {
		time.Sleep(50 * time.Millisecond) // within the request timeout
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"kind":"NodeList","apiVersion":"v1","metadata":{"continue":"more"},"items":[]}`))
	})
	if ctx.Err() != nil || !strings.Contains(plan.NodesUnknown, "deadline") {
		t.Errorf("pool a: nodes unknown %q, the test's context %v; want the list's own deadline, well before the test's", plan.NodesUnknown, ctx.Err())
	}
}

// A list of Nodes cut short (a later page failing) lists no node: neither
// the pools' nor those in no pool are what the first pages held.
func TestAPlanCutShortListsNoNode(t *testing.T) {
	plan, outside, unknown := planWithin(t, context.Background(), "1s", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("continue") != "" {
			http.Error(w, "gone", http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = fmt.Fprintf(w, `{"kind":"NodeList","apiVersion":"v1","metadata":{"continue":"page-2"},"items":[{"metadata":{"name":"n1","labels":{%q:"a"}}},{"metadata":{"name":"lost"}}]}`,
			v1alpha1.LabelPool)
	})
	if unknown == "" || plan.NodesUnknown == "" || len(plan.Nodes) != 0 || len(outside) != 0 {
		t.Errorf("pool a: nodes %v (unknown %q), in no pool %v (unknown %q); want none listed, and why", plan.Nodes, plan.NodesUnknown, outside, unknown)
	}
}
