package nodeagent

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
	certificatesv1client "k8s.io/client-go/kubernetes/typed/certificates/v1"
	"k8s.io/client-go/rest"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/carousel-dev/carousel/pkg/pki"
)

func TestRotationDeadline(t *testing.T) {
	notBefore := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	notAfter := notBefore.Add(100 * time.Hour)
	for _, tt := range []struct {
		jitter float64
		want   time.Duration
	}{{0, 70 * time.Hour}, {0.5, 80 * time.Hour}, {0.999999, 90 * time.Hour}} {
		got := RotationDeadline(notBefore, notAfter, tt.jitter).Sub(notBefore)
		if got < tt.want-time.Second || got > tt.want {
			t.Errorf("jitter %v: rotation after %s, want %s", tt.jitter, got, tt.want)
		}
	}
}

func TestCSRNameFollowsTheKey(t *testing.T) {
	a, _ := pki.GenerateKey(pki.ECDSAP256)
	b, _ := pki.GenerateKey(pki.ECDSAP256)
	na, _ := CSRName("w1", a.Public())
	again, _ := CSRName("w1", a.Public())
	nb, _ := CSRName("w1", b.Public())
	other, _ := CSRName("w2", a.Public())
	if na != again || na == nb || na == other || !strings.HasPrefix(na, "node-csr-") {
		t.Fatalf("names %q %q %q %q", na, again, nb, other)
	}
}

// TestStartGivesUpAfterTheStartupTimeout runs against an API server that is
// not there, on a fake clock: Start keeps retrying with backoff and returns an
// error once five (fake) minutes have passed, not before.
func TestStartGivesUpAfterTheStartupTimeout(t *testing.T) {
	dir := t.TempDir()
	bootstrap := writeBootstrapKubeconfig(t, dir)
	clk := clocktesting.NewFakeClock(time.Now())
	m := NewManager(Config{NodeName: "w1", CertDir: filepath.Join(dir, "pki"), KubeconfigPath: filepath.Join(dir, "kubeconfig"),
		BootstrapKubeconfigPath: bootstrap, Clock: clk, StartupTimeout: 5 * time.Minute})
	done := make(chan error, 1)
	go func() { done <- m.Start(context.Background()) }()

	elapsed := time.Duration(0)
	for elapsed < 10*time.Minute {
		select {
		case err := <-done:
			if elapsed < 5*time.Minute {
				t.Fatalf("gave up after %s of fake time", elapsed)
			}
			if err == nil || !strings.Contains(err.Error(), "no client certificate within 5m0s") {
				t.Fatalf("Start = %v", err)
			}
			return
		case <-time.After(20 * time.Millisecond):
		}
		if clk.HasWaiters() {
			clk.Step(10 * time.Second)
			elapsed += 10 * time.Second
		}
	}
	t.Fatal("Start did not give up within ten fake minutes")
}

// writeBootstrapKubeconfig writes a bootstrap kubeconfig for an API server
// that is not there, and returns its path.
func writeBootstrapKubeconfig(t *testing.T, dir string) string {
	t.Helper()
	path := filepath.Join(dir, "bootstrap-kubeconfig")
	if err := os.WriteFile(path, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1", insecure-skip-tls-verify: true}}]
users: [{name: u, user: {token: abcdef.0123456789abcdef}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
`), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestNextRotation(t *testing.T) {
	notBefore := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, tt := range []struct {
		name     string
		life     time.Duration // NotAfter - NotBefore
		renewed  time.Duration // after notBefore; -1 for unknown
		interval time.Duration
		want     time.Duration // after notBefore
	}{
		{"deadline after the floor", 100 * time.Hour, 5 * time.Minute, 5 * time.Minute, 80 * time.Hour},
		{"renewed when unknown", 100 * time.Hour, -1, 5 * time.Minute, 80 * time.Hour},
		{"node clock ahead: deadline long past", 100 * time.Hour, 200 * time.Hour, 5 * time.Minute, 200*time.Hour + 5*time.Minute},
		{"short certificate: half of what it had left", 6 * time.Minute, 5 * time.Minute, 5 * time.Minute, 5*time.Minute + 30*time.Second},
		{"10-minute certificate, node clock ahead", 15 * time.Minute, time.Hour, 5 * time.Minute, time.Hour + 5*time.Minute},
		{"certificate with nothing left: no floor", 4 * time.Minute, 5 * time.Minute, 5 * time.Minute, 5 * time.Minute},
		{"larger interval still capped", 100 * time.Minute, 90 * time.Minute, time.Hour, 90*time.Minute + 47*time.Minute + 30*time.Second},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var renewed time.Time
			if tt.renewed >= 0 {
				renewed = notBefore.Add(tt.renewed)
			}
			got := NextRotation(notBefore, notBefore.Add(tt.life), renewed, tt.interval, 0.5).Sub(notBefore)
			if got != tt.want {
				t.Errorf("next rotation %s after NotBefore, want %s", got, tt.want)
			}
		})
	}
}

// TestRunSpacesRenewals runs the rotation loop where every certificate is
// due as soon as it arrives, stepping a fake clock 10 s at a time for 20
// minutes: the renewals come one every minimum interval (or halfway through
// what a short certificate has left), not one every step, and the current
// certificate never expires.
func TestRunSpacesRenewals(t *testing.T) {
	for _, tt := range []struct {
		name     string
		ahead    time.Duration // of the node's clock over the signer's
		validity time.Duration // of the certificates the signer issues
		interval time.Duration // wanted between two renewals
	}{
		{"node clock 3h ahead of 1h certificates", 3 * time.Hour, time.Hour, DefaultMinRenewalInterval},
		{"signer issues 1-minute certificates", 0, time.Minute, 30 * time.Second},
	} {
		t.Run(tt.name, func(t *testing.T) {
			clk := clocktesting.NewFakeClock(time.Now().Add(tt.ahead))
			signerNow := func() time.Time { return clk.Now().Add(-tt.ahead) }
			signer := newFakeSigner(func(_ int, csr *certificatesv1.CertificateSigningRequest) {
				approve(t, csr, tt.validity, signerNow())
			})
			dir := t.TempDir()
			m := NewManager(Config{NodeName: "w1", CertDir: filepath.Join(dir, "pki"), KubeconfigPath: filepath.Join(dir, "kubeconfig"), Clock: clk})
			m.newClient = signer.client
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if err := m.renewWith(ctx, signer, "https://127.0.0.1:6443", nil, "", 0, CertificateWaitTimeout); err != nil {
				t.Fatal(err)
			}
			done := make(chan struct{})
			go func() { defer close(done); m.Run(ctx) }()
			defer func() { cancel(); <-done }()

			const window, step = 20 * time.Minute, 10 * time.Second
			for elapsed := time.Duration(0); elapsed < window; elapsed += step {
				awaitWaiters(t, clk, 1)
				if notAfter := m.Current().Cert.NotAfter; !signerNow().Before(notAfter) {
					t.Fatalf("after %s the certificate has expired", elapsed)
				}
				clk.Step(step)
			}
			awaitWaiters(t, clk, 1)
			if renewals, want := len(signer.Created())-1, int(window/tt.interval); renewals != want {
				t.Errorf("%d renewals in %s, want %d (one every %s)", renewals, window, want, tt.interval)
			}
		})
	}
}

// TestStartAsksForAFreshKeyAfterARefusedCSR bootstraps against a signer that
// denies (or fails) the first CSR: the retry asks for another key, under
// another CSR name, and gets a certificate for it.
func TestStartAsksForAFreshKeyAfterARefusedCSR(t *testing.T) {
	for _, refusal := range []certificatesv1.RequestConditionType{certificatesv1.CertificateDenied, certificatesv1.CertificateFailed} {
		t.Run(string(refusal), func(t *testing.T) {
			dir := t.TempDir()
			clk := clocktesting.NewFakeClock(time.Now())
			signer := newFakeSigner(func(n int, csr *certificatesv1.CertificateSigningRequest) {
				if n == 0 {
					refuse(csr, refusal)
					return
				}
				approve(t, csr, time.Hour, clk.Now())
			})
			m := NewManager(Config{NodeName: "w1", CertDir: filepath.Join(dir, "pki"), KubeconfigPath: filepath.Join(dir, "kubeconfig"),
				BootstrapKubeconfigPath: writeBootstrapKubeconfig(t, dir), Clock: clk})
			m.newClient = signer.client
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := make(chan error, 1)
			go func() { done <- m.Start(ctx) }()

			// Start waits on its deadline and, after the refusal, on its
			// backoff: step past the longest first delay.
			awaitWaiters(t, clk, 2)
			clk.Step(longestFirstDelay(certificateBackoff))
			returned, err := awaitStart(clk, done)
			if !returned {
				t.Fatalf("the retry failed too; CSRs created: %s", csrNames(signer.Created()))
			}
			if err != nil {
				t.Fatalf("Start = %v", err)
			}
			created := signer.Created()
			if len(created) != 2 || created[0].Name == created[1].Name {
				t.Fatalf("CSRs created: %s; want the refused one and a new one", csrNames(created))
			}
			refused, err := parseCSR(created[0])
			if err != nil {
				t.Fatal(err)
			}
			if kp := m.Current(); samePublicKey(kp.Cert.PublicKey, refused.PublicKey) || samePublicKey(kp.Key.Public(), refused.PublicKey) {
				t.Fatal("the certificate is for the key of the refused CSR")
			}
		})
	}
}

func csrNames(csrs []*certificatesv1.CertificateSigningRequest) []string {
	var names []string
	for _, csr := range csrs {
		names = append(names, csr.Name)
	}
	return names
}

// awaitStart waits (in real time, at most 10s) for Start to send its result
// on done; it reports false if Start goes back to waiting on clk (on its
// deadline and its backoff) instead.
func awaitStart(clk *clocktesting.FakeClock, done <-chan error) (bool, error) {
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
		select {
		case err := <-done:
			return true, err
		case <-time.After(time.Millisecond):
		}
		if clk.Waiters() >= 2 {
			return false, nil
		}
	}
	return false, nil
}

// TestRefreshAgainAfterADenial refreshes twice with the same seed against a
// signer that denies the refresh: the second run, which asks for a fresh key
// under the same CSR name, reports the denial too, not a key mismatch.
func TestRefreshAgainAfterADenial(t *testing.T) {
	dir := t.TempDir()
	clk := clocktesting.NewFakeClock(time.Now())
	signer := newFakeSigner(func(n int, csr *certificatesv1.CertificateSigningRequest) {
		if n == 0 {
			approve(t, csr, time.Hour, clk.Now())
			return
		}
		refuse(csr, certificatesv1.CertificateDenied)
	})
	m := NewManager(Config{NodeName: "w1", CertDir: filepath.Join(dir, "pki"), KubeconfigPath: filepath.Join(dir, "kubeconfig"), Clock: clk})
	m.newClient = signer.client
	if err := m.renewWith(context.Background(), signer, "https://127.0.0.1:6443", nil, "", 0, CertificateWaitTimeout); err != nil {
		t.Fatal(err)
	}
	for run := range 2 {
		err := m.Refresh(context.Background(), "s1", time.Hour, time.Minute)
		if !errors.Is(err, ErrDenied) || !strings.Contains(err.Error(), "new seed") {
			t.Fatalf("refresh %d = %v, want the denial and a hint to take a new seed", run, err)
		}
	}
	// The denial of the first run's CSR says nothing of the pending key of
	// the second (a renewal's, whose own CSR may wait for approval): kept.
	pending, err := os.ReadFile(m.store.pendingKeyPath())
	if err != nil {
		t.Fatalf("the pending key of the second run: %v", err)
	}
	if err := m.Refresh(context.Background(), "s1", time.Hour, time.Minute); !errors.Is(err, ErrDenied) {
		t.Fatalf("refresh 3 = %v, want the denial", err)
	}
	if again, err := os.ReadFile(m.store.pendingKeyPath()); err != nil || !bytes.Equal(again, pending) {
		t.Errorf("the pending key after another CSR's denial: %v; want it kept", err)
	}
}

// A kubeconfig that names its trust bundle by file (as the kubelet's may,
// copied from a bootstrap kubeconfig) gives the bundle in the file.
func TestTheTrustBundleOfAKubeconfigMayBeAFile(t *testing.T) {
	dir := t.TempDir()
	mustWriteFile(t, filepath.Join(dir, "pki", "ca.crt"), string(testCA.CertPEM()), 0o644)
	writeTestKubeconfig(t, filepath.Join(dir, "kubeconfig"), &clientcmdapi.Cluster{Server: "https://192.0.2.10:6443", CertificateAuthority: "pki/ca.crt"},
		&clientcmdapi.AuthInfo{})
	m := NewManager(Config{KubeconfigPath: filepath.Join(dir, "kubeconfig")})
	server, ca, err := m.serverAndCA()
	if err != nil || server != "https://192.0.2.10:6443" || string(ca) != string(testCA.CertPEM()) {
		t.Errorf("serverAndCA = %q, %d bytes of bundle, %v; want the server and the file's bundle", server, len(ca), err)
	}
}

// A bootstrap kubeconfig that names its trust bundle by file: the kubeconfig
// the stand-in writes after bootstrapping holds the bundle.
func TestABootstrapWithABundleInAFileWritesTheBundle(t *testing.T) {
	dir := t.TempDir()
	mustWriteFile(t, filepath.Join(dir, "ca.crt"), string(testCA.CertPEM()), 0o644)
	mustWriteFile(t, filepath.Join(dir, "bootstrap-kubeconfig"), `apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://192.0.2.10:6443", certificate-authority: ca.crt}}]
users: [{name: u, user: {token: abcdef.0123456789abcdef}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
`, 0o600)
	clk := clocktesting.NewFakeClock(time.Now())
	signer := newFakeSigner(func(_ int, csr *certificatesv1.CertificateSigningRequest) { approve(t, csr, time.Hour, clk.Now()) })
	m := NewManager(Config{NodeName: "w1", CertDir: filepath.Join(dir, "pki"), KubeconfigPath: filepath.Join(dir, "kubeconfig"),
		BootstrapKubeconfigPath: filepath.Join(dir, "bootstrap-kubeconfig"), Clock: clk, StartupTimeout: time.Minute})
	m.newClient = signer.client
	if err := m.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	info, err := readKubeconfig(filepath.Join(dir, "kubeconfig"))
	if err != nil || info.Server != "https://192.0.2.10:6443" || string(info.CA) != string(testCA.CertPEM()) {
		t.Errorf("the written kubeconfig: %q, %d bytes of bundle, %v; want the server and the bundle", info.Server, len(info.CA), err)
	}
}

// TestRunBootstrapsAgainWhenTheServerIsNoLongerTrusted: a stand-in agent
// that missed a CA rotation finds the API server serving a certificate from
// the new cluster CA, which its kubeconfig does not trust. The renewal fails
// in the TLS handshake, before any 401; the agent starts over with its
// bootstrap kubeconfig at once, as Start does, instead of failing until its
// certificate expires.
func TestRunBootstrapsAgainWhenTheServerIsNoLongerTrusted(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	signer := newFakeSigner(func(_ int, csr *certificatesv1.CertificateSigningRequest) { approve(t, csr, time.Hour, clk.Now()) })
	dir := t.TempDir()
	m := NewManager(Config{NodeName: "w1", CertDir: filepath.Join(dir, "pki"), KubeconfigPath: filepath.Join(dir, "kubeconfig"),
		BootstrapKubeconfigPath: writeBootstrapKubeconfig(t, dir), Clock: clk})
	m.newClient = func(cfg *rest.Config) (kubernetes.Interface, error) {
		// The bootstrap kubeconfig's, with the new bundle, and the review
		// of an issued certificate, with the bundle of the request's client.
		if cfg.BearerToken != "" || len(cfg.CertData) > 0 {
			return signer.client(cfg)
		}
		return untrustedServer{}, nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := m.renewWith(ctx, signer, "https://127.0.0.1:6443", nil, "", 0, CertificateWaitTimeout); err != nil {
		t.Fatal(err)
	}
	notAfter := m.Current().Cert.NotAfter
	done := make(chan struct{})
	go func() { defer close(done); m.Run(ctx) }()
	defer func() { cancel(); <-done }()

	for len(signer.Created()) < 2 {
		if !clk.Now().Before(notAfter) {
			t.Fatalf("no bootstrap before the certificate expired at %s", notAfter)
		}
		awaitWaiters(t, clk, 1)
		clk.Step(10 * time.Second)
	}
}

// untrustedServer is a managed API server whose certificate the client does
// not trust: every CSR create fails in the TLS handshake.
type untrustedServer struct{ kubernetes.Interface }

func (untrustedServer) CertificatesV1() certificatesv1client.CertificatesV1Interface {
	return untrustedCertificatesV1{}
}

type untrustedCertificatesV1 struct {
	certificatesv1client.CertificatesV1Interface
}

func (untrustedCertificatesV1) CertificateSigningRequests() certificatesv1client.CertificateSigningRequestInterface {
	return untrustedCSRs{}
}

type untrustedCSRs struct {
	certificatesv1client.CertificateSigningRequestInterface
}

func (untrustedCSRs) Create(context.Context, *certificatesv1.CertificateSigningRequest, metav1.CreateOptions) (*certificatesv1.CertificateSigningRequest, error) {
	return nil, &url.Error{Op: "Post", URL: "https://127.0.0.1:6443/apis/certificates.k8s.io/v1/certificatesigningrequests",
		Err: &tls.CertificateVerificationError{Err: x509.UnknownAuthorityError{}}}
}

// TestCheckAccepted: an issued certificate the API server authenticates is
// accepted, even where it is not authorized to review itself; one it
// refuses, or that could not be checked, is not.
func TestCheckAccepted(t *testing.T) {
	key, err := pki.GenerateKey(pki.ECDSAP256)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name     string
		answer   error
		accepted bool
	}{
		{"reviewed", nil, true},
		{"forbidden to review itself", apierrors.NewForbidden(schema.GroupResource{Group: "authentication.k8s.io", Resource: "selfsubjectreviews"}, "", errors.New("RBAC")), true},
		{"unauthorized", apierrors.NewUnauthorized("Unauthorized"), false},
		{"the API server away", errors.New("connection refused"), false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			m := NewManager(Config{NodeName: "w1", CertDir: t.TempDir()})
			var cfg *rest.Config
			m.newClient = func(c *rest.Config) (kubernetes.Interface, error) {
				cfg = c
				if tt.answer == nil {
					return fakeClient{fakeSigner: newFakeSigner(nil), cfg: c}, nil
				}
				return refusingReviews{err: tt.answer}, nil
			}
			err := m.checkAccepted(context.Background(), "https://127.0.0.1:6443", testCA.CertPEM(), []byte("issued"), key)
			if accepted := err == nil; accepted != tt.accepted {
				t.Errorf("checkAccepted = %v, want accepted %v", err, tt.accepted)
			}
			if r := refusalOf(err); r != notRefused {
				t.Errorf("checkAccepted's error is taken for a refusal of the current credentials: %s", r)
			}
			if cfg == nil || string(cfg.CertData) != "issued" || string(cfg.CAData) != string(testCA.CertPEM()) || len(cfg.KeyData) == 0 || cfg.Timeout == 0 {
				t.Errorf("reviewed with %+v, want the issued certificate, the pending key, the bundle and a timeout", cfg)
			}
		})
	}
}

// A certificate issued on the node's CSR is installed only for the node's
// identity, and for client authentication, as the CSR asked: one for another
// identity (a signer's bug, a status.certificate written by hand) would have
// the kubelet act as someone else.
func TestAnIssuedCertificateOfAnotherIdentityIsNotInstalled(t *testing.T) {
	for _, tt := range []struct {
		name  string
		cn    string
		orgs  []string
		usage x509.ExtKeyUsage
		want  string // "" for installed
	}{
		{"the node's", "system:node:w1", []string{"system:nodes"}, x509.ExtKeyUsageClientAuth, ""},
		{"another node's", "system:node:w2", []string{"system:nodes"}, x509.ExtKeyUsageClientAuth, `is for "system:node:w2"`},
		{"an admin's", "system:node:w1", []string{"system:masters"}, x509.ExtKeyUsageClientAuth, `organizations ["system:masters"]`},
		{"a serving one", "system:node:w1", []string{"system:nodes"}, x509.ExtKeyUsageServerAuth, "not for client authentication"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			signer := newFakeSigner(func(_ int, csr *certificatesv1.CertificateSigningRequest) {
				signAs(t, csr, testCA, pki.LeafTemplate{CommonName: tt.cn, Organization: tt.orgs, Usages: []x509.ExtKeyUsage{tt.usage},
					Validity: time.Hour}, time.Now())
			})
			dir := t.TempDir()
			m := NewManager(Config{NodeName: "w1", CertDir: filepath.Join(dir, "pki"), KubeconfigPath: filepath.Join(dir, "kubeconfig")})
			m.newClient = signer.client
			err := m.renewWith(context.Background(), signer, "https://127.0.0.1:6443", nil, "", 0, CertificateWaitTimeout)
			current, _ := m.store.Current()
			switch {
			case tt.want == "" && (err != nil || current == nil):
				t.Errorf("renewWith = %v, current %v; want the node's certificate installed", err, current)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Errorf("renewWith = %v, want %q", err, tt.want)
			case tt.want != "" && current != nil:
				t.Errorf("installed %s", current.Cert.Subject)
			case tt.want != "" && !refusedRequest(err):
				t.Errorf("renewWith = %v: not a refusal, retried as soon as a failure", err)
			case tt.want != "":
				// The next attempt asks with another key: the CSR named
				// after this one would bring the same certificate.
				if _, statErr := os.Stat(m.store.pendingKeyPath()); !errors.Is(statErr, fs.ErrNotExist) {
					t.Errorf("the pending key of the refused certificate is kept: %v", statErr)
				}
			}
		})
	}
	if err := NewManager(Config{NodeName: "w1"}).checkIssued([]byte("issued")); err == nil {
		t.Error("what does not parse is taken for a certificate")
	}
}
