package clustercache

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/log"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
	"github.com/carousel-dev/carousel/pkg/credentials"
	"github.com/carousel-dev/carousel/pkg/pki"
	"github.com/carousel-dev/carousel/pkg/pki/pkitest"
	"github.com/carousel-dev/carousel/pkg/scheme"
)

func TestCacheKeepsANodesIdentityOnly(t *testing.T) {
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "worker-1", UID: "u-1", Labels: map[string]string{v1alpha1.LabelPool: "edge"},
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubelet"}}},
		Spec: corev1.NodeSpec{ProviderID: "carousel-test://worker-1"},
		Status: corev1.NodeStatus{
			Addresses:  []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "192.0.2.10"}},
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}},
			Images:     []corev1.ContainerImage{{Names: []string{"registry.example/pause:3.10"}, SizeBytes: 1 << 20}},
		},
	}
	var transform func(any) (any, error)
	for obj, by := range CacheOptions().ByObject {
		if _, ok := obj.(*corev1.Node); ok {
			transform = by.Transform
		}
	}
	if transform == nil {
		t.Fatal("Nodes are cached whole")
	}
	got, err := transform(node.DeepCopy())
	if err != nil {
		t.Fatal(err)
	}
	kept := got.(*corev1.Node)
	if kept.Name != "worker-1" || kept.UID != "u-1" || kept.Labels[v1alpha1.LabelPool] != "edge" ||
		len(kept.Status.Addresses) != 1 || kept.Status.Addresses[0].Address != "192.0.2.10" {
		t.Errorf("the cache lost what identifies the Node: %+v", kept)
	}
	if kept.ManagedFields != nil || kept.Status.Images != nil || kept.Status.Conditions != nil || kept.Spec.ProviderID != "" {
		t.Errorf("the cache keeps more of the Node than its identity: %+v", kept)
	}
	if other, err := transform("a tombstone"); err != nil || other != "a tombstone" {
		t.Errorf("the transform changed what is not a Node: %v, %v", other, err)
	}
}

func TestCacheHoldsCarouselsBootstrapTokensOnly(t *testing.T) {
	var secrets *labels.Selector
	var namespaces []string
	for obj, by := range CacheOptions().ByObject {
		if _, ok := obj.(*corev1.Secret); ok {
			secrets = &by.Label
			for ns := range by.Namespaces {
				namespaces = append(namespaces, ns)
			}
		}
	}
	if secrets == nil || *secrets == nil {
		t.Fatal("every kube-system Secret is cached")
	}
	if len(namespaces) != 1 || namespaces[0] != metav1.NamespaceSystem {
		t.Errorf("Secrets cached in %v, want kube-system only", namespaces)
	}
	for _, tc := range []struct {
		labels map[string]string
		want   bool
	}{
		{map[string]string{v1alpha1.LabelBootstrapToken: "prod"}, true},
		{nil, false},
		{map[string]string{"kubernetes.io/legacy-token-last-used": "2026-11-26"}, false},
	} {
		if got := (*secrets).Matches(labels.Set(tc.labels)); got != tc.want {
			t.Errorf("a Secret labelled %v cached: %v, want %v", tc.labels, got, tc.want)
		}
	}
}

// A connection maps the kinds Carousel uses in a managed cluster without
// discovering its API server: the whole aggregated discovery, kept per
// managed cluster, was half of what a connection cost the manager. Another
// kind is still mapped, through one discovery shared by the direct client
// and the cache.
func TestConnectionMapsManagedKindsWithoutDiscovery(t *testing.T) {
	var discoveries atomic.Int32
	server := managedAPIServer(t, &discoveries)
	cfg := &rest.Config{Host: server.URL, TLSClientConfig: rest.TLSClientConfig{Insecure: true}}
	c := &Cache{Scheme: scheme.New()}
	conn, err := c.start(t.Context(), client.ObjectKey{Namespace: "fleet", Name: "a"}, cfg, "digest")
	if err != nil {
		t.Fatal(err)
	}
	defer conn.cancel()

	if err := conn.Client.Get(t.Context(), client.ObjectKey{Namespace: "kube-system", Name: "s"}, &corev1.Secret{}); err != nil {
		t.Fatalf("the direct client: %v", err)
	}
	mapper := conn.Cluster.GetRESTMapper()
	for _, k := range managedKinds {
		m, err := mapper.RESTMapping(k.gvk.GroupKind(), k.gvk.Version)
		if err != nil {
			t.Fatalf("%s: %v", k.gvk, err)
		}
		if m.Resource.Resource != k.resource || (m.Scope.Name() == meta.RESTScopeNameNamespace) != k.namespaced {
			t.Errorf("%s maps to %s, scope %s", k.gvk, m.Resource, m.Scope.Name())
		}
		namespaced, err := conn.Client.IsObjectNamespaced(objectOf(t, k.gvk))
		if err != nil || namespaced != k.namespaced {
			t.Errorf("the direct client: %s namespaced %t (%v), want %t", k.gvk, namespaced, err, k.namespaced)
		}
	}
	if got := discoveries.Load(); got != 0 {
		t.Fatalf("%d discovery requests for the kinds Carousel uses, want none", got)
	}

	for range 2 {
		if _, err := conn.Client.IsObjectNamespaced(&corev1.Pod{}); err != nil {
			t.Fatalf("a kind outside the table: %v", err)
		}
		if _, err := mapper.RESTMapping(schema.GroupKind{Kind: "Pod"}, "v1"); err != nil {
			t.Fatalf("a kind outside the table, through the cache's mapper: %v", err)
		}
	}
	if got := discoveries.Load(); got != 2 { // /api and /apis, once
		t.Fatalf("%d discovery requests, want 2: the direct client and the cache each discovered the API server", got)
	}
}

// Every request of a connection, whatever its kind, the discovery of a kind
// outside the table and the reach check among them, takes a token from one
// bucket of QPS and Burst: client-go made one for each REST client, so that
// a connection sent as many requests a second as it used kinds.
func TestAConnectionSendsItsRequestsThroughOneBucket(t *testing.T) {
	var discoveries, requests atomic.Int32
	handler := managedAPIHandler(&discoveries)
	server := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		handler.ServeHTTP(w, r)
	}))
	t.Cleanup(server.Close)
	const burst = 20
	c := &Cache{Scheme: scheme.New(), QPS: 0.001, Burst: burst} // no token back within the test
	conn, err := c.start(t.Context(), client.ObjectKey{Namespace: "fleet", Name: "a"},
		&rest.Config{Host: server.URL, TLSClientConfig: rest.TLSClientConfig{Insecure: true}}, "digest")
	if err != nil {
		t.Fatal(err)
	}
	defer conn.cancel()
	for _, obj := range []client.Object{&corev1.Secret{}, &corev1.Node{}, &corev1.Pod{}} {
		_ = conn.Client.Get(t.Context(), client.ObjectKey{Namespace: "kube-system", Name: "s"}, obj) // a 404 is a request too
	}
	if conn.Config.RateLimiter == nil {
		t.Fatal("the connection has no rate limiter of its own")
	}
	left := 0
	for conn.Config.RateLimiter.TryAccept() {
		left++
	}
	if sent := int(requests.Load()); sent < 5 || sent+left != burst {
		t.Fatalf("%d requests sent, %d tokens left of %d: want every request to have taken one of the connection's", sent, left, burst)
	}
}

// The cluster's client reads unstructured objects from the API server, each
// time: what the CSR approver reads that way (address pins, a Node's latest
// addresses) must never be a cache's stale copy.
func TestTheClusterClientReadsUnstructuredObjectsFromTheAPIServer(t *testing.T) {
	var discoveries, reads atomic.Int32
	handler := managedAPIHandler(&discoveries)
	server := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/api/v1/namespaces/kube-system/secrets/s" {
			reads.Add(1)
		}
		handler.ServeHTTP(w, r)
	}))
	t.Cleanup(server.Close)
	conn, err := (&Cache{Scheme: scheme.New()}).start(t.Context(), client.ObjectKey{Namespace: "fleet", Name: "a"},
		&rest.Config{Host: server.URL, TLSClientConfig: rest.TLSClientConfig{Insecure: true}}, "digest")
	if err != nil {
		t.Fatal(err)
	}
	defer conn.cancel()
	for i := range 2 {
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Secret"))
		if err := conn.Cluster.GetClient().Get(t.Context(), client.ObjectKey{Namespace: "kube-system", Name: "s"}, u); err != nil {
			t.Fatal(err)
		}
		if got := reads.Load(); got != int32(i+1) {
			t.Fatalf("%d reads of the API server after %d unstructured reads, want one each", got, i+1)
		}
	}
}

// A connect to a managed API server that does not answer fails, and keeps
// no connection: its caller retries it with backoff.
func TestConnectFailsWhenTheAPIServerDoesNotAnswer(t *testing.T) {
	server := managedAPIServer(t, new(atomic.Int32))
	cfg := &rest.Config{Host: server.URL, TLSClientConfig: rest.TLSClientConfig{Insecure: true}}
	server.Close()
	c := &Cache{Scheme: scheme.New(), OnConnect: []OnConnect{func(client.ObjectKey, *Connection) error {
		t.Error("hooks ran for a connection that cannot reach its API server")
		return nil
	}}}
	key := client.ObjectKey{Namespace: "fleet", Name: "a"}
	if _, err := c.connect(t.Context(), key, cfg); err == nil || !strings.Contains(err.Error(), "reaching the managed API server") {
		t.Fatalf("connect = %v, want the API server named unreachable", err)
	}
	if _, ok := c.Connection(key); ok {
		t.Fatal("a connection was kept")
	}
}

// objectOf is a new, empty object of the scheme's type for gvk.
func objectOf(t *testing.T, gvk schema.GroupVersionKind) client.Object {
	t.Helper()
	obj, err := scheme.New().New(gvk)
	if err != nil {
		t.Fatal(err)
	}
	return obj.(client.Object)
}

// Two reconcilers may connect a Cluster at once, after its credentials
// changed: the connection kept must be the one whose hooks ran last, or what
// they started (the CSR watch) would follow a connection already ended.
func TestConcurrentConnectsKeepTheLastHooked(t *testing.T) {
	server := managedAPIServer(t, new(atomic.Int32))
	key := client.ObjectKey{Namespace: "fleet", Name: "a"}
	var mu sync.Mutex
	var hooked *Connection
	var c *Cache
	c = &Cache{Scheme: scheme.New(), OnConnect: []OnConnect{func(_ client.ObjectKey, conn *Connection) error {
		c.connecting.mu.Lock()
		kl := c.connecting.locks[key]
		c.connecting.mu.Unlock()
		if kl == nil || kl.TryLock() {
			t.Error("hooks run while another connect of the Cluster may run")
			if kl != nil {
				kl.Unlock()
			}
		}
		mu.Lock()
		defer mu.Unlock()
		hooked = conn
		return nil
	}}}
	defer c.Disconnect(key)
	for i := range 100 {
		c.Disconnect(key)
		var wg sync.WaitGroup
		for _, host := range []string{server.URL, strings.Replace(server.URL, "127.0.0.1", "localhost", 1)} {
			wg.Go(func() {
				cfg := &rest.Config{Host: host, TLSClientConfig: rest.TLSClientConfig{Insecure: true}}
				if _, err := c.connect(t.Context(), key, cfg); err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
		c.mu.Lock()
		kept := c.conns[key]
		c.mu.Unlock()
		if kept != hooked {
			t.Fatalf("round %d: the connection kept is not the one the hooks saw last", i)
		}
	}
}

// A Disconnect (the Cluster deleted, or handed to another shard) while a
// connect of the same Cluster waits for its API server ends the connection
// that connect makes: none is left behind, with the CSR approval its hooks
// started.
func TestADisconnectEndsAConnectInFlight(t *testing.T) {
	arrived, release := make(chan struct{}, 1), make(chan struct{})
	var releaseOnce sync.Once
	releaseVersion := func() { releaseOnce.Do(func() { close(release) }) }
	api := managedAPIHandler(new(atomic.Int32))
	server := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/version" {
			select {
			case arrived <- struct{}{}:
			default:
			}
			<-release
		}
		api.ServeHTTP(w, r)
	}))
	t.Cleanup(server.Close)
	t.Cleanup(releaseVersion) // before Close, which waits for the handlers
	key := client.ObjectKey{Namespace: "fleet", Name: "a"}
	c := &Cache{Scheme: scheme.New()}
	t.Cleanup(func() { c.Disconnect(key) })

	connected := make(chan *Connection, 1)
	go func() {
		conn, err := c.connect(t.Context(), key, &rest.Config{Host: server.URL, TLSClientConfig: rest.TLSClientConfig{Insecure: true}})
		if err != nil {
			t.Error(err)
		}
		connected <- conn
	}()
	<-arrived
	disconnected := make(chan struct{})
	go func() {
		c.Disconnect(key)
		close(disconnected)
	}()
	// Let the connect go on once the Disconnect has returned or waits for it.
	for waiting := false; !waiting; {
		select {
		case <-disconnected:
			waiting = true
		case <-time.After(time.Millisecond):
			c.connecting.mu.Lock()
			waiting = c.connecting.locks[key] != nil && c.connecting.locks[key].users > 1
			c.connecting.mu.Unlock()
		}
	}
	releaseVersion()
	conn := <-connected
	<-disconnected
	if _, ok := c.Connection(key); ok {
		t.Fatal("the connection made while the Cluster was disconnected is kept")
	}
	if conn != nil && conn.Context().Err() == nil {
		t.Fatal("the connection made while the Cluster was disconnected still runs")
	}
	c.connecting.mu.Lock()
	defer c.connecting.mu.Unlock()
	if len(c.connecting.locks) != 0 {
		t.Fatalf("%d per-Cluster locks kept after every connect and disconnect ended", len(c.connecting.locks))
	}
}

// A Cluster whose endpoint moved is no longer served at the old one: a
// connect to the new endpoint that fails leaves no connection to the old.
func TestAConnectToAMovedEndpointEndsTheOldConnectionWhenItFails(t *testing.T) {
	old := managedAPIServer(t, new(atomic.Int32))
	moved := managedAPIServer(t, new(atomic.Int32))
	moved.Close()
	key := client.ObjectKey{Namespace: "fleet", Name: "a"}
	c := &Cache{Scheme: scheme.New()}
	defer c.Disconnect(key)
	first, err := c.connect(t.Context(), key, &rest.Config{Host: old.URL, TLSClientConfig: rest.TLSClientConfig{Insecure: true}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.connect(t.Context(), key, &rest.Config{Host: moved.URL, TLSClientConfig: rest.TLSClientConfig{Insecure: true}}); err == nil {
		t.Fatal("a connect to an endpoint that does not answer succeeded")
	}
	if _, ok := c.Connection(key); ok {
		t.Fatal("the connection to the old endpoint is still handed out")
	}
	if first.Context().Err() == nil {
		t.Fatal("the connection to the old endpoint still runs")
	}
}

// managedAPIServer serves managedAPIHandler over TLS.
func managedAPIServer(t *testing.T, discoveries *atomic.Int32) *httptest.Server {
	t.Helper()
	server := httptest.NewTLSServer(managedAPIHandler(discoveries))
	t.Cleanup(server.Close)
	return server
}

// managedAPIHandler serves what a connection reads of a managed API server:
// discovery (counted in discoveries) and one Secret.
func managedAPIHandler(discoveries *atomic.Int32) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/api":
			discoveries.Add(1)
			_ = json.NewEncoder(w).Encode(metav1.APIVersions{TypeMeta: metav1.TypeMeta{Kind: "APIVersions"}, Versions: []string{"v1"}})
		case "/apis":
			discoveries.Add(1)
			_ = json.NewEncoder(w).Encode(metav1.APIGroupList{TypeMeta: metav1.TypeMeta{Kind: "APIGroupList", APIVersion: "v1"}})
		case "/api/v1":
			_ = json.NewEncoder(w).Encode(metav1.APIResourceList{TypeMeta: metav1.TypeMeta{Kind: "APIResourceList", APIVersion: "v1"}, GroupVersion: "v1",
				APIResources: []metav1.APIResource{{Name: "secrets", Namespaced: true, Kind: "Secret", Verbs: metav1.Verbs{"get"}},
					{Name: "nodes", Kind: "Node", Verbs: metav1.Verbs{"get"}}, {Name: "pods", Namespaced: true, Kind: "Pod", Verbs: metav1.Verbs{"get"}}}})
		case "/version":
			_ = json.NewEncoder(w).Encode(map[string]string{"major": "1", "minor": "36", "gitVersion": "v1.36.3"})
		case "/api/v1/namespaces/kube-system/secrets/s":
			_ = json.NewEncoder(w).Encode(&corev1.Secret{TypeMeta: metav1.TypeMeta{Kind: "Secret", APIVersion: "v1"},
				ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "s"}})
		default:
			http.NotFound(w, r)
		}
	})
}

// A bundle that no longer holds a CA the connection trusts (a rotation's
// completion dropped the old cluster CA) ends the connection, whether or not
// a new one can be made: one that failed to verify against the new bundle
// would otherwise go on trusting the old CA.
func TestABundleThatDropsACAEndsTheConnectionWhenTheNewOneFails(t *testing.T) {
	server := managedAPIServer(t, new(atomic.Int32))
	oldCA, newCA := pki.EncodeCertificates(server.Certificate()), pkitest.NewCA(t, "cluster CA 1").CertPEM()
	config := func(bundle []byte) *rest.Config {
		return &rest.Config{Host: server.URL, TLSClientConfig: rest.TLSClientConfig{CAData: bundle}}
	}
	clusterKey := client.ObjectKey{Namespace: "fleet", Name: "a"}
	c := &Cache{Scheme: scheme.New()}
	defer c.Disconnect(clusterKey)
	first, err := c.connect(t.Context(), clusterKey, config(oldCA))
	if err != nil {
		t.Fatal(err)
	}
	both := append(slices.Clone(oldCA), newCA...)
	second, err := c.connect(t.Context(), clusterKey, config(both))
	if err != nil {
		t.Fatal(err)
	}
	if first.Context().Err() == nil || second.Context().Err() != nil {
		t.Fatal("the connection made with both CAs did not take the place of the one with the old CA")
	}
	if _, err := c.connect(t.Context(), clusterKey, config(newCA)); err == nil {
		t.Fatal("a connect verified the server's certificate against a CA that did not sign it")
	}
	if _, ok := c.Connection(clusterKey); ok {
		t.Fatal("the connection that trusts the dropped CA is still handed out")
	}
	if second.Context().Err() == nil {
		t.Fatal("the connection that trusts the dropped CA still runs")
	}
}

func TestDropsTrust(t *testing.T) {
	ca0, ca1 := pkitest.NewCA(t, "0").CertPEM(), pkitest.NewCA(t, "1").CertPEM()
	for _, tt := range []struct {
		name          string
		trusted, next []byte
		want          bool
	}{
		{"the same", ca0, ca0, false},
		{"a CA added", ca0, append(slices.Clone(ca0), ca1...), false},
		{"the order changed", append(slices.Clone(ca0), ca1...), append(slices.Clone(ca1), ca0...), false},
		{"a CA dropped", append(slices.Clone(ca0), ca1...), ca1, true},
		{"another CA", ca0, ca1, true},
		{"nothing trusted before (the system roots)", nil, ca0, false},
		{"nothing trusted next", ca0, nil, true},
		{"a bundle that does not parse", ca0, []byte("-----BEGIN CERTIFICATE-----\nnot base64\n"), true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := dropsTrust(tt.trusted, tt.next); got != tt.want {
				t.Errorf("dropsTrust = %v, want %v", got, tt.want)
			}
		})
	}
}

// A managed API server that takes a request and never answers does not hold
// the caller for ever: the direct client's requests are bounded.
func TestTheDirectClientGivesUpOnAnAPIServerThatNeverAnswers(t *testing.T) {
	released := make(chan struct{})
	answers := managedAPIHandler(new(atomic.Int32))
	server := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/api/v1/namespaces/kube-system/secrets/s" {
			select { // as etcd without quorum: the request is taken, and nothing comes back
			case <-r.Context().Done():
			case <-released:
			}
			return
		}
		answers.ServeHTTP(w, r)
	}))
	defer server.Close()
	defer close(released)
	key := client.ObjectKey{Namespace: "fleet", Name: "a"}
	c := &Cache{Scheme: scheme.New(), RequestTimeout: 100 * time.Millisecond}
	defer c.Disconnect(key)
	conn, err := c.connect(t.Context(), key, &rest.Config{Host: server.URL, TLSClientConfig: rest.TLSClientConfig{Insecure: true}})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		done <- conn.Client.Get(context.Background(), client.ObjectKey{Namespace: "kube-system", Name: "s"}, &corev1.Secret{})
	}()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("a request the API server never answered succeeded")
		}
	case <-time.After(time.Minute): // far beyond the bound: the request was not bounded at all
		t.Fatal("a request the API server never answers still waits")
	}
}

// connected is Cluster fleet/a connected to a managed API server, with the
// management objects it was connected from.
type connected struct {
	cache      *Cache
	cluster    *v1alpha1.Cluster
	first      *Connection
	bundle     *corev1.ConfigMap
	operator   *corev1.Secret
	management client.Client
}

// connectCluster connects Cluster fleet/a to server, with a bundle that
// holds server's certificate and an operator certificate (of a client CA
// server does not check); the connection ends with the test.
func connectCluster(t *testing.T, server *httptest.Server) connected {
	t.Helper()
	ca := pkitest.NewCA(t, "client CA")
	operator, err := ca.IssueKeyPair(pki.LeafTemplate{CommonName: "carousel:operator", Usages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		Validity: time.Hour}, pki.ECDSAP256, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	operatorKey, err := operator.KeyPEM()
	if err != nil {
		t.Fatal(err)
	}
	cl := &v1alpha1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: "fleet", Name: "a"}}
	cl.Spec.ControlPlane.Endpoint = server.URL
	c := connected{cluster: cl,
		bundle: &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "fleet", Name: credentials.BundleConfigMapName("a", v1alpha1.CARoleCluster)},
			Data: map[string]string{v1alpha1.DataKeyCABundle: string(pki.EncodeCertificates(server.Certificate()))}},
		operator: &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "fleet", Name: credentials.CertificateSecretName("a", credentials.CertOperator)},
			Data: map[string][]byte{v1alpha1.DataKeyCertificate: operator.CertPEM(), v1alpha1.DataKeyPrivateKey: operatorKey}}}
	c.management = fake.NewClientBuilder().WithScheme(scheme.New()).WithObjects(c.bundle, c.operator).Build()
	c.cache = &Cache{Scheme: scheme.New(), Management: c.management}
	t.Cleanup(func() { c.cache.Disconnect(client.ObjectKeyFromObject(cl)) })
	if c.first, err = c.cache.Connect(t.Context(), cl); err != nil {
		t.Fatal(err)
	}
	return c
}

// Connect ends the old connection when the endpoint moved, or the bundle no
// longer parses, even though no new connection can be configured from them
// (an endpoint with a path, which the webhook refuses, written while it was
// off): the old connection would go on being handed out.
func TestAConnectThatCannotBeConfiguredEndsAConnectionThatMoved(t *testing.T) {
	server := managedAPIServer(t, new(atomic.Int32))
	for _, tt := range []struct {
		name     string
		endpoint string
		bundle   string
	}{
		{"an endpoint with a path", "https://lb.example/k8s/clusters/c-1", string(pki.EncodeCertificates(server.Certificate()))},
		{"a bundle that does not parse", server.URL, "not PEM"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := connectCluster(t, server)
			c.cluster.Spec.ControlPlane.Endpoint = tt.endpoint
			c.bundle.Data[v1alpha1.DataKeyCABundle] = tt.bundle
			if err := c.management.Update(t.Context(), c.bundle); err != nil {
				t.Fatal(err)
			}
			if _, err := c.cache.Connect(t.Context(), c.cluster); err == nil {
				t.Fatal("a connect that cannot be configured succeeded")
			}
			if _, ok := c.cache.Connection(client.ObjectKeyFromObject(c.cluster)); ok || c.first.Context().Err() == nil {
				t.Errorf("the old connection is still handed out (%v) or runs (%v)", ok, c.first.Context().Err())
			}
		})
	}
}

// A Cluster whose bundle or operator Secret is gone from the manager's view
// (deleted, or its label removed) has nothing to connect with: the
// connection it had ends all the same once its endpoint moves, and stays
// while it does not (a deleted Cluster's cleanup goes on through it).
func TestANotIssuedConnectEndsAConnectionThatMoved(t *testing.T) {
	server := managedAPIServer(t, new(atomic.Int32))
	for _, missing := range []string{"bundle", "operator Secret"} {
		for _, moved := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s missing, endpoint moved %t", missing, moved), func(t *testing.T) {
				c := connectCluster(t, server)
				gone := client.Object(c.bundle)
				if missing == "operator Secret" {
					gone = c.operator
				}
				if err := c.management.Delete(t.Context(), gone); err != nil {
					t.Fatal(err)
				}
				if moved {
					c.cluster.Spec.ControlPlane.Endpoint = "https://moved.example:6443"
				}
				if _, err := c.cache.Connect(t.Context(), c.cluster); !errors.Is(err, ErrNotIssued) {
					t.Fatalf("Connect = %v, want ErrNotIssued", err)
				}
				if _, ok := c.cache.Connection(client.ObjectKeyFromObject(c.cluster)); ok == moved || (c.first.Context().Err() == nil) == moved {
					t.Errorf("the connection is handed out %t and runs %t, want %t", ok, c.first.Context().Err() == nil, !moved)
				}
			})
		}
	}
}

// A connect in flight when the manager stops ends the connection it makes,
// rather than keep it after Start ended every other one: nothing would
// stop its watches.
func TestAConnectInFlightWhenTheManagerStopsKeepsNoConnection(t *testing.T) {
	server := managedAPIServer(t, new(atomic.Int32))
	entered, release := make(chan *Connection, 1), make(chan struct{})
	c := &Cache{Scheme: scheme.New(), OnConnect: []OnConnect{func(_ client.ObjectKey, conn *Connection) error {
		entered <- conn
		<-release
		return nil
	}}}
	key := client.ObjectKey{Namespace: "fleet", Name: "a"}
	ctx, stop := context.WithCancel(t.Context())
	started := make(chan error, 1)
	go func() { started <- c.Start(ctx) }()
	connected := make(chan error, 1)
	go func() {
		_, err := c.connect(t.Context(), key, &rest.Config{Host: server.URL, TLSClientConfig: rest.TLSClientConfig{Insecure: true}})
		connected <- err
	}()
	conn := <-entered
	stop()
	if err := <-started; err != nil {
		t.Fatal(err)
	}
	close(release)
	if err := <-connected; err == nil {
		t.Error("a connect that ended after the manager stopped succeeded")
	}
	if _, ok := c.Connection(key); ok || conn.Context().Err() == nil {
		t.Errorf("the connection made while the manager stopped is kept (%v) or runs (%v)", ok, conn.Context().Err())
	}
}

// What runs with a connection and fails ends it, and says why, with the
// managed API server's address: a managed cluster whose CSRs cannot be
// listed in time was connected and dropped again without a word.
func TestAConnectionWhoseRunFailsEndsWithItsErrorLogged(t *testing.T) {
	server := managedAPIServer(t, new(atomic.Int32))
	errNotListed := errors.New("the managed cluster's CSRs were not listed within 2m0s")
	connected := make(chan struct{})
	c := &Cache{Scheme: scheme.New(), OnConnect: []OnConnect{func(_ client.ObjectKey, conn *Connection) error {
		conn.Run(func(context.Context) error {
			<-connected // fails once kept (see TestAConnectionEndedBeforeItIsKeptIsNotKept)
			return errNotListed
		})
		return nil
	}}}
	key := client.ObjectKey{Namespace: "fleet", Name: "a"}
	defer c.Disconnect(key)
	var mu sync.Mutex
	var logged []string
	logger := funcr.New(func(prefix, args string) {
		mu.Lock()
		defer mu.Unlock()
		logged = append(logged, args)
	}, funcr.Options{})
	conn, err := c.connect(log.IntoContext(t.Context(), logger), key, &rest.Config{Host: server.URL, TLSClientConfig: rest.TLSClientConfig{Insecure: true}})
	if err != nil {
		t.Fatal(err)
	}
	close(connected)
	select {
	case <-conn.Context().Done():
	case <-time.After(time.Minute):
		t.Fatal("the connection whose run failed still runs")
	}
	if _, ok := c.Connection(key); ok {
		t.Error("the connection whose run failed is kept")
	}
	mu.Lock()
	defer mu.Unlock()
	if !slices.ContainsFunc(logged, func(l string) bool {
		return strings.Contains(l, errNotListed.Error()) && strings.Contains(l, server.URL)
	}) {
		t.Errorf("no log line with the error and the endpoint in %q", logged)
	}
}

// A connection whose run fails before the connect keeps it is not kept: it
// was kept, ended, and handed out by every connect after it, which found it
// made with the same configuration (a managed cluster whose CSRs nobody
// watched any more, until Carousel's client certificate changed again). The
// connection it was to replace goes on.
func TestAConnectionEndedBeforeItIsKeptIsNotKept(t *testing.T) {
	server := managedAPIServer(t, new(atomic.Int32))
	oldCA, newCA := pki.EncodeCertificates(server.Certificate()), pkitest.NewCA(t, "cluster CA 1").CertPEM()
	config := func(bundle []byte) *rest.Config {
		return &rest.Config{Host: server.URL, TLSClientConfig: rest.TLSClientConfig{CAData: bundle}}
	}
	var fail atomic.Bool
	c := &Cache{Scheme: scheme.New(), OnConnect: []OnConnect{func(_ client.ObjectKey, conn *Connection) error {
		if fail.Load() {
			conn.Run(func(context.Context) error { return errors.New("the managed cluster's CSRs were not listed") })
			<-conn.Context().Done() // dropped before the connect keeps it
		}
		return nil
	}}}
	key := client.ObjectKey{Namespace: "fleet", Name: "a"}
	defer c.Disconnect(key)
	first, err := c.connect(t.Context(), key, config(oldCA))
	if err != nil {
		t.Fatal(err)
	}
	fail.Store(true)
	both := append(slices.Clone(oldCA), newCA...)
	if _, err := c.connect(t.Context(), key, config(both)); !errors.Is(err, errEndedAtStart) {
		t.Fatalf("connect = %v; want %v", err, errEndedAtStart)
	}
	if kept, ok := c.Connection(key); !ok || kept != first || first.Context().Err() != nil {
		t.Errorf("the connection kept is %p (%v), want the first one %p, running (%v)", kept, ok, first, first.Context().Err())
	}
	fail.Store(false)
	second, err := c.connect(t.Context(), key, config(both))
	if err != nil || second == first || second.Context().Err() != nil {
		t.Errorf("the next connect = %p, %v; want a new, running connection", second, err)
	}
}

// Client hands out a connection only while it goes to the Cluster's
// endpoint: one to the endpoint it had before is not the managed cluster's
// any more, though it lives until the kubelet bootstrap controller connects
// anew.
func TestClientHandsOutOnlyAConnectionToTheClustersEndpoint(t *testing.T) {
	c := connectCluster(t, managedAPIServer(t, new(atomic.Int32)))
	if _, ok := c.cache.Client(c.cluster); !ok {
		t.Fatal("no client of the connection to the Cluster's endpoint")
	}
	moved := c.cluster.DeepCopy()
	moved.Spec.ControlPlane.Endpoint = "https://192.0.2.1:6443"
	if _, ok := c.cache.Client(moved); ok {
		t.Error("the client of the connection to the endpoint the Cluster had before is handed out")
	}
}
