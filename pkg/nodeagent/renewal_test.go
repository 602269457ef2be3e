package nodeagent

import (
	"bytes"
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
	"github.com/carousel-dev/carousel/pkg/bootstrap"
	"github.com/carousel-dev/carousel/pkg/noderenewal"
	"github.com/carousel-dev/carousel/pkg/pki"
)

// testNode is a node with a real kubelet's files on disk (as the kubelet
// leaves them after TLS bootstrapping, all on the CA0s), a fake API server
// and a fake kubelet service.
type testNode struct {
	t        *testing.T
	dir      string
	now      time.Time
	clk      *clocktesting.FakeClock
	cs       *fake.Clientset
	node     *Node
	req      noderenewal.Request
	trust    noderenewal.Trust // what Carousel publishes for the request
	kubelet1 *pki.KeyPair      // the new kubelet CA

	mu         sync.Mutex
	csrs       int   // CSRs created
	restarts   int   // successful restarts
	failCSR    int   // CSR creations still to fail
	unanswered int   // CSR creations still to leave pending
	failReport int   // Node patches still to fail
	restartErr error // returned by the next restart, then cleared
	unhealthy  bool  // healthz fails
	served     *x509.Certificate
	// loadsNothing: a restart leaves the kubelet serving what it served.
	loadsNothing bool
	// deny: every CSR is denied as it is created.
	deny bool
	// refuseIssued: the API server refuses a client certificate it is asked
	// to review before the agent stores it (issued from a CA it does not
	// trust).
	refuseIssued bool
	// signServing, when set, answers serving CSRs instead of answer.
	signServing func(*certificatesv1.CertificateSigningRequest)
	logs        []string
}

const testServer = "https://10.0.0.1:6443"

// newTestNode sets the node up for a renewal in phase: in Preparing
// Carousel publishes CA0+CA1 bundles, in Finalizing CA1 only.
func newTestNode(t *testing.T, phase v1alpha1.CARotationPhase) *testNode {
	t.Helper()
	now := time.Now()
	tn := &testNode{t: t, dir: t.TempDir(), now: now, clk: clocktesting.NewFakeClock(now),
		req: noderenewal.Request{Initiated: now.Add(-time.Hour).UTC().Truncate(time.Second), Phase: phase}}
	cluster0, cluster1 := newTestCA(t, "cluster-ca-0", now), newTestCA(t, "cluster-ca-1", now)
	kubelet0 := newTestCA(t, "kubelet-ca-0", now)
	tn.kubelet1 = newTestCA(t, "kubelet-ca-1", now)
	tn.trust = noderenewal.Trust{Cluster: append(cluster0.CertPEM(), cluster1.CertPEM()...), Kubelet: append(kubelet0.CertPEM(), tn.kubelet1.CertPEM()...)}
	if phase == v1alpha1.RotationFinalizing {
		tn.trust = noderenewal.Trust{Cluster: cluster1.CertPEM(), Kubelet: tn.kubelet1.CertPEM()}
	}

	// The kubelet's files.
	certDir := tn.path("pki")
	store := &Store{Dir: certDir}
	key, err := store.PendingKey(pki.ECDSAP256)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.Update(issue(t, key), key, now.Add(-time.Minute)); err != nil {
		t.Fatal(err)
	}
	writeServingPair(t, certDir, kubelet0, now)
	tn.served = tn.storedServing()
	tn.writeKubeconfig("kubeconfig", cluster0.CertPEM(), &clientcmdapi.AuthInfo{ClientCertificate: store.CurrentPath(), ClientKey: store.CurrentPath()})
	tn.writeKubeconfig("bootstrap-kubeconfig", cluster0.CertPEM(), &clientcmdapi.AuthInfo{Token: "abcdef.0123456789abcdef"})
	mustWriteFile(t, tn.path("ca.crt"), string(kubelet0.CertPEM()), 0o644)

	// The API server: the Node, asked to renew, and the node trust ConfigMap.
	tn.cs = fake.NewClientset(
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "w1", Annotations: map[string]string{v1alpha1.AnnotationRenewCredentials: tn.req.String()}},
			Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.0.0.5"}, {Type: corev1.NodeHostName, Address: "w1"}}}},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceSystem, Name: bootstrap.NodeTrustConfigMap},
			Data: map[string]string{bootstrap.NodeTrustKeyClusterCA: string(tn.trust.Cluster), bootstrap.NodeTrustKeyKubeletCA: string(tn.trust.Kubelet)}},
	)
	tn.cs.PrependReactor("create", "certificatesigningrequests", func(a k8stesting.Action) (bool, runtime.Object, error) {
		tn.mu.Lock()
		defer tn.mu.Unlock()
		if tn.failCSR > 0 {
			tn.failCSR--
			return true, nil, errors.New("the API server is away")
		}
		tn.csrs++
		csr := a.(k8stesting.CreateAction).GetObject().(*certificatesv1.CertificateSigningRequest)
		if tn.deny {
			refuse(csr, certificatesv1.CertificateDenied)
			return false, nil, nil
		}
		if tn.unanswered > 0 {
			tn.unanswered--
			return false, nil, nil
		}
		tn.answer(csr)
		return false, nil, nil // stored, with its certificate, by the tracker
	})
	tn.cs.PrependReactor("patch", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
		tn.mu.Lock()
		defer tn.mu.Unlock()
		if tn.failReport > 0 {
			tn.failReport--
			return true, nil, errors.New("the API server is away")
		}
		return false, nil, nil
	})

	tn.cs.PrependReactor("create", "selfsubjectreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		return true, a.(k8stesting.CreateAction).GetObject(), nil
	})

	m := NewManager(Config{Mode: ModeKubelet, NodeName: "w1", CertDir: certDir, KubeconfigPath: tn.path("kubeconfig"),
		BootstrapKubeconfigPath: tn.path("bootstrap-kubeconfig"), Clock: tn.clk})
	m.newClient = tn.client
	tn.node = &Node{Manager: m, Logf: tn.logf, Kubelet: &Kubelet{
		Config:  &KubeletConfig{ClientCAFile: tn.path("ca.crt"), HealthzURL: "http://127.0.0.1:10248/healthz"},
		Restart: tn.restart, Healthy: tn.healthy, Serves: tn.serves,
	}}
	if err := m.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	// Start's deadline timer goes with its goroutine: tests that wait for
	// the code under test to wait on the clock count from none.
	awaitNoWaiters(t, tn.clk)
	return tn
}

// client is the Manager's newClient: the fake API server, which refuses a
// client certificate given as data (one not stored yet) when refuseIssued.
func (tn *testNode) client(cfg *rest.Config) (kubernetes.Interface, error) {
	tn.mu.Lock()
	defer tn.mu.Unlock()
	if tn.refuseIssued && len(cfg.CertData) > 0 {
		return refusingReviews{Interface: tn.cs}, nil
	}
	return tn.cs, nil
}

// answer approves and signs csr as Carousel does: a serving one with the new
// kubelet CA, a client one with testCA.
func (tn *testNode) answer(csr *certificatesv1.CertificateSigningRequest) {
	switch {
	case csr.Spec.SignerName != certificatesv1.KubeletServingSignerName:
		approve(tn.t, csr, time.Hour, tn.clk.Now())
	case tn.signServing != nil:
		tn.signServing(csr)
	default:
		sign(tn.t, csr, tn.kubelet1, x509.ExtKeyUsageServerAuth, time.Hour, tn.clk.Now())
	}
}

func (tn *testNode) path(name string) string { return filepath.Join(tn.dir, name) }

func (tn *testNode) writeKubeconfig(name string, ca []byte, user *clientcmdapi.AuthInfo) {
	writeTestKubeconfig(tn.t, tn.path(name), &clientcmdapi.Cluster{Server: testServer, CertificateAuthorityData: ca}, user)
}

func (tn *testNode) logf(format string, args ...any) {
	tn.mu.Lock()
	defer tn.mu.Unlock()
	tn.logs = append(tn.logs, strings.TrimSpace(fmt.Sprintf(format, args...)))
}

// restart plays the kubelet's restart: it loads the serving pair stored
// then, and serves it from then on.
func (tn *testNode) restart(context.Context) error {
	tn.mu.Lock()
	defer tn.mu.Unlock()
	if err := tn.restartErr; err != nil {
		tn.restartErr = nil
		return err
	}
	tn.restarts++
	if !tn.loadsNothing {
		tn.served = tn.storedServing()
	}
	return nil
}

func (tn *testNode) storedServing() *x509.Certificate {
	kp, err := (&Store{Dir: tn.path("pki"), Name: ServingStore}).Current()
	if err != nil || kp == nil {
		tn.t.Errorf("no serving pair stored (%v)", err)
		return nil
	}
	return kp.Cert
}

// serves is the certificate the kubelet serves: the one it loaded at its
// last start.
func (tn *testNode) serves(context.Context) (*x509.Certificate, error) {
	tn.mu.Lock()
	defer tn.mu.Unlock()
	return tn.served, nil
}

func (tn *testNode) healthy(context.Context) error {
	tn.mu.Lock()
	defer tn.mu.Unlock()
	if tn.unhealthy {
		return errors.New("connection refused")
	}
	return nil
}

func (tn *testNode) set(f func()) {
	tn.mu.Lock()
	defer tn.mu.Unlock()
	f()
}

func (tn *testNode) counts() (csrs, restarts int) {
	tn.mu.Lock()
	defer tn.mu.Unlock()
	return tn.csrs, tn.restarts
}

// assertRenewed checks what the node now has and reports against what
// Carousel expects: the published bundles in the kubeconfigs and the
// clientCAFile, a client certificate from the client CA, the request
// answered, no progress record left.
func (tn *testNode) assertRenewed() {
	t := tn.t
	t.Helper()
	for _, name := range []string{"kubeconfig", "bootstrap-kubeconfig"} {
		info, err := readKubeconfig(tn.path(name))
		if err != nil {
			t.Fatal(err)
		}
		if string(info.CA) != string(tn.trust.Cluster) || info.Server != testServer {
			t.Errorf("%s: server %s and a CA that is not the published cluster bundle", name, info.Server)
		}
	}
	if cfg, err := clientcmd.LoadFromFile(tn.path("bootstrap-kubeconfig")); err != nil || cfg.AuthInfos["default-auth"].Token != "abcdef.0123456789abcdef" {
		t.Errorf("the bootstrap kubeconfig lost its token (%v)", err)
	}
	if got, err := os.ReadFile(tn.path("ca.crt")); err != nil || string(got) != string(tn.trust.Kubelet) {
		t.Errorf("clientCAFile is not the published kubelet bundle (%v)", err)
	}
	node, err := tn.cs.CoreV1().Nodes().Get(context.Background(), "w1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := noderenewal.Expected(tn.req, testCA.Cert, tn.kubelet1.Cert, tn.trust)
	if got := noderenewal.Assess(node.Annotations, want); got != noderenewal.Done {
		t.Errorf("Carousel assesses the node %s, annotations %v, want %+v", got, node.Annotations, want)
	}
	if _, pending := noderenewal.Pending(node.Annotations); pending {
		t.Error("the request is still pending")
	}
	if _, err := os.Stat(filepath.Join(tn.path("pki"), progressFile)); !os.IsNotExist(err) {
		t.Errorf("the progress record is still there (%v)", err)
	}
}

func (tn *testNode) servingTarget() string {
	target, _ := os.Readlink(filepath.Join(tn.path("pki"), servingCurrentFile))
	return target
}

// TestRenewKubelet carries out a request in each phase: the bundles are
// installed, the client and the serving certificates renewed (the serving
// one also in Preparing, where the old one still verifies against the
// bundle but is not from the kubelet CA that signs now), and the kubelet
// restarted once.
func TestRenewKubelet(t *testing.T) {
	for _, tt := range []struct {
		phase          v1alpha1.CARotationPhase
		servingRenewed bool
	}{
		{v1alpha1.RotationPreparing, true},
		{v1alpha1.RotationFinalizing, true},
	} {
		t.Run(string(tt.phase), func(t *testing.T) {
			tn := newTestNode(t, tt.phase)
			before := tn.servingTarget()
			oldClient := tn.node.Manager.Current().Cert
			if err := tn.node.renew(context.Background(), tn.req); err != nil {
				t.Fatal(err)
			}
			tn.assertRenewed()
			if csrs, restarts := tn.counts(); csrs != 2 || restarts != 1 {
				t.Errorf("%d CSRs and %d restarts, want 2 (client and serving) and 1", csrs, restarts)
			}
			if tn.node.Manager.Current().Cert.Equal(oldClient) {
				t.Error("the client certificate was not renewed")
			}
			if renewed := tn.servingTarget() != before; renewed != tt.servingRenewed {
				t.Errorf("serving pair renewed: %v, want %v", renewed, tt.servingRenewed)
			}
			state, why, err := checkServing(filepath.Join(tn.path("pki"), servingCurrentFile), tn.trust.Kubelet, tn.clk.Now())
			if err != nil || state != servingTrusted {
				t.Errorf("the serving certificate is %s against the new kubelet bundle (%v, %v)", state, why, err)
			}
			for _, step := range []string{"read the node trust bundles", checkServerStep, "install the trust bundles", "renew the client certificate",
				"renew the kubelet's serving certificate", "restart the kubelet", "wait for the kubelet", "report on the Node"} {
				if !tn.logged(step) {
					t.Errorf("no log line for step %q in %q", step, tn.logs)
				}
			}
		})
	}
}

// logged says whether a log line reports step.
func (tn *testNode) logged(step string) bool { return tn.loggedLine(": " + step + ": ") }

func (tn *testNode) logLines() []string {
	tn.mu.Lock()
	defer tn.mu.Unlock()
	return append([]string(nil), tn.logs...)
}

// awaitLogged waits (in real time, for the goroutines under test) until a
// log line holds all of parts.
func (tn *testNode) awaitLogged(parts ...string) {
	tn.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !tn.loggedLine(parts...) {
		if time.Now().After(deadline) {
			tn.t.Fatalf("no log line with %q after 10s in %q", parts, tn.logLines())
		}
		time.Sleep(time.Millisecond)
	}
}

// loggedLine says whether a log line holds all of parts.
func (tn *testNode) loggedLine(parts ...string) bool {
	for _, l := range tn.logLines() {
		all := true
		for _, p := range parts {
			all = all && strings.Contains(l, p)
		}
		if all {
			return true
		}
	}
	return false
}

// TestADeniedRenewalIsAskedForAgainRarely: the approver denies every CSR of
// a renewal Carousel requested. The agent asks again (with a new key, a new
// CSR), but at most every 15 minutes, not every minute like a renewal that
// failed for another reason: over an hour, eight CSRs at most (at 0, 1, 3, 7,
// 15, 30, 45 and 60 minutes without jitter), where the one-minute cap of the
// other failures made 33 in a run.
func TestADeniedRenewalIsAskedForAgainRarely(t *testing.T) {
	tn := newTestNode(t, v1alpha1.RotationPreparing)
	tn.mu.Lock()
	tn.deny = true
	tn.mu.Unlock()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = tn.node.WatchRenewals(ctx) }()
	defer func() { cancel(); <-done }()
	for range 60 {
		awaitWaiters(t, tn.clk, 1)
		tn.clk.Step(time.Minute)
	}
	if csrs, _ := tn.counts(); csrs < 2 || csrs > 8 {
		t.Errorf("%d CSRs in an hour of denials, want from 2 to 8", csrs)
	}
}

// TestAClientCertificateTheAPIServerRefusesIsNotInstalled: a signer ahead of
// the API server the node reaches (or a replica rolled back) issues a
// client certificate that API server refuses. The kubelet's pair on disk
// stays the one it works with, nothing is restarted, and the agent does not
// take that pair for refused credentials; once the API server accepts the
// certificate, the renewal installs it, from the same CSR.
func TestAClientCertificateTheAPIServerRefusesIsNotInstalled(t *testing.T) {
	tn := newTestNode(t, v1alpha1.RotationPreparing)
	m := tn.node.Manager
	current := func() string {
		target, err := os.Readlink(m.store.CurrentPath())
		if err != nil {
			t.Fatal(err)
		}
		return target
	}
	before, oldClient := current(), m.Current().Cert
	tn.mu.Lock()
	tn.refuseIssued = true
	tn.mu.Unlock()

	err := tn.node.renew(context.Background(), tn.req)
	if err == nil || !strings.Contains(err.Error(), "renew the client certificate") || !strings.Contains(err.Error(), "keeping the current one") {
		t.Fatalf("renewal with a refused certificate = %v, want an error at renew the client certificate", err)
	}
	if after := current(); after != before {
		t.Errorf("the kubelet's pair is now %s, was %s", after, before)
	}
	if !m.Current().Cert.Equal(oldClient) {
		t.Error("the agent uses the refused certificate")
	}
	if _, restarts := tn.counts(); restarts != 0 {
		t.Errorf("%d restarts, want none", restarts)
	}
	if rebootstrapped, err := tn.node.rebootstrapIfRefused(context.Background()); rebootstrapped || err != nil {
		t.Errorf("rebootstrapIfRefused = %v, %v: the kubelet's credentials are not refused", rebootstrapped, err)
	}

	tn.mu.Lock()
	tn.refuseIssued = false
	tn.mu.Unlock()
	if err := tn.node.renew(context.Background(), tn.req); err != nil {
		t.Fatal(err)
	}
	tn.assertRenewed()
	if m.Current().Cert.Equal(oldClient) || current() == before {
		t.Error("the client certificate was not renewed once the API server accepts it")
	}
	csrs, err := tn.cs.CertificatesV1().CertificateSigningRequests().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	clients := 0
	for _, csr := range csrs.Items {
		if csr.Spec.SignerName == certificatesv1.KubeAPIServerClientKubeletSignerName {
			clients++
		}
	}
	if clients != 1 {
		t.Errorf("%d client CSRs, want the one the refused certificate was issued for", clients)
	}
}

// TestAnUnansweredCSRHoldsARenewalUpForAtMostCertificateWaitTimeout leaves
// the CSRs of an in-place renewal pending: each renewal gives up after
// CertificateWaitTimeout (so that the agent watches its Node again and
// other renewals get the lock), and the next one waits on the same CSR
// instead of asking again with another key.
func TestAnUnansweredCSRHoldsARenewalUpForAtMostCertificateWaitTimeout(t *testing.T) {
	for _, tc := range []struct {
		name  string
		renew func(context.Context, *testNode) error
	}{
		{"client", func(ctx context.Context, tn *testNode) error { return tn.node.Manager.RenewKubelet(ctx) }},
		{"serving", func(ctx context.Context, tn *testNode) error {
			_, err := tn.node.Manager.RenewKubeletServing(ctx, tn.trust.Kubelet)
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tn := newTestNode(t, v1alpha1.RotationPreparing)
			tn.set(func() { tn.unanswered = 1 })
			// The renewal's end is told by the fake clock's time when it
			// ended, not by a window of real time.
			type ended struct {
				err error
				at  time.Time
			}
			done := make(chan ended, 1)
			start := tn.clk.Now()
			go func() {
				err := tc.renew(context.Background(), tn)
				done <- ended{err, tn.clk.Now()}
			}()
			awaitWaiters(t, tn.clk, 1)
			tn.clk.Step(CertificateWaitTimeout - time.Second)
			if tn.clk.Waiters() == 0 {
				t.Fatal("a second before CertificateWaitTimeout, nothing waits on the clock: the renewal's wait ended early")
			}
			tn.clk.Step(time.Second)
			select {
			case e := <-done:
				if !errors.Is(e.err, context.DeadlineExceeded) {
					t.Fatalf("renewal = %v, want the wait for the CSR timed out", e.err)
				}
				if waited := e.at.Sub(start); waited < CertificateWaitTimeout {
					t.Fatalf("the renewal ended after %s, before CertificateWaitTimeout", waited)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the renewal still waits for its CSR after CertificateWaitTimeout")
			}

			csrs, err := tn.cs.CertificatesV1().CertificateSigningRequests().List(context.Background(), metav1.ListOptions{})
			if err != nil || len(csrs.Items) != 1 {
				t.Fatalf("%d CSRs (%v), want the one left pending", len(csrs.Items), err)
			}
			pending := &csrs.Items[0]
			tn.answer(pending)
			if _, err := tn.cs.CertificatesV1().CertificateSigningRequests().UpdateStatus(context.Background(), pending, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
			if err := tc.renew(context.Background(), tn); err != nil {
				t.Fatalf("the next renewal = %v, want the certificate of the CSR approved since", err)
			}
			if csrs, err := tn.cs.CertificatesV1().CertificateSigningRequests().List(context.Background(), metav1.ListOptions{}); err != nil || len(csrs.Items) != 1 {
				t.Errorf("%d CSRs after the next renewal (%v), want it to have waited on the same one", len(csrs.Items), err)
			}
		})
	}
}

// TestRenewKubeletResumes fails a renewal at a step, as a crash or an
// outage would, and carries the request out again: nothing is done twice
// that need not be, and nothing the kubelet has yet to load is forgotten.
func TestRenewKubeletResumes(t *testing.T) {
	for _, tt := range []struct {
		name           string
		fail           func(*testNode)
		between        func(*testing.T, *testNode) // after the first attempt
		wantCSRs       int
		wantRestarts   int
		wantFirstError string
	}{
		// The bundles are written; the second attempt finds nothing to
		// write but must still restart the kubelet, which has not loaded them.
		{"the CSR fails after the bundles are installed", func(tn *testNode) { tn.failCSR = 1 }, nil, 2, 1, "renew the client certificate"},
		// The certificates are stored: the second attempt does not ask again.
		{"the restart fails", func(tn *testNode) { tn.restartErr = errors.New("systemctl: exit status 1") }, nil, 2, 1, "restart the kubelet"},
		// Everything is done but the report: no second CSR or restart.
		{"the report fails", func(tn *testNode) { tn.failReport = 1 }, nil, 2, 1, "report on the Node"},
		// The published cluster bundle changed after the restart: the second
		// attempt writes it, and restarts the kubelet again, which would
		// otherwise report a bundle it never loaded.
		{"the report fails, then the cluster bundle changes", func(tn *testNode) { tn.failReport = 1 }, republish(bootstrap.NodeTrustKeyClusterCA), 2, 2, "report on the Node"},
		// The kubelet reloads its clientCAFile by itself: no second restart.
		{"the report fails, then the kubelet bundle changes", func(tn *testNode) { tn.failReport = 1 }, republish(bootstrap.NodeTrustKeyKubeletCA), 2, 1, "report on the Node"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			tn := newTestNode(t, v1alpha1.RotationFinalizing)
			tn.set(func() { tt.fail(tn) })
			err := tn.node.renew(context.Background(), tn.req)
			if err == nil || !strings.HasPrefix(err.Error(), tt.wantFirstError) {
				t.Fatalf("first attempt: %v, want an error at %q", err, tt.wantFirstError)
			}
			if tt.between != nil {
				tt.between(t, tn)
			}
			if err := tn.node.renew(context.Background(), tn.req); err != nil {
				t.Fatal(err)
			}
			tn.assertRenewed()
			if csrs, restarts := tn.counts(); csrs != tt.wantCSRs || restarts != tt.wantRestarts {
				t.Errorf("%d CSRs and %d restarts, want %d and %d", csrs, restarts, tt.wantCSRs, tt.wantRestarts)
			}
		})
	}
}

// republish publishes another bundle under key of the node trust ConfigMap
// (the old one and one more CA).
func republish(key string) func(*testing.T, *testNode) {
	return func(t *testing.T, tn *testNode) {
		cms := tn.cs.CoreV1().ConfigMaps(metav1.NamespaceSystem)
		cm, err := cms.Get(context.Background(), bootstrap.NodeTrustConfigMap, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		bundle := &tn.trust.Cluster
		if key == bootstrap.NodeTrustKeyKubeletCA {
			bundle = &tn.trust.Kubelet
		}
		*bundle = append(slices.Clip(*bundle), testCA.CertPEM()...)
		cm.Data[key] = string(*bundle)
		if _, err := cms.Update(context.Background(), cm, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}

// TestRenewKubeletWaitsForTheKubelet runs on a fake clock: a kubelet that
// does not come back within the restart timeout fails the renewal; the next
// attempt waits for it again without restarting it again.
func TestRenewKubeletWaitsForTheKubelet(t *testing.T) {
	tn := newTestNode(t, v1alpha1.RotationPreparing)
	tn.set(func() { tn.unhealthy = true })
	err := tn.renewOnFakeTime()
	if err == nil || !strings.Contains(err.Error(), "not back within 5m0s") || !strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("renew = %v", err)
	}

	tn.set(func() { tn.unhealthy = false })
	if err := tn.node.renew(context.Background(), tn.req); err != nil {
		t.Fatal(err)
	}
	tn.assertRenewed()
	if csrs, restarts := tn.counts(); csrs != 2 || restarts != 1 {
		t.Errorf("%d CSRs and %d restarts, want 2 (client and serving) and 1", csrs, restarts)
	}
}

// TestRenewStandIn: the stand-in reads the same ConfigMap, writes the
// cluster bundle into its kubeconfigs, renews, and never restarts anything.
func TestRenewStandIn(t *testing.T) {
	tn := newTestNode(t, v1alpha1.RotationPreparing)
	m := NewManager(Config{NodeName: "w1", CertDir: tn.path("pki"), KubeconfigPath: tn.path("kubeconfig"),
		BootstrapKubeconfigPath: tn.path("bootstrap-kubeconfig"), Clock: tn.clk})
	m.newClient = tn.client
	if err := m.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	// The stand-in has no clientCAFile; what it reports is the bundle it read.
	mustWriteFile(t, tn.path("ca.crt"), string(tn.trust.Kubelet), 0o644)
	node := &Node{Manager: m, Logf: tn.logf}
	if err := node.renew(context.Background(), tn.req); err != nil {
		t.Fatal(err)
	}
	tn.assertRenewed()
	if csrs, restarts := tn.counts(); csrs != 1 || restarts != 0 {
		t.Errorf("%d CSRs and %d restarts, want 1 and 0", csrs, restarts)
	}
}

// TestReloadRefusesOtherCredentials: a kubeconfig that does not use the
// pair in the cert dir, or a pair for another node, is not the kubelet's.
func TestReloadRefusesOtherCredentials(t *testing.T) {
	tn := newTestNode(t, v1alpha1.RotationPreparing)
	m := tn.node.Manager
	tn.writeKubeconfig("kubeconfig", []byte("ca"), &clientcmdapi.AuthInfo{ClientCertificate: "/etc/kubernetes/kubelet.crt", ClientKey: "/etc/kubernetes/kubelet.key"})
	if err := m.Reload(); !errors.Is(err, errNotTheKubeletsCredentials) {
		t.Errorf("a kubeconfig with another pair: %v", err)
	}
	// One that does not verify the API server: the agent, which does, would
	// take it for a server that refuses the kubelet.
	writeTestKubeconfig(t, tn.path("kubeconfig"), &clientcmdapi.Cluster{Server: testServer, InsecureSkipTLSVerify: true},
		&clientcmdapi.AuthInfo{ClientCertificate: m.store.CurrentPath(), ClientKey: m.store.CurrentPath()})
	if err := m.Reload(); !errors.Is(err, errNotTheKubeletsCredentials) || !strings.Contains(err.Error(), "insecure-skip-tls-verify") {
		t.Errorf("a kubeconfig that skips the verification of the API server: %v", err)
	}
	// One whose server needs a name or a proxy the agent's requests would
	// not apply.
	for _, cluster := range []*clientcmdapi.Cluster{
		{Server: testServer, CertificateAuthorityData: []byte("ca"), TLSServerName: "kubernetes.default"},
		{Server: testServer, CertificateAuthorityData: []byte("ca"), ProxyURL: "http://127.0.0.1:3128"},
	} {
		writeTestKubeconfig(t, tn.path("kubeconfig"), cluster, &clientcmdapi.AuthInfo{ClientCertificate: m.store.CurrentPath(), ClientKey: m.store.CurrentPath()})
		if err := m.Reload(); !errors.Is(err, errNotTheKubeletsCredentials) || !strings.Contains(err.Error(), "tls-server-name or proxy-url") {
			t.Errorf("a kubeconfig with tls-server-name %q, proxy-url %q: %v", cluster.TLSServerName, cluster.ProxyURL, err)
		}
	}
	other := NewManager(Config{Mode: ModeKubelet, NodeName: "w2", CertDir: tn.path("pki"), KubeconfigPath: tn.path("bootstrap-kubeconfig"), Clock: tn.clk})
	if err := other.Start(context.Background()); !errors.Is(err, errNotTheKubeletsCredentials) {
		t.Errorf("a kubeconfig with a token starts: %v", err)
	}
	tn.writeKubeconfig("kubeconfig", []byte("ca"), &clientcmdapi.AuthInfo{ClientCertificate: m.store.CurrentPath(), ClientKey: m.store.CurrentPath()})
	other.cfg.KubeconfigPath = tn.path("kubeconfig")
	if err := other.Reload(); err == nil || !strings.Contains(err.Error(), `"system:node:w1", not "system:node:w2"`) {
		t.Errorf("a pair for another node: %v", err)
	}
	// refresh-certs run checks the same before it asks for anything: it
	// would have the kubelet authenticate as another node.
	cs := fake.NewClientset()
	other.newClient = func(*rest.Config) (kubernetes.Interface, error) { return cs, nil }
	other.cfg.Clock = clock.RealClock{} // what it asks for is never answered: a second at most
	if err := other.Refresh(context.Background(), "s1", time.Hour, time.Second); !errors.Is(err, errNotTheKubeletsCredentials) || len(cs.Actions()) != 0 {
		t.Errorf("refresh-certs run with a pair for another node: %v, %d requests; want it refused before any", err, len(cs.Actions()))
	}
}

// TestStartWaitsForTheKubelet: in ModeKubelet, Start waits (on the fake
// clock) until the kubelet has written its kubeconfig and pair.
func TestStartWaitsForTheKubelet(t *testing.T) {
	dir := t.TempDir()
	clk := clocktesting.NewFakeClock(time.Now())
	m := NewManager(Config{Mode: ModeKubelet, NodeName: "w1", CertDir: filepath.Join(dir, "pki"), KubeconfigPath: filepath.Join(dir, "kubeconfig"),
		Clock: clk, StartupTimeout: time.Minute})
	m.newClient = func(*rest.Config) (kubernetes.Interface, error) { return fake.NewClientset(), nil }
	done := make(chan error, 1)
	go func() { done <- m.Start(context.Background()) }()
	awaitWaiters(t, clk, 2)

	// The kubelet bootstraps.
	store := &Store{Dir: filepath.Join(dir, "pki")}
	key, err := store.PendingKey(pki.ECDSAP256)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.Update(issue(t, key), key, clk.Now()); err != nil {
		t.Fatal(err)
	}
	writeTestKubeconfig(t, filepath.Join(dir, "kubeconfig"), &clientcmdapi.Cluster{Server: testServer, CertificateAuthorityData: testCA.CertPEM()},
		&clientcmdapi.AuthInfo{ClientCertificate: store.CurrentPath(), ClientKey: store.CurrentPath()})
	clk.Step(kubeletBackoff.Cap * 2)
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Start did not notice the kubelet's credentials")
	}
	if m.Current() == nil || m.Client() == nil {
		t.Fatal("no credentials after Start")
	}
}

// renewOnFakeTime carries the request out on fake time (onFakeTime), and
// fails the test unless the renewal ends after DefaultKubeletRestartTimeout
// and before twice that.
func (tn *testNode) renewOnFakeTime() error {
	tn.t.Helper()
	return tn.onFakeTime(func() error { return tn.node.renew(context.Background(), tn.req) })
}

// onFakeTime runs f while stepping the fake clock whenever f waits on it,
// and fails the test unless f ends after DefaultKubeletRestartTimeout and
// before twice that.
func (tn *testNode) onFakeTime(f func() error) error {
	t := tn.t
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- f() }()
	elapsed := time.Duration(0)
	for {
		select {
		case err := <-done:
			if elapsed < DefaultKubeletRestartTimeout {
				t.Fatalf("gave up after %s of fake time", elapsed)
			}
			return err
		case <-time.After(20 * time.Millisecond):
		}
		if elapsed > 2*DefaultKubeletRestartTimeout {
			t.Fatalf("still waiting after %s of fake time", elapsed)
		}
		if tn.clk.HasWaiters() {
			tn.clk.Step(10 * time.Second)
			elapsed += 10 * time.Second
		}
	}
}

// TestRenewKubeletChecksWhatTheKubeletServes: a kubelet that came back but
// still serves its old certificate (it did not load the stored one) is not
// taken as renewed: the renewal fails after the restart timeout, and the
// request is not answered.
func TestRenewKubeletChecksWhatTheKubeletServes(t *testing.T) {
	tn := newTestNode(t, v1alpha1.RotationPreparing)
	old := tn.served
	tn.set(func() { tn.loadsNothing = true })
	err := tn.renewOnFakeTime()
	if err == nil || !strings.Contains(err.Error(), "does not serve the serving certificate stored for it") {
		t.Fatalf("renew = %v", err)
	}
	if !tn.served.Equal(old) {
		t.Fatal("the fake kubelet changed what it serves")
	}
	node, err := tn.cs.CoreV1().Nodes().Get(context.Background(), "w1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, pending := noderenewal.Pending(node.Annotations); !pending {
		t.Error("the request was answered")
	}
}

// A cluster bundle that does not verify what the API server serves is not
// installed: nothing is written, no CSR made, the kubelet not restarted,
// and the renewal goes through once the API server is verified.
func TestRenewalInstallsNoClusterBundleThatDoesNotVerifyTheAPIServer(t *testing.T) {
	tn := newTestNode(t, v1alpha1.RotationFinalizing)
	kubeconfigs := map[string][]byte{}
	for _, name := range []string{"kubeconfig", "bootstrap-kubeconfig"} {
		data, err := os.ReadFile(tn.path(name))
		if err != nil {
			t.Fatal(err)
		}
		kubeconfigs[name] = data
	}
	untrusted := true
	tn.cs.PrependReactor("get", "version", func(k8stesting.Action) (bool, runtime.Object, error) {
		if untrusted {
			return true, nil, fmt.Errorf("Get %q: tls: failed to verify certificate: %w", testServer+"/version", x509.UnknownAuthorityError{})
		}
		return false, nil, nil
	})

	err := tn.node.renew(context.Background(), tn.req)
	if err == nil || !strings.Contains(err.Error(), checkServerStep+": the API server at "+testServer+", with only the published cluster bundle") ||
		!strings.Contains(err.Error(), "not installing it") {
		t.Fatalf("renew = %v", err)
	}
	for name, before := range kubeconfigs {
		if after, err := os.ReadFile(tn.path(name)); err != nil || string(after) != string(before) {
			t.Errorf("%s changed (%v)", name, err)
		}
	}
	if csrs, restarts := tn.counts(); csrs != 0 || restarts != 0 {
		t.Errorf("%d CSRs and %d restarts, want none", csrs, restarts)
	}

	untrusted = false
	if err := tn.node.renew(context.Background(), tn.req); err != nil {
		t.Fatal(err)
	}
	tn.assertRenewed()
}

// TestABootstrapKubeconfigOfAnotherServer: the bootstrap kubeconfig names
// another address than the kubeconfig (another load balancer). It gets the
// published cluster bundle only when that bundle verifies its server; one
// signed by another authority, one that cannot be asked, or a file that does
// not parse, keeps its own bundle, and the renewal goes on. One whose
// bundle file is gone is asked trusting the bundle all the same, and gets
// it as data when it verifies its server.
func TestABootstrapKubeconfigOfAnotherServer(t *testing.T) {
	const otherServer = "https://10.0.0.2:6443"
	for _, tt := range []struct {
		name        string
		answer      error  // of the other server to a request of its version
		server      string // of the bootstrap kubeconfig; empty: otherServer
		caFile      string // of the bootstrap kubeconfig instead of its bundle, in the test's directory
		garbage     bool   // the bootstrap kubeconfig does not parse
		written     bool
		wantLogLine string
	}{
		{name: "the bundle verifies it", written: true},
		{name: "another authority signs its certificate", answer: fmt.Errorf("Get %q: tls: failed to verify certificate: %w", otherServer+"/version", x509.UnknownAuthorityError{}),
			wantLogLine: "its API server at " + otherServer},
		{name: "it cannot be asked", answer: errors.New("connection refused"), wantLogLine: "its API server at " + otherServer},
		{name: "the kubeconfig's server, its bundle file gone", server: testServer, caFile: "provisioning-ca.crt", written: true},
		{name: "another server the bundle verifies, its bundle file gone", caFile: "provisioning-ca.crt", written: true},
		{name: "another server that cannot be asked, its bundle file gone", caFile: "provisioning-ca.crt", answer: errors.New("connection refused"),
			wantLogLine: "its API server at " + otherServer},
		{name: "it does not parse", garbage: true, wantLogLine: "cannot be read"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			tn := newTestNode(t, v1alpha1.RotationFinalizing)
			other := newTestCA(t, "lb-ca", tn.now)
			bootCluster := &clientcmdapi.Cluster{Server: cmp.Or(tt.server, otherServer), CertificateAuthorityData: other.CertPEM()}
			if tt.caFile != "" {
				bootCluster = &clientcmdapi.Cluster{Server: bootCluster.Server, CertificateAuthority: tn.path(tt.caFile)}
			}
			writeTestKubeconfig(t, tn.path("bootstrap-kubeconfig"), bootCluster, &clientcmdapi.AuthInfo{Token: "abcdef.0123456789abcdef"})
			if tt.garbage {
				mustWriteFile(t, tn.path("bootstrap-kubeconfig"), "{ not a kubeconfig", 0o600)
			}
			before, err := os.ReadFile(tn.path("bootstrap-kubeconfig"))
			if err != nil {
				t.Fatal(err)
			}
			otherAPIServer := fake.NewClientset()
			otherAPIServer.PrependReactor("get", "version", func(k8stesting.Action) (bool, runtime.Object, error) {
				return tt.answer != nil, nil, tt.answer
			})
			tn.node.Manager.newClient = func(cfg *rest.Config) (kubernetes.Interface, error) {
				if cfg.Host == otherServer {
					return otherAPIServer, nil
				}
				return tn.client(cfg)
			}

			if err := tn.node.renew(context.Background(), tn.req); err != nil {
				t.Fatal(err)
			}
			info, _ := readKubeconfig(tn.path("bootstrap-kubeconfig"))
			if written := string(info.CA) == string(tn.trust.Cluster); written != tt.written {
				t.Errorf("the published bundle written into the bootstrap kubeconfig: %v, want %v", written, tt.written)
			}
			if after, _ := os.ReadFile(tn.path("bootstrap-kubeconfig")); !tt.written && string(after) != string(before) {
				t.Error("the bootstrap kubeconfig changed")
			}
			if kubeconfig, err := readKubeconfig(tn.path("kubeconfig")); err != nil || string(kubeconfig.CA) != string(tn.trust.Cluster) {
				t.Errorf("the kubeconfig does not hold the published bundle (%v)", err)
			}
			if tt.wantLogLine != "" && !slices.ContainsFunc(tn.logs, func(l string) bool { return strings.Contains(l, tt.wantLogLine) }) {
				t.Errorf("no log line with %q in %q", tt.wantLogLine, tn.logs)
			}
		})
	}
}

// checkServer against real TLS servers on the loopback: a refusal is an
// answer, and proves the handshake; a certificate the bundle does not
// verify is not. The probe is anonymous: it runs nothing the kubeconfig's
// user names (an exec plugin, in a bootstrap kubeconfig copied from a Secret
// its tenant writes) and sends no credential.
func TestCheckServerNeedsTheBundleToVerifyTheAPIServer(t *testing.T) {
	now := time.Now()
	var authorized atomic.Bool
	cluster0, cluster1 := newTestCA(t, "cluster-ca-0", now), newTestCA(t, "cluster-ca-1", now)
	apiServer := func(ca *pki.KeyPair, status int) string {
		key, err := pki.GenerateKey(pki.ECDSAP256)
		if err != nil {
			t.Fatal(err)
		}
		cert, err := ca.Issue(pki.LeafTemplate{CommonName: "kube-apiserver", IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
			Usages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, Validity: time.Hour}, key.Public(), now)
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("Authorization") != "" || r.TLS != nil && len(r.TLS.PeerCertificates) > 0 {
				authorized.Store(true)
			}
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(status)
			if status == http.StatusOK {
				fmt.Fprint(w, `{"major":"1","minor":"36","gitVersion":"v1.36.3"}`)
				return
			}
			fmt.Fprintf(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"Unauthorized","code":%d}`, status)
		}))
		srv.TLS = &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{cert.Raw}, PrivateKey: key}}, ClientAuth: tls.RequestClientCert}
		srv.StartTLS()
		t.Cleanup(srv.Close)
		return srv.URL
	}
	for _, tt := range []struct {
		name    string
		serving *pki.KeyPair
		status  int
		bundle  []byte
		wantErr string
		// noServer: the kubeconfig names no server (client-go would take
		// localhost).
		noServer bool
	}{
		{"Preparing: both CAs, the old one serving", cluster0, http.StatusOK, append(cluster0.CertPEM(), cluster1.CertPEM()...), "", false},
		{"Finalizing: the new CA alone, serving", cluster1, http.StatusOK, cluster1.CertPEM(), "", false},
		{"a refusal is an answer", cluster1, http.StatusUnauthorized, cluster1.CertPEM(), "", false},
		{"the new CA alone, the old one still serving", cluster0, http.StatusOK, cluster1.CertPEM(), "certificate signed by unknown authority", false},
		{"no server", cluster1, http.StatusOK, cluster1.CertPEM(), "names no server", true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			ran := filepath.Join(dir, "ran")
			user := &clientcmdapi.AuthInfo{Token: "abcdef.0123456789abcdef", Exec: &clientcmdapi.ExecConfig{
				APIVersion: "client.authentication.k8s.io/v1", Command: "sh", Args: []string{"-c", "touch " + ran}, InteractiveMode: clientcmdapi.NeverExecInteractiveMode}}
			server := apiServer(tt.serving, tt.status)
			if tt.noServer {
				server = ""
			}
			writeTestKubeconfig(t, filepath.Join(dir, "kubeconfig"), &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: cluster0.CertPEM()}, user)
			r := &renewal{n: &Node{Manager: NewManager(Config{KubeconfigPath: filepath.Join(dir, "kubeconfig")}), Logf: t.Logf},
				trust: noderenewal.Trust{Cluster: tt.bundle}}
			authorized.Store(false)
			err := r.checkServer(context.Background())
			if tt.wantErr == "" && err != nil || tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
				t.Errorf("checkServer = %v, want %q", err, tt.wantErr)
			}
			if _, err := os.Stat(ran); err == nil {
				t.Error("the probe ran the kubeconfig's exec plugin")
			}
			if authorized.Load() {
				t.Error("the probe sent the kubeconfig's credentials")
			}
		})
	}
}

// watchRenewals runs the node's WatchRenewals, on a watch of the Node that
// the test feeds, until the test ends.
func (tn *testNode) watchRenewals() *watch.FakeWatcher {
	w := watch.NewFake()
	tn.cs.PrependWatchReactor("nodes", func(k8stesting.Action) (bool, watch.Interface, error) { return true, w, nil })
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = tn.node.WatchRenewals(ctx) }()
	tn.t.Cleanup(func() { cancel(); w.Stop(); <-done })
	return w
}

// A renewal request that does not parse (set by hand with a typo) is not
// carried out, and the agent says so once per value, not at every event of
// the Node.
func TestAMalformedRequestIsLoggedOnce(t *testing.T) {
	tn := newTestNode(t, v1alpha1.RotationPreparing)
	w := tn.watchRenewals()

	typo := strings.Replace(tn.req.String(), "/Preparing", "/Prepared", 1)
	other := strings.TrimSuffix(tn.req.String(), "Z/Preparing") + "/Preparing"
	for _, value := range []string{typo, typo, other, other} {
		w.Modify(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "w1", Annotations: map[string]string{v1alpha1.AnnotationRenewCredentials: value}}})
	}
	w.Modify(&corev1.ConfigMap{}) // received once the events before it are handled

	tn.mu.Lock()
	defer tn.mu.Unlock()
	var logged []string
	for _, l := range tn.logs {
		if strings.Contains(l, "not carried out") {
			logged = append(logged, l)
		}
	}
	if len(logged) != 2 || !strings.Contains(logged[0], strconv.Quote(typo)) || !strings.Contains(logged[1], strconv.Quote(other)) {
		t.Errorf("logged %q, want each malformed request once", logged)
	}
	if tn.csrs != 0 {
		t.Errorf("%d CSRs for a request that does not parse", tn.csrs)
	}
}

// TestTheAgentMarksItsNode: the agent marks the Node it watches as running
// a node agent, with its version, when it is not marked so already, and
// tries again at the Node's next event when the patch fails.
func TestTheAgentMarksItsNode(t *testing.T) {
	tn := newTestNode(t, v1alpha1.RotationPreparing)
	tn.node.Version = "v1.2.3"
	tn.failReport = 1
	w := tn.watchRenewals()

	marked := func(version string) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "w1", Annotations: map[string]string{v1alpha1.AnnotationNodeAgent: version}}}
	}
	tn.cs.ClearActions()
	for _, node := range []*corev1.Node{
		{ObjectMeta: metav1.ObjectMeta{Name: "w1"}}, // the patch fails
		{ObjectMeta: metav1.ObjectMeta{Name: "w1"}}, // tried again
		marked("v1.2.3"),
		marked("v1.2.2"), // an agent before this one
	} {
		w.Modify(node)
	}
	w.Modify(&corev1.ConfigMap{}) // received once the events before it are handled

	var patches []string
	for _, a := range tn.cs.Actions() {
		if p, ok := a.(k8stesting.PatchAction); ok && a.GetResource().Resource == "nodes" {
			patches = append(patches, string(p.GetPatch()))
		}
	}
	want := `{"metadata":{"annotations":{"carousel.dev/node-agent":"v1.2.3"}}}`
	if !slices.Equal(patches, []string{want, want, want}) {
		t.Errorf("patches of the Node %q, want %q three times: after a failure, and for another agent's mark", patches, want)
	}
	node, err := tn.cs.CoreV1().Nodes().Get(context.Background(), "w1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := node.Annotations[v1alpha1.AnnotationNodeAgent]; got != "v1.2.3" {
		t.Errorf("the Node is marked %q, want v1.2.3", got)
	}
	tn.mu.Lock()
	defer tn.mu.Unlock()
	if !slices.ContainsFunc(tn.logs, func(l string) bool { return strings.Contains(l, "tried again at its next change") }) {
		t.Errorf("the failed patch was not logged: %q", tn.logs)
	}
}

// The deletion of the Node, seen with a renewal request still on it, renews
// nothing: its last state carries the request, and a renewal would make a
// CSR for a node that is gone and leave its progress record behind.
func TestADeletedNodeIsNotRenewed(t *testing.T) {
	tn := newTestNode(t, v1alpha1.RotationPreparing)
	w := tn.watchRenewals()
	w.Delete(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "w1", Annotations: map[string]string{
		v1alpha1.AnnotationRenewCredentials: tn.req.String(), v1alpha1.AnnotationNodeAgent: "v0.0.0"}}})
	w.Modify(&corev1.ConfigMap{}) // received once the events before it are handled
	if csrs, _ := tn.counts(); csrs != 0 {
		t.Errorf("%d CSRs for a Node deleted", csrs)
	}
}

// A serving certificate the kubelet must not be restarted on (from a CA the
// kubelet bundle does not hold, for another node, or not for server
// authentication) is not stored, and the pending key goes with it: the next
// attempt asks again with another key, and stores what a right signer sends.
func TestAServingCertificateTheKubeletBundleDoesNotVerifyIsNotStored(t *testing.T) {
	now := time.Now()
	stranger := newTestCA(t, "kubelet-ca-stranger", now)
	for name, tc := range map[string]struct {
		sign func(tn *testNode, csr *certificatesv1.CertificateSigningRequest)
		why  string
	}{
		"another CA": {func(tn *testNode, csr *certificatesv1.CertificateSigningRequest) {
			sign(tn.t, csr, stranger, x509.ExtKeyUsageServerAuth, time.Hour, tn.clk.Now())
		}, "certificate signed by unknown authority"},
		"another node": {func(tn *testNode, csr *certificatesv1.CertificateSigningRequest) {
			signAs(tn.t, csr, tn.kubelet1, pki.LeafTemplate{CommonName: "system:node:w2", Organization: []string{"system:nodes"},
				DNSNames: []string{"w2"}, Usages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, Validity: time.Hour}, tn.clk.Now())
		}, `is for "system:node:w2"`},
		"client authentication": {func(tn *testNode, csr *certificatesv1.CertificateSigningRequest) {
			sign(tn.t, csr, tn.kubelet1, x509.ExtKeyUsageClientAuth, time.Hour, tn.clk.Now())
		}, "does not verify against the kubelet bundle"},
	} {
		t.Run(name, func(t *testing.T) {
			tn := newTestNode(t, v1alpha1.RotationPreparing)
			m := tn.node.Manager
			before := tn.storedServing()
			tn.set(func() { tn.signServing = func(csr *certificatesv1.CertificateSigningRequest) { tc.sign(tn, csr) } })
			if _, err := m.RenewKubeletServing(context.Background(), tn.trust.Kubelet); err == nil || !strings.Contains(err.Error(), tc.why) || !refusedRequest(err) {
				t.Fatalf("RenewKubeletServing = %v, want it refused: %s", err, tc.why)
			}
			if got := tn.storedServing(); !got.Equal(before) {
				t.Fatalf("the refused serving certificate (issuer %x) was stored", got.AuthorityKeyId)
			}

			tn.set(func() { tn.signServing = nil })
			kp, err := m.RenewKubeletServing(context.Background(), tn.trust.Kubelet)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(kp.Cert.AuthorityKeyId, tn.kubelet1.Cert.SubjectKeyId) || !tn.storedServing().Equal(kp.Cert) {
				t.Errorf("stored %x, want a certificate from the new kubelet CA", kp.Cert.AuthorityKeyId)
			}
			tn.mu.Lock()
			csrs := tn.csrs
			tn.mu.Unlock()
			if csrs != 2 {
				t.Errorf("%d CSRs, want 2: the second attempt asks again with another key", csrs)
			}
		})
	}
}

// A node whose clock is behind the signer's by more than the five minutes a
// certificate is backdated stores the serving certificate it was issued: it
// is judged no earlier than it is valid from (the API server, which verifies
// it, judges it by its own clock). Judged at the node's now, every attempt
// would be refused, each with a certificate valid from later still.
func TestAServingCertificateFromASignerAheadOfTheNodeIsStored(t *testing.T) {
	tn := newTestNode(t, v1alpha1.RotationPreparing)
	tn.set(func() {
		tn.signServing = func(csr *certificatesv1.CertificateSigningRequest) {
			sign(tn.t, csr, tn.kubelet1, x509.ExtKeyUsageServerAuth, time.Hour, tn.clk.Now().Add(10*time.Minute))
		}
	})
	kp, err := tn.node.Manager.RenewKubeletServing(context.Background(), tn.trust.Kubelet)
	if err != nil {
		t.Fatal(err)
	}
	if !kp.Cert.NotBefore.After(tn.clk.Now()) {
		t.Fatalf("the certificate is valid from %s, not after the node's now %s: the test proves nothing", kp.Cert.NotBefore, tn.clk.Now())
	}
	if !tn.storedServing().Equal(kp.Cert) {
		t.Error("the serving certificate was not stored")
	}
}

// A kubelet bundle that does not parse refuses nothing the signer issued:
// the pending key is kept, and the next attempt finds the same CSR and
// stores its certificate, without asking again.
func TestAnUnreadableKubeletBundleKeepsThePendingServingKey(t *testing.T) {
	tn := newTestNode(t, v1alpha1.RotationPreparing)
	m := tn.node.Manager
	if _, err := m.RenewKubeletServing(context.Background(), []byte("not a bundle")); err == nil || refusedRequest(err) {
		t.Fatalf("RenewKubeletServing with an unreadable bundle = %v, want a failure that is no refusal", err)
	}
	kp, err := m.RenewKubeletServing(context.Background(), tn.trust.Kubelet)
	if err != nil {
		t.Fatal(err)
	}
	csrs, err := tn.cs.CertificatesV1().CertificateSigningRequests().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(csrs.Items) != 1 || !tn.storedServing().Equal(kp.Cert) {
		t.Errorf("%d CSRs, want 1: the second attempt finds the first's", len(csrs.Items))
	}
}
