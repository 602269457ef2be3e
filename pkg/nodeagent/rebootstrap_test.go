package nodeagent

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
	"github.com/carousel-dev/carousel/pkg/noderenewal"
	"github.com/carousel-dev/carousel/pkg/pki"
)

// Errors as client-go returns them.
var (
	errUnauthorized    = apierrors.NewUnauthorized("Unauthorized")
	errUntrustedServer = &url.Error{Op: "Post", URL: testServer + "/apis/authentication.k8s.io/v1/selfsubjectreviews",
		Err: &tls.CertificateVerificationError{Err: x509.UnknownAuthorityError{}}}
	errUnreachable = &url.Error{Op: "Get", URL: testServer + "/api/v1/nodes",
		Err: &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}}
	errInternal = apierrors.NewInternalError(errors.New("etcdserver: request timed out"))
	errTimeout  = &url.Error{Op: "Get", URL: testServer + "/api/v1/nodes", Err: context.DeadlineExceeded}
)

func TestRefusalOf(t *testing.T) {
	for _, tt := range []struct {
		name string
		err  error
		want refusal
	}{
		{"success", nil, notRefused},
		{"401", errUnauthorized, refusedUnauthorized},
		{"401, wrapped", fmt.Errorf("watching: %w", errUnauthorized), refusedUnauthorized},
		{"unknown authority", errUntrustedServer, refusedUntrustedServer},
		{"unreachable", errUnreachable, notRefused},
		{"timeout", errTimeout, notRefused},
		{"500", errInternal, notRefused},
		{"503", apierrors.NewServiceUnavailable("starting"), notRefused},
		{"403", apierrors.NewForbidden(corev1.Resource("nodes"), "w1", errors.New("no")), notRefused},
	} {
		if got := refusalOf(tt.err); got != tt.want {
			t.Errorf("%s: %s, want %s", tt.name, got, tt.want)
		}
	}
}

func TestPlanRebootstrap(t *testing.T) {
	for _, tt := range []struct {
		kubeconfig                          kubeconfigState
		movedAside, restarted, bootstrapped bool
		want                                rebootstrapStep
	}{
		// Nothing was done yet.
		{kubeconfigNotRefused, false, false, false, rebootstrapNothing},
		{kubeconfigRefused, false, false, false, rebootstrapMoveAside},
		{kubeconfigAbsent, false, false, false, rebootstrapNothing}, // not moved by the agent: the kubelet bootstraps when it starts
		// Moved aside (or about to be), not restarted.
		{kubeconfigNotRefused, true, false, false, rebootstrapResync}, // the move never happened, or the kubelet bootstrapped anyway
		{kubeconfigRefused, true, false, false, rebootstrapMoveAside}, // the move never happened
		{kubeconfigAbsent, true, false, false, rebootstrapRestart},
		// Moved aside and restarted.
		{kubeconfigNotRefused, true, true, false, rebootstrapResync},
		{kubeconfigRefused, true, true, false, rebootstrapAwait}, // bootstrapped, and refused too: wait, do not restart in a loop
		{kubeconfigAbsent, true, true, false, rebootstrapAwait},
		// Bootstrapped, the API server took the new credentials.
		{kubeconfigNotRefused, true, true, true, rebootstrapResync},
		{kubeconfigRefused, true, true, true, rebootstrapMoveAside}, // refused since: a new re-bootstrap
	} {
		if got := planRebootstrap(tt.kubeconfig, tt.movedAside, tt.restarted, tt.bootstrapped); got != tt.want {
			t.Errorf("kubeconfig %s, moved aside %v, restarted %v, bootstrapped %v: %q, want %q", tt.kubeconfig, tt.movedAside, tt.restarted, tt.bootstrapped, got, tt.want)
		}
	}
}

// offNode is a node that was off through a whole CA rotation (newTestNode's
// files, all on the CA0s), come back to an API server that now serves with
// cluster CA 1 (what carousel-node-trust publishes, Finalizing), refuses the
// kubelet's client certificate, and accepts the token of the fresh bootstrap
// kubeconfig the provisioner delivered. The fake kubelet bootstraps, as the
// real one, when it starts without a kubeconfig.
type offNode struct {
	*testNode
	metrics *Metrics

	// Guarded by testNode.mu.
	refused     *x509.Certificate // the client certificate the API server refuses
	token       string            // the live bootstrap token
	unreachable error             // when set, every request fails with it
	restartErrs []error           // returned by the next restarts, in turn
	slowToStart bool              // a restart does not bootstrap the kubelet (yet)
	bootstraps  int
	watches     chan bool // on every watch of the Node: whether a re-bootstrap is unfinished
	watchers    []*watch.FakeWatcher
}

const freshToken = "fresh1.0123456789abcdef"

func newOffNode(t *testing.T) *offNode {
	t.Helper()
	tn := newTestNode(t, v1alpha1.RotationFinalizing)
	on := &offNode{testNode: tn, metrics: NewMetrics(prometheus.NewRegistry()), refused: tn.node.Manager.Current().Cert,
		token: freshToken, watches: make(chan bool, 100)}
	// The provisioner delivered a fresh bootstrap kubeconfig.
	tn.writeKubeconfig("bootstrap-kubeconfig", tn.trust.Cluster, &clientcmdapi.AuthInfo{Token: freshToken})
	// The rotation completed while the node was off: no request is pending.
	node, err := tn.cs.CoreV1().Nodes().Get(context.Background(), "w1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	node.Annotations = nil
	if _, err := tn.cs.CoreV1().Nodes().Update(context.Background(), node, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	tn.cs.PrependReactor("create", "selfsubjectreviews", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, &authenticationv1.SelfSubjectReview{Status: authenticationv1.SelfSubjectReviewStatus{
			UserInfo: authenticationv1.UserInfo{Username: "system:node:w1"}}}, nil
	})
	tn.cs.PrependWatchReactor("nodes", func(k8stesting.Action) (bool, watch.Interface, error) {
		w := watch.NewFake()
		tn.mu.Lock()
		on.watchers = append(on.watchers, w)
		tn.mu.Unlock()
		on.watches <- rebootstrapUnfinished(tn.path("pki"))
		return true, w, nil
	})
	m := tn.node.Manager
	m.cfg.Metrics = on.metrics
	m.newClient = on.client
	tn.node.Kubelet.Restart = on.restart
	return on
}

// client plays the API server for cfg's credentials.
func (on *offNode) client(cfg *rest.Config) (kubernetes.Interface, error) {
	on.mu.Lock()
	defer on.mu.Unlock()
	switch {
	case on.unreachable != nil:
		return failingClient(on.unreachable), nil
	case !bytes.Contains(cfg.CAData, on.trust.Cluster):
		return failingClient(errUntrustedServer), nil
	case cfg.BearerToken != "":
		if cfg.BearerToken != on.token {
			return failingClient(errUnauthorized), nil
		}
	case cfg.CertFile == "" && len(cfg.CertData) == 0:
		// Anonymous (the probe of the API server's certificate): answered.
	default:
		data, err := os.ReadFile(cfg.CertFile)
		if err != nil {
			return nil, err
		}
		kp, err := parsePair(data)
		if err != nil {
			return nil, err
		}
		if kp.Cert.Equal(on.refused) {
			return failingClient(errUnauthorized), nil
		}
	}
	return on.cs, nil
}

func counterValue(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

// failingClient fails every request with err.
func failingClient(err error) kubernetes.Interface {
	cs := fake.NewClientset()
	cs.PrependReactor("*", "*", func(k8stesting.Action) (bool, runtime.Object, error) { return true, nil, err })
	cs.PrependWatchReactor("*", func(k8stesting.Action) (bool, watch.Interface, error) { return true, nil, err })
	return cs
}

// restart plays the kubelet's restart (testNode.restart) and, unless it is
// slow to start, its TLS bootstrap (bootstrap).
func (on *offNode) restart(ctx context.Context) error {
	on.mu.Lock()
	var err error
	if len(on.restartErrs) > 0 {
		err, on.restartErrs = on.restartErrs[0], on.restartErrs[1:]
	}
	slow := on.slowToStart
	on.mu.Unlock()
	if err != nil {
		return err
	}
	if !slow {
		on.bootstrap()
	}
	return on.testNode.restart(ctx)
}

// bootstrap plays what kubelet v1.36 with rotateCertificates does about its
// client credentials at start (cmd/kubelet/app/server.go
// buildKubeletClientConfig, pkg/kubelet/certificate/bootstrap
// LoadClientConfig, the client certificate manager):
//   - a kubeconfig whose client certificate file loads and has not expired
//     is used as it is (isClientConfigStillValid);
//   - otherwise it writes a kubeconfig with the bootstrap kubeconfig's CA
//     that points at kubelet-client-current.pem;
//   - its certificate manager uses kubelet-client-current.pem while that has
//     not expired, and only without one asks, with the bootstrap token, for a
//     certificate for a new key, which it stores as the current pair.
//
// It runs on the goroutine under test: it reports with t.Error.
func (on *offNode) bootstrap() {
	t := on.t
	store := &Store{Dir: on.path("pki")}
	now := on.clk.Now()
	if info, err := readKubeconfig(on.path("kubeconfig")); err == nil {
		if data, err := os.ReadFile(info.ClientCertificate); err == nil {
			if kp, err := parsePair(data); err == nil && now.Before(kp.Cert.NotAfter) {
				return
			}
		}
	}
	cfg, err := clientcmd.LoadFromFile(on.path("bootstrap-kubeconfig"))
	if err != nil {
		t.Error(err)
		return
	}
	info, err := readKubeconfig(on.path("bootstrap-kubeconfig"))
	if err != nil {
		t.Error(err)
		return
	}
	user := &clientcmdapi.AuthInfo{ClientCertificate: store.CurrentPath(), ClientKey: store.CurrentPath()}
	on.writeKubeconfig("kubeconfig", info.CA, user)
	if kp, err := store.Current(); err != nil || (kp != nil && now.Before(kp.Cert.NotAfter)) {
		return // it goes on with the pair it has
	}
	on.mu.Lock()
	defer on.mu.Unlock()
	if cfg.AuthInfos[cfg.Contexts[cfg.CurrentContext].AuthInfo].Token != on.token || !bytes.Contains(info.CA, on.trust.Cluster) {
		return // the certificate manager tries again later
	}
	key, err := pki.GenerateKey(pki.ECDSAP256)
	if err != nil {
		t.Error(err)
		return
	}
	if _, err := store.Update(issue(t, key), key, now); err != nil {
		t.Error(err)
		return
	}
	on.bootstraps++
}

func (on *offNode) bootstrapCount() int {
	on.mu.Lock()
	defer on.mu.Unlock()
	return on.bootstraps
}

// restartAgent plays a new agent process on the node, started as main
// starts it: a new manager and Node over the same files, API server and
// kubelet.
func (on *offNode) restartAgent() {
	on.t.Helper()
	m := NewManager(on.node.Manager.cfg)
	m.newClient = on.client
	on.node = &Node{Manager: m, Kubelet: on.node.Kubelet, Logf: on.logf}
	started := make(chan error, 1)
	go func() { started <- m.Start(context.Background()) }()
	select {
	case err := <-started:
		if err != nil {
			on.t.Fatalf("the new agent does not start: %v", err)
		}
	case <-time.After(10 * time.Second):
		on.t.Fatal("the new agent still waits for the kubelet's credentials after 10s")
	}
}

// startWatchRenewals runs WatchRenewals until stop, which ends its context
// and its watches and waits for it to return.
func (on *offNode) startWatchRenewals() (stop func()) {
	t := on.t
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- on.node.WatchRenewals(ctx) }()
	return func() {
		cancel()
		on.mu.Lock()
		for _, w := range on.watchers {
			w.Stop()
		}
		on.mu.Unlock()
		select {
		case err := <-done:
			if !errors.Is(err, context.Canceled) {
				t.Errorf("WatchRenewals = %v, want it canceled", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("WatchRenewals does not return after its context ended")
		}
	}
}

// watchRenewals runs WatchRenewals until it watches the Node with no
// re-bootstrap unfinished, then stops it. When the test sets step, it runs
// it (on the test goroutine) while WatchRenewals runs, before waiting.
func (on *offNode) watchRenewals(step func()) {
	t := on.t
	t.Helper()
	stop := on.startWatchRenewals()
	defer stop()
	if step != nil {
		step()
	}
	for {
		select {
		case unfinished := <-on.watches:
			if !unfinished {
				return
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("WatchRenewals does not watch the Node after 10s; log: %q", on.logLines())
		}
	}
}

// read reads a file of the test node.
func (on *offNode) read(name string) []byte {
	on.t.Helper()
	data, err := os.ReadFile(on.path(name))
	if err != nil {
		on.t.Fatal(err)
	}
	return data
}

// assertRebootstrapped checks the node after a re-bootstrap: the refused
// kubeconfig and client pair kept aside as they were, a new kubeconfig that
// trusts the cluster bundle with a new client certificate for a new key, the published
// kubelet bundle in clientCAFile, a serving certificate that verifies
// against it and is the one served, no record left, no pair removed.
func (on *offNode) assertRebootstrapped(refusedKubeconfig []byte, oldPairs []string) {
	t := on.t
	t.Helper()
	if got := on.read("kubeconfig.refused"); !bytes.Equal(got, refusedKubeconfig) {
		t.Errorf("kubeconfig.refused is not the refused kubeconfig:\n%s", got)
	}
	info, err := readKubeconfig(on.path("kubeconfig"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(info.CA, on.trust.Cluster) {
		t.Error("the new kubeconfig does not trust the published cluster bundle")
	}
	current := on.node.Manager.Current()
	if current.Cert.Equal(on.refused) || samePublicKey(current.Cert.PublicKey, on.refused.PublicKey) {
		t.Error("the client certificate is not a new one for a new key")
	}
	refusedPair, err := parsePair(on.read("pki/kubelet-client-current.pem.refused"))
	if err != nil || !refusedPair.Cert.Equal(on.refused) {
		t.Errorf("kubelet-client-current.pem.refused is not the refused pair (%v)", err)
	}
	if got := on.read("ca.crt"); !bytes.Equal(got, on.trust.Kubelet) {
		t.Error("clientCAFile is not the published kubelet bundle")
	}
	serving := filepath.Join(on.path("pki"), servingCurrentFile)
	if state, why, err := checkServing(serving, on.trust.Kubelet, on.clk.Now()); err != nil || state != servingTrusted {
		t.Errorf("the serving certificate is %s against the kubelet bundle (%v, %v)", state, why, err)
	}
	if served, _ := on.serves(context.Background()); !served.Equal(on.storedServing()) {
		t.Error("the kubelet does not serve the stored serving certificate")
	}
	if _, err := os.Stat(filepath.Join(on.path("pki"), progressFile)); !os.IsNotExist(err) {
		t.Errorf("the progress record is still there (%v)", err)
	}
	for _, pair := range oldPairs {
		if _, err := os.Stat(pair); err != nil {
			t.Errorf("a key pair is gone: %v", err)
		}
	}
	if n := counterValue(t, on.metrics.rebootstraps); n != 1 {
		t.Errorf("%v re-bootstraps counted, want 1", n)
	}
	on.assertReportedUnasked(current.Cert)
}

// assertReportedUnasked checks that the Node reports the credentials and
// bundles the node now uses (client issuer that of clientCert), and
// answers no request.
func (on *offNode) assertReportedUnasked(clientCert *x509.Certificate) {
	t := on.t
	t.Helper()
	node, err := on.cs.CoreV1().Nodes().Get(context.Background(), "w1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := noderenewal.ReportOf(noderenewal.Request{}, clientCert, on.storedServing(), on.trust).Annotations()
	for k, v := range want {
		if node.Annotations[k] != v {
			t.Errorf("the Node's annotation %s is %q, want %q", k, node.Annotations[k], v)
		}
	}
	if v, ok := node.Annotations[v1alpha1.AnnotationCredentialsRenewed]; ok {
		t.Errorf("the Node answers request %q, which no one asked for", v)
	}
}

// pairs lists the key pairs in the cert dir.
func (on *offNode) pairs() []string {
	on.t.Helper()
	pairs, err := filepath.Glob(filepath.Join(on.path("pki"), "kubelet-*-20*.pem"))
	if err != nil || len(pairs) < 2 {
		on.t.Fatalf("key pairs %v (%v)", pairs, err)
	}
	return pairs
}

func (on *offNode) assertLogged(steps ...string) {
	on.t.Helper()
	for _, step := range steps {
		if !on.logged(step) {
			on.t.Errorf("no log line for step %q in %q", step, on.logLines())
		}
	}
}

// TestRebootstrapKubelet brings back a node that was off through a whole
// rotation, refused either way (its kubeconfig does not trust the API
// server, or the API server answers 401 to its client certificate): the
// kubeconfig is moved aside, the kubelet restarted once to bootstrap with the
// bootstrap kubeconfig, and with its new credentials the trust bundles are
// installed and, when it does not verify against the kubelet bundle, the
// serving certificate renewed and loaded with one more restart.
func TestRebootstrapKubelet(t *testing.T) {
	for _, tt := range []struct {
		name           string
		trustsServer   bool // the refused kubeconfig trusts the API server: the refusal is a 401
		servingTrusted bool // the serving certificate is already from the new kubelet CA
		wantRestarts   int
		wantCSRs       int
		pending        bool // a renewal request is pending on the Node
	}{
		{"untrusted API server", false, false, 2, 1, false},
		{"401", true, false, 2, 1, false},
		{"401, serving certificate already trusted", true, true, 1, 0, false},
		{"401, a renewal request pending", true, false, 2, 1, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			on := newOffNode(t)
			request := noderenewal.Request{Initiated: on.now, Phase: v1alpha1.RotationFinalizing}
			if tt.pending {
				patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, v1alpha1.AnnotationRenewCredentials, request)
				if _, err := on.cs.CoreV1().Nodes().Patch(context.Background(), "w1", types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			if tt.trustsServer {
				info, err := readKubeconfig(on.path("kubeconfig"))
				if err != nil {
					t.Fatal(err)
				}
				user := &clientcmdapi.AuthInfo{ClientCertificate: on.node.Manager.store.CurrentPath(), ClientKey: on.node.Manager.store.CurrentPath()}
				on.writeKubeconfig("kubeconfig", append(info.CA, on.trust.Cluster...), user)
			}
			if tt.servingTrusted {
				writeServingPair(t, on.path("pki"), on.kubelet1, on.now.Add(time.Second))
				on.served = on.storedServing()
			}
			refused, pairs := on.read("kubeconfig"), on.pairs()

			rebootstrapped, err := on.node.rebootstrapIfRefused(context.Background())
			if err != nil || !rebootstrapped {
				t.Fatalf("rebootstrapIfRefused = %v, %v; log: %q", rebootstrapped, err, on.logLines())
			}
			on.assertRebootstrapped(refused, pairs)
			if tt.pending {
				node, err := on.cs.CoreV1().Nodes().Get(context.Background(), "w1", metav1.GetOptions{})
				if err != nil {
					t.Fatal(err)
				}
				if got, ok := noderenewal.Pending(node.Annotations); !ok || got.String() != request.String() {
					t.Errorf("the pending request is no longer pending after the re-bootstrap: %+v, %v", got, ok)
				}
			}
			if csrs, restarts := on.counts(); restarts != tt.wantRestarts || csrs != tt.wantCSRs || on.bootstrapCount() != 1 {
				t.Errorf("%d restarts, %d CSRs, %d bootstraps; want %d, %d (serving) and 1", restarts, csrs, on.bootstrapCount(), tt.wantRestarts, tt.wantCSRs)
			}
			on.assertLogged("move the refused credentials aside", "restart the kubelet to bootstrap", "wait for the kubelet to bootstrap",
				"read the node trust bundles", "install the trust bundles", "renew the kubelet's serving certificate", "restart the kubelet")

			// Once done, there is nothing more to do.
			if again, err := on.node.rebootstrapIfRefused(context.Background()); again || err != nil {
				t.Errorf("a second call = %v, %v", again, err)
			}
			if _, restarts := on.counts(); restarts != tt.wantRestarts {
				t.Errorf("%d restarts after a second call, want %d", restarts, tt.wantRestarts)
			}
		})
	}
}

// TestRebootstrapNotWithoutARefusal: an API server that cannot be reached,
// times out or fails says nothing about the kubelet's credentials, which
// stay as they are.
func TestRebootstrapNotWithoutARefusal(t *testing.T) {
	for _, err := range []error{errUnreachable, errTimeout, errInternal} {
		t.Run(err.Error(), func(t *testing.T) {
			on := newOffNode(t)
			on.set(func() { on.unreachable = err })
			before := on.read("kubeconfig")
			rebootstrapped, rerr := on.node.rebootstrapIfRefused(context.Background())
			if rebootstrapped || rerr != nil {
				t.Fatalf("rebootstrapIfRefused = %v, %v", rebootstrapped, rerr)
			}
			on.assertUntouched(before)
		})
	}
}

// assertUntouched checks that the kubelet's kubeconfig is still there, as
// it was, nothing moved aside, and the kubelet not restarted.
func (on *offNode) assertUntouched(kubeconfig []byte) {
	t := on.t
	t.Helper()
	if got := on.read("kubeconfig"); !bytes.Equal(got, kubeconfig) {
		t.Error("the kubeconfig changed")
	}
	for _, aside := range []string{"kubeconfig.refused", "pki/kubelet-client-current.pem.refused"} {
		if _, err := os.Stat(on.path(aside)); !os.IsNotExist(err) {
			t.Errorf("%s was moved aside (%v)", aside, err)
		}
	}
	if current, err := (&Store{Dir: on.path("pki")}).Current(); err != nil || current == nil || !current.Cert.Equal(on.refused) {
		t.Errorf("the current client pair changed (%v)", err)
	}
	if _, restarts := on.counts(); restarts != 0 {
		t.Errorf("%d restarts, want none", restarts)
	}
	if _, err := os.Stat(filepath.Join(on.path("pki"), progressFile)); !os.IsNotExist(err) {
		t.Errorf("a progress record was written (%v)", err)
	}
}

// TestWatchRenewalsLeavesTheKubeletAloneWhenTheAPIServerIsAway: the failed
// watch is retried, with backoff, and nothing else happens.
func TestWatchRenewalsLeavesTheKubeletAloneWhenTheAPIServerIsAway(t *testing.T) {
	on := newOffNode(t)
	on.set(func() { on.unreachable = errUnreachable })
	before := on.read("kubeconfig")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- on.node.WatchRenewals(ctx) }()
	// The failed watch is logged, then waited out on the clock (the only
	// timer on it: newTestNode starts from none).
	on.awaitLogged("watching node w1: ", "connection refused", "(retrying in ")
	awaitWaiters(t, on.clk, 1)
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("WatchRenewals = %v, want it canceled", err)
	}
	on.assertUntouched(before)
}

// TestRebootstrapNeedsAUsableBootstrapKubeconfig: while the bootstrap
// kubeconfig cannot replace the refused credentials, nothing is moved or
// restarted, and every attempt says why and what the machine needs; a fresh
// bootstrap kubeconfig delivered later is picked up by the next attempt.
func TestRebootstrapNeedsAUsableBootstrapKubeconfig(t *testing.T) {
	for _, tt := range []struct {
		name string
		// spoil makes the bootstrap kubeconfig unusable.
		spoil func(*offNode)
		why   string
	}{
		{"expired token", func(on *offNode) {
			on.writeKubeconfig("bootstrap-kubeconfig", on.trust.Cluster, &clientcmdapi.AuthInfo{Token: "abcdef.0123456789abcdef"})
		}, "its token is refused (the API server answers 401 Unauthorized)"},
		{"old CA", func(on *offNode) {
			info, err := readKubeconfig(on.path("kubeconfig"))
			if err != nil {
				on.t.Fatal(err)
			}
			on.writeKubeconfig("bootstrap-kubeconfig", info.CA, &clientcmdapi.AuthInfo{Token: freshToken})
		}, "it does not trust the API server"},
		// Copied from a Secret the tenant writes: the agent, root on the
		// node, runs no plugin it names.
		{"a credential plugin", func(on *offNode) {
			on.writeKubeconfig("bootstrap-kubeconfig", on.trust.Cluster, &clientcmdapi.AuthInfo{Exec: &clientcmdapi.ExecConfig{
				Command: "/bin/sh", Args: []string{"-c", "echo a token"}, APIVersion: "client.authentication.k8s.io/v1",
				InteractiveMode: clientcmdapi.NeverExecInteractiveMode}})
		}, `user "default-auth" names a credential plugin (exec), which the node agent does not use from a bootstrap kubeconfig`},
		// clientcmd picks the user named "" when there is no context:
		// refused as well.
		{"a credential plugin without a context", func(on *offNode) {
			cfg := clientcmdapi.NewConfig()
			cfg.Clusters[""] = &clientcmdapi.Cluster{Server: testServer, CertificateAuthorityData: on.trust.Cluster}
			cfg.AuthInfos[""] = &clientcmdapi.AuthInfo{Exec: &clientcmdapi.ExecConfig{
				Command: "/bin/sh", Args: []string{"-c", "echo a token"}, APIVersion: "client.authentication.k8s.io/v1",
				InteractiveMode: clientcmdapi.NeverExecInteractiveMode}}
			if err := clientcmd.WriteToFile(*cfg, on.path("bootstrap-kubeconfig")); err != nil {
				on.t.Fatal(err)
			}
		}, `user "" names a credential plugin (exec), which the node agent does not use from a bootstrap kubeconfig`},
		// Nor does it open, as root, a file of credentials the tenant names
		// (a FIFO here: opening it would block the agent).
		{"a token file", func(on *offNode) {
			if err := syscall.Mkfifo(on.path("token"), 0o600); err != nil {
				on.t.Fatal(err)
			}
			on.writeKubeconfig("bootstrap-kubeconfig", on.trust.Cluster, &clientcmdapi.AuthInfo{TokenFile: on.path("token")})
		}, `user "default-auth" names a token file, which the node agent does not use`},
		{"none", func(on *offNode) {
			if err := os.Remove(on.path("bootstrap-kubeconfig")); err != nil {
				on.t.Fatal(err)
			}
		}, "no such file"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			on := newOffNode(t)
			fresh := on.read("bootstrap-kubeconfig")
			tt.spoil(on)
			before, pairs := on.read("kubeconfig"), on.pairs()

			rebootstrapped, err := on.node.rebootstrapIfRefused(context.Background())
			if rebootstrapped || !errors.Is(err, errBootstrapKubeconfigUnusable) {
				t.Fatalf("rebootstrapIfRefused = %v, %v", rebootstrapped, err)
			}
			on.assertUntouched(before)

			// Through WatchRenewals: one log line per attempt, then the
			// provisioner delivers a fresh bootstrap kubeconfig.
			on.watchRenewals(func() {
				on.awaitLogged("kubelet re-bootstrap: the kubelet's credentials are refused (", "and the bootstrap kubeconfig "+on.path("bootstrap-kubeconfig")+" cannot replace them: ",
					tt.why, "the machine needs a fresh bootstrap kubeconfig", "the Secret <cluster>-bootstrap-kubeconfig in the Cluster's namespace", "(retrying in ")
				// The attempt is waited out on the clock (the only timer on
				// it: newTestNode starts from none); the step must come after.
				awaitWaiters(t, on.clk, 1)
				on.assertUntouched(before)
				mustWriteFile(t, on.path("bootstrap-kubeconfig"), string(fresh), 0o600)
				on.clk.Step(longestFirstDelay(renewalBackoff))
			})
			on.assertRebootstrapped(before, pairs)
			if counterValue(t, on.metrics.renewErrors) != 1 {
				t.Errorf("%v errors counted, want 1 (the attempt through WatchRenewals)", counterValue(t, on.metrics.renewErrors))
			}
		})
	}
}

// TestRebootstrapWaitsForALastingRefusal: one refusal is not enough; the
// kubelet's credentials are moved aside only once they have been refused
// for RefusalGrace, with no answer in between that took them.
func TestRebootstrapWaitsForALastingRefusal(t *testing.T) {
	on := newOffNode(t)
	on.node.RefusalGrace = 10 * time.Second
	before := on.read("kubeconfig")
	attempt := func() bool {
		t.Helper()
		rebootstrapped, err := on.node.rebootstrapIfRefused(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return rebootstrapped
	}
	if attempt() {
		t.Fatal("re-bootstrapped on the first refusal")
	}
	on.clk.Step(9 * time.Second)
	if attempt() {
		t.Fatal("re-bootstrapped before the refusal lasted 10s")
	}
	on.assertUntouched(before)
	// An answer that does not refuse in between starts the count again.
	on.set(func() { on.unreachable = errUnreachable })
	if attempt() {
		t.Fatal("re-bootstrapped while the API server cannot be reached")
	}
	on.set(func() { on.unreachable = nil })
	on.clk.Step(5 * time.Second)
	if attempt() {
		t.Fatal("re-bootstrapped on the first refusal after an answer that did not refuse")
	}
	on.assertUntouched(before)
	on.clk.Step(10 * time.Second)
	if !attempt() {
		t.Fatalf("not re-bootstrapped once the refusal lasted 10s; log: %q", on.logLines())
	}
	if !on.loggedLine("credentials are refused; re-bootstrapping once that has lasted 10s (9s so far)") {
		t.Errorf("the wait is not logged: %q", on.logLines())
	}
}

// TestAWatchTheAPIServerTakesStartsTheRefusalCountAgain: a refusal (an old
// API server replica, still draining, that does not know the new client
// CA), then hours of watches the API server took: the next refusal is a
// first one, not one that has lasted hours, and moves nothing aside.
func TestAWatchTheAPIServerTakesStartsTheRefusalCountAgain(t *testing.T) {
	on := newOffNode(t)
	on.node.RefusalGrace = 10 * time.Second
	before := on.read("kubeconfig")
	retry := newBackoff(renewalBackoff)
	refused := errors.New("watching the Node: Unauthorized")
	if on.node.rebootstrapTakesOver(context.Background(), nil, refused, retry, newBackoff(refusedRenewalBackoff)) {
		t.Fatal("re-bootstrapped on the first refusal")
	}
	w := watch.NewFake()
	defer w.Stop()
	if on.node.rebootstrapTakesOver(context.Background(), w, nil, retry, newBackoff(refusedRenewalBackoff)) {
		t.Fatal("took over after a watch the API server took")
	}
	on.clk.Step(time.Hour)
	if on.node.rebootstrapTakesOver(context.Background(), nil, refused, retry, newBackoff(refusedRenewalBackoff)) {
		t.Fatalf("re-bootstrapped on the first refusal after an hour of watches; log: %q", on.logLines())
	}
	on.assertUntouched(before)
}

// TestRebootstrapResumesBetweenTheMoves: an agent that died after it moved
// the client pair aside and before the kubeconfig leaves a kubelet that
// bootstraps anyway (its kubeconfig names a pair that is not there); the
// next agent restarts it and finishes without moving anything else.
func TestRebootstrapResumesBetweenTheMoves(t *testing.T) {
	on := newOffNode(t)
	pairs := on.pairs()
	record := &progress{Request: rebootstrapRecord, CredentialsMovedAside: true}
	if err := record.save(on.path("pki")); err != nil {
		t.Fatal(err)
	}
	current := (&Store{Dir: on.path("pki")}).CurrentPath()
	if err := os.Rename(current, refusedPath(current)); err != nil {
		t.Fatal(err)
	}

	on.restartAgent()
	on.watchRenewals(nil)
	if _, err := os.Stat(on.path("kubeconfig.refused")); !os.IsNotExist(err) {
		t.Errorf("the kubeconfig was moved aside after all (%v)", err)
	}
	if info, err := readKubeconfig(on.path("kubeconfig")); err != nil || !bytes.Equal(info.CA, on.trust.Cluster) {
		t.Errorf("the kubeconfig the kubelet wrote does not trust the published cluster bundle (%v)", err)
	}
	if got := on.node.Manager.Current(); got == nil || samePublicKey(got.Cert.PublicKey, on.refused.PublicKey) {
		t.Error("no new client certificate for a new key")
	}
	for _, pair := range pairs {
		if _, err := os.Stat(pair); err != nil {
			t.Errorf("a key pair is gone: %v", err)
		}
	}
	if _, restarts := on.counts(); restarts != 2 || on.bootstrapCount() != 1 {
		t.Errorf("%d restarts, %d bootstraps; want 2 (bootstrap, serving certificate) and 1", restarts, on.bootstrapCount())
	}
}

// TestRebootstrapResumes interrupts a re-bootstrap at each stage, as a
// crash of the agent would, and lets a new agent process take it up through
// WatchRenewals: it does nothing twice that it need not (no second move,
// no second restart to bootstrap, no second serving CSR) and finishes.
func TestRebootstrapResumes(t *testing.T) {
	errRestart := errors.New("systemctl: exit status 1")
	for _, tt := range []struct {
		name string
		// interrupt sets the fault up; afterwards, mend repairs it.
		interrupt, mend func(*offNode)
		onFakeTime      bool
		wantFirstError  string
		wantRestarts    int // after both attempts
	}{
		{
			name:           "after the move, before the restart",
			interrupt:      func(on *offNode) { on.restartErrs = []error{errRestart} },
			wantFirstError: "restart the kubelet to bootstrap: " + errRestart.Error(),
			wantRestarts:   2,
		},
		{
			name:           "restarted, not yet bootstrapped",
			interrupt:      func(on *offNode) { on.slowToStart = true },
			mend:           func(on *offNode) { on.slowToStart = false; on.bootstrap() },
			onFakeTime:     true,
			wantFirstError: "wait for the kubelet to bootstrap: the kubelet has not bootstrapped within 5m0s",
			wantRestarts:   2,
		},
		{
			name:           "bootstrapped, the restart for the serving certificate fails",
			interrupt:      func(on *offNode) { on.restartErrs = []error{nil, errRestart} },
			wantFirstError: "bring the kubelet in line with the node trust bundles: restart the kubelet: " + errRestart.Error(),
			wantRestarts:   2,
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			on := newOffNode(t)
			refused, pairs := on.read("kubeconfig"), on.pairs()
			on.set(func() { tt.interrupt(on) })
			attempt := func() error {
				_, err := on.node.rebootstrapIfRefused(context.Background())
				return err
			}
			var err error
			if tt.onFakeTime {
				err = on.onFakeTime(attempt)
			} else {
				err = attempt()
			}
			if err == nil || !strings.HasPrefix(err.Error(), tt.wantFirstError) {
				t.Fatalf("first attempt: %v, want %q", err, tt.wantFirstError)
			}
			if !rebootstrapUnfinished(on.path("pki")) {
				t.Fatal("no unfinished re-bootstrap on record")
			}
			if tt.mend != nil {
				tt.mend(on)
			}

			on.restartAgent()
			on.watchRenewals(nil)
			on.assertRebootstrapped(refused, pairs)
			if csrs, restarts := on.counts(); restarts != tt.wantRestarts || csrs != 1 || on.bootstrapCount() != 1 {
				t.Errorf("%d restarts, %d CSRs, %d bootstraps; want %d, 1 (serving) and 1", restarts, csrs, on.bootstrapCount(), tt.wantRestarts)
			}
		})
	}
}

// TestCredentialsBootstrappedAndRefusedSinceAreMovedAsideAgain: a
// re-bootstrap whose last step keeps failing (its record stays) does not take
// the refusal of the credentials the kubelet bootstrapped with, once the API
// server took them, for those of its own bootstrap refused at once: it moves
// them aside and bootstraps again. Before, it waited for ever ("refused
// too"), and only deleting the record brought the node back.
func TestCredentialsBootstrappedAndRefusedSinceAreMovedAsideAgain(t *testing.T) {
	on := newOffNode(t)
	errRestart := errors.New("systemctl: exit status 1")
	on.set(func() { on.restartErrs = []error{nil, errRestart} }) // bootstraps, then the restart for the serving certificate fails
	if _, err := on.node.rebootstrapIfRefused(context.Background()); err == nil ||
		!strings.HasPrefix(err.Error(), "bring the kubelet in line with the node trust bundles: restart the kubelet: ") {
		t.Fatalf("first attempt: %v, want the last step failed", err)
	}
	if on.bootstrapCount() != 1 || !rebootstrapUnfinished(on.path("pki")) {
		t.Fatalf("%d bootstraps, unfinished %t; want one, and the record kept", on.bootstrapCount(), rebootstrapUnfinished(on.path("pki")))
	}
	bootstrapped := on.node.Manager.Current().Cert
	on.set(func() { on.refused = bootstrapped }) // a later rotation completed without the node, say

	if _, err := on.node.rebootstrapIfRefused(context.Background()); err != nil {
		t.Fatalf("second attempt: %v, want a new re-bootstrap", err)
	}
	if on.bootstrapCount() != 2 {
		t.Errorf("%d bootstraps, want 2", on.bootstrapCount())
	}
	if refusedPair, err := parsePair(on.read("pki/kubelet-client-current.pem.refused")); err != nil || !refusedPair.Cert.Equal(bootstrapped) {
		t.Errorf("kubelet-client-current.pem.refused is not the pair refused since (%v)", err)
	}
	if current := on.node.Manager.Current().Cert; current.Equal(bootstrapped) {
		t.Error("the client certificate is still the one refused")
	}
	if rebootstrapUnfinished(on.path("pki")) {
		t.Error("the re-bootstrap is still on record")
	}
}

// TestAWatchThatEndsAtOnceIsWatchedAgainWithBackoff: a watch of the Node that
// the API server (or a proxy in between) ends at once, before any renewal, is
// a failed one: the next waits with backoff, not in a tight loop. One that
// lasted shortWatch is followed by the next at once.
func TestAWatchThatEndsAtOnceIsWatchedAgainWithBackoff(t *testing.T) {
	on := newOffNode(t)
	on.set(func() { on.refused = nil }) // the API server takes the kubelet's credentials
	stop := on.startWatchRenewals()
	defer stop()
	// endWatch waits for the next watch and ends it, as the API server does,
	// once it has lasted lasted.
	endWatch := func(lasted time.Duration) {
		t.Helper()
		select {
		case <-on.watches:
		case <-time.After(10 * time.Second):
			t.Fatalf("no watch of the Node after 10s; log: %q", on.logLines())
		}
		on.clk.Step(lasted)
		on.mu.Lock()
		on.watchers[len(on.watchers)-1].Stop()
		on.mu.Unlock()
	}

	endWatch(0)
	deadline := time.Now().Add(10 * time.Second)
	for on.clk.Waiters() == 0 {
		if len(on.watches) > 0 || time.Now().After(deadline) {
			t.Fatalf("after a watch that ended at once, %d more watches and no wait on the clock", len(on.watches))
		}
		time.Sleep(time.Millisecond)
	}
	on.awaitLogged("watching node w1: the watch ended within 10s (retrying in ")
	on.clk.Step(longestFirstDelay(renewalBackoff))

	// The second watch lasts shortWatch: the third follows at once.
	endWatch(shortWatch)
	select {
	case <-on.watches:
	case <-time.After(10 * time.Second):
		t.Fatalf("a watch that lasted %s is not followed by the next at once; log: %q", shortWatch, on.logLines())
	}
}

// TestRebootstrapWaitsForARenewalOfAnotherProcess: while another process (a
// `refresh-certs run`) holds the renewal lock, a refused kubelet's credentials
// are not moved aside and nothing is recorded; once it is done, the next
// attempt re-bootstraps.
func TestRebootstrapWaitsForARenewalOfAnotherProcess(t *testing.T) {
	on := newOffNode(t)
	refused, pairs := on.read("kubeconfig"), on.pairs()
	other := NewManager(on.node.Manager.cfg)
	unlock, err := other.lockRenewals()
	if err != nil {
		t.Fatal(err)
	}
	rebootstrapped, err := on.node.rebootstrapIfRefused(context.Background())
	if rebootstrapped || !errors.Is(err, ErrRenewing) {
		t.Fatalf("rebootstrapIfRefused while another process renews = %v, %v; want ErrRenewing", rebootstrapped, err)
	}
	on.assertUntouched(refused)

	unlock()
	if rebootstrapped, err := on.node.rebootstrapIfRefused(context.Background()); !rebootstrapped || err != nil {
		t.Fatalf("rebootstrapIfRefused once the other process is done = %v, %v; log: %q", rebootstrapped, err, on.logLines())
	}
	on.assertRebootstrapped(refused, pairs)
}

// TestADeniedServingRequestOfAReBootstrapIsAskedForAgainRarely: the
// approver denies the new serving certificate a re-bootstrap's last step
// asks for (it pinned the addresses the node had before it went off). The
// agent asks again, as a renewal does, at most every 15 minutes: over an
// hour, eight serving CSRs at most, not one a minute.
func TestADeniedServingRequestOfAReBootstrapIsAskedForAgainRarely(t *testing.T) {
	on := newOffNode(t)
	on.mu.Lock()
	on.deny = true
	on.mu.Unlock()
	stop := on.startWatchRenewals()
	defer stop()
	for range 60 {
		awaitWaiters(t, on.clk, 1)
		on.clk.Step(time.Minute)
	}
	if csrs, _ := on.counts(); csrs < 2 || csrs > 8 {
		t.Errorf("%d serving CSRs in an hour of denials, want from 2 to 8; log: %q", csrs, on.logLines())
	}
}

// TestCredentialsTheAPIServerCouldNotBeAskedAboutAreNotTakenAsAccepted: a
// kubelet that bootstrapped while the API server could not be asked is not
// recorded as bootstrapped; when the API server, reachable again, refuses the
// new credentials too, the agent waits rather than move them aside and have
// the kubelet bootstrap once more.
func TestCredentialsTheAPIServerCouldNotBeAskedAboutAreNotTakenAsAccepted(t *testing.T) {
	on := newOffNode(t)
	restart := on.node.Kubelet.Restart
	on.node.Kubelet.Restart = func(ctx context.Context) error {
		err := restart(ctx)
		on.set(func() { on.unreachable = errUnreachable }) // away as the kubelet bootstraps
		return err
	}
	attempt := func() error {
		_, err := on.node.rebootstrapIfRefused(context.Background())
		return err
	}
	if err := on.onFakeTime(attempt); err == nil || !strings.Contains(err.Error(), "the kubelet has not bootstrapped within") {
		t.Fatalf("first attempt: %v, want no bootstrap seen taken", err)
	}
	on.node.Kubelet.Restart = restart
	bootstrapped := on.node.Manager.Current().Cert
	on.set(func() { on.unreachable, on.refused = nil, bootstrapped }) // from a signer the API server does not trust yet, say
	if err := attempt(); err == nil || !strings.Contains(err.Error(), "refused too") {
		t.Fatalf("second attempt: %v, want the new credentials refused too", err)
	}
	if on.bootstrapCount() != 1 {
		t.Errorf("%d bootstraps, want 1: the credentials the kubelet bootstrapped with were moved aside", on.bootstrapCount())
	}
}
