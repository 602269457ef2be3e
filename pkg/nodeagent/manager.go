package nodeagent

import (
	"context"
	"crypto"
	"crypto/x509"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"sync"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	certificatesv1 "k8s.io/api/certificates/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/clock"

	"github.com/carousel-dev/carousel/pkg/pki"
)

// Rotation happens at a random point between these fractions of a
// certificate's lifetime, so that nodes started together do not renew together.
const (
	rotationStart  = 0.7
	rotationWindow = 0.2
)

// DefaultMinRenewalInterval is the default Config.MinRenewalInterval.
const DefaultMinRenewalInterval = 5 * time.Minute

// CertificateWaitTimeout bounds how long an attempt of the agent (to
// bootstrap, rotate, or renew in place) waits for its CSR to be approved and
// signed, as client-go's certificate manager bounds one of the kubelet's.
// The CSR and its pending key stay: the next attempt, after the backoff,
// waits on the same CSR. Unbounded, a CSR left for an administrator held
// the renewal lock, and with it every other renewal, and kept the agent from
// watching its Node (so from seeing its credentials refused).
const CertificateWaitTimeout = 15 * time.Minute

// Mode says who owns the node's client certificate and kubeconfig.
type Mode string

const (
	// ModeStandIn is the agent standing in for a kubelet. It bootstraps its
	// own client certificate with the bootstrap token, rotates it, and
	// writes the kubeconfig. The zero Config is in this mode.
	ModeStandIn Mode = "stand-in"
	// ModeKubelet is the agent beside a real kubelet, which bootstraps and
	// rotates its client certificate and writes its kubeconfig. The manager
	// only acts as the node with them, re-reading them from disk (Reload),
	// and renews the certificate when Carousel asks for it during a CA
	// rotation.
	ModeKubelet Mode = "kubelet"
)

// Config configures a certificate manager.
type Config struct {
	// Mode is ModeStandIn when empty.
	Mode     Mode
	NodeName string
	// CertDir holds the key pairs (the kubelet's /var/lib/kubelet/pki).
	CertDir string
	// KubeconfigPath is the kubeconfig pointing at the current pair: the
	// manager writes it in ModeStandIn and reads the kubelet's in
	// ModeKubelet. BootstrapKubeconfigPath is the one with a bootstrap token.
	KubeconfigPath, BootstrapKubeconfigPath string
	KeyAlgorithm                            pki.KeyAlgorithm
	// CertificateTTL is requested as the CSR's expirationSeconds; 0 leaves it to the signer.
	CertificateTTL time.Duration
	// StartupTimeout bounds Start: KEP-266 gives up after five minutes. In
	// ModeKubelet it bounds the wait for the kubelet's kubeconfig and pair.
	StartupTimeout time.Duration
	// MinRenewalInterval is the least time Run lets pass after a successful
	// renewal before it rotates again (0 means DefaultMinRenewalInterval), so
	// that a node whose clock runs ahead of the signer's, or a signer that
	// issues short-lived certificates, does not renew in a loop. It never
	// postpones a rotation past half of what the certificate had left when
	// it arrived; see NextRotation.
	MinRenewalInterval time.Duration
	Clock              clock.WithTicker
	Metrics            *Metrics
}

// Manager obtains and rotates a node's client certificate.
type Manager struct {
	cfg   Config
	store *Store

	// newClient builds a clientset; tests replace it with a fake.
	newClient func(*rest.Config) (kubernetes.Interface, error)
	// requestTimeout bounds each request that is not a watch
	// (defaultRequestTimeout, shortened by tests).
	requestTimeout time.Duration

	mu      sync.Mutex
	current *pki.KeyPair
	client  kubernetes.Interface // built from the kubeconfig for current
	// renewed is when this process last obtained a certificate, on the
	// manager's clock; zero until it does.
	renewed time.Time

	// renewing serialises renewals (rotation, in-place renewal, refresh)
	// within the process, lockRenewals across processes: they share the
	// pending key and the kubeconfig.
	renewing sync.Mutex
}

// NewManager returns a manager; call Start, then Run.
func NewManager(cfg Config) *Manager {
	if cfg.Mode == "" {
		cfg.Mode = ModeStandIn
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	if cfg.KeyAlgorithm == "" {
		cfg.KeyAlgorithm = pki.ECDSAP256
	}
	if cfg.StartupTimeout == 0 {
		cfg.StartupTimeout = 5 * time.Minute
	}
	if cfg.MinRenewalInterval == 0 {
		cfg.MinRenewalInterval = DefaultMinRenewalInterval
	}
	return &Manager{cfg: cfg, store: &Store{Dir: cfg.CertDir}, newClient: newClientset, requestTimeout: defaultRequestTimeout}
}

func newClientset(cfg *rest.Config) (kubernetes.Interface, error) {
	return kubernetes.NewForConfig(cfg)
}

// Current returns the key pair in use.
func (m *Manager) Current() *pki.KeyPair {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.current
}

// Client returns a clientset that authenticates with the current pair.
func (m *Manager) Client() kubernetes.Interface {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.client
}

// Start loads a valid stored pair or bootstraps one with the bootstrap
// kubeconfig, retrying with jittered backoff, and gives up after StartupTimeout. A
// stored pair that the API server rejects, or whose API server it no longer
// trusts (the node was off through a CA rotation), is replaced through the
// bootstrap kubeconfig too. In ModeKubelet it bootstraps nothing: it waits
// for the kubelet's kubeconfig and pair (see Reload).
func (m *Manager) Start(ctx context.Context) error {
	if m.cfg.Mode == ModeKubelet {
		return m.awaitKubelet(ctx)
	}
	kp, err := m.store.Current()
	if err == nil && kp != nil && m.cfg.Clock.Now().Before(kp.Cert.NotAfter) {
		server, ca, err := m.serverAndCA()
		if err == nil {
			if err := m.use(kp, server, ca); err != nil {
				return err
			}
			if m.refusal(ctx) == notRefused {
				return nil
			}
		}
	}
	ctx, cancel := withClockTimeout(ctx, m.cfg.Clock, m.cfg.StartupTimeout)
	defer cancel()
	retry := newBackoff(certificateBackoff)
	for {
		err := m.bootstrap(ctx)
		if err == nil {
			return nil
		}
		m.cfg.Metrics.renewError()
		select {
		case <-ctx.Done():
			return fmt.Errorf("no client certificate within %s: %w", m.cfg.StartupTimeout, err)
		case <-m.cfg.Clock.After(retry.next()):
		}
	}
}

// refusal asks the API server who the current credentials are (a
// SelfSubjectReview) and says whether, and how, it refuses them; no answer
// within requestTimeout is no refusal.
func (m *Manager) refusal(ctx context.Context) refusal {
	ctx, cancel := m.withRequestTimeout(ctx)
	defer cancel()
	return refusalOf(reviewSelf(ctx, m.Client()))
}

// defaultRequestTimeout bounds each request of the agent that is not a
// watch: an API server, or something on the way, that takes a request and
// never answers must not hold the agent up for good.
const defaultRequestTimeout = 30 * time.Second

// withRequestTimeout is ctx bounded by the manager's requestTimeout, in real
// time: a network's. The client's own rest.Config.Timeout would end its
// watches too.
func (m *Manager) withRequestTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, m.requestTimeout)
}

// reviewSelf creates a SelfSubjectReview through cs: it succeeds when the
// client verifies the API server's certificate and the API server
// authenticates the client.
func reviewSelf(ctx context.Context, cs kubernetes.Interface) error {
	_, err := cs.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	return err
}

// refusal is how an API server refuses a client's credentials.
type refusal int

const (
	// notRefused: the request succeeded, or failed for a reason that says
	// nothing about the credentials (an API server that cannot be reached, a
	// timeout, a 5xx).
	notRefused refusal = iota
	// refusedUnauthorized: the API server answered 401 Unauthorized.
	refusedUnauthorized
	// refusedUntrustedServer: the API server presented a certificate from an
	// authority the client's CA bundle does not hold.
	refusedUntrustedServer
)

func (r refusal) String() string {
	return [...]string{"not refused", "the API server answers 401 Unauthorized",
		"the API server's certificate is signed by an authority the CA bundle does not hold"}[r]
}

// refusalOf says whether, and how, err (from a request) refuses the
// credentials the request was made with.
func refusalOf(err error) refusal {
	var unknownAuthority x509.UnknownAuthorityError
	switch {
	case apierrors.IsUnauthorized(err):
		return refusedUnauthorized
	case errors.As(err, &unknownAuthority):
		return refusedUntrustedServer
	}
	return notRefused
}

// bootstrap requests a certificate with the bootstrap token.
func (m *Manager) bootstrap(ctx context.Context) error {
	unlock, err := m.lockRenewals()
	if err != nil {
		return err
	}
	defer unlock()
	cfg, err := bootstrapConfig(m.cfg.BootstrapKubeconfigPath)
	if err != nil {
		return fmt.Errorf("bootstrap kubeconfig: %w", err)
	}
	// The bundle may be a certificate-authority file: the kubeconfig
	// written after the bootstrap holds its data.
	if err := rest.LoadTLSFiles(cfg); err != nil {
		return fmt.Errorf("bootstrap kubeconfig: %w", err)
	}
	cs, err := m.newClient(cfg)
	if err != nil {
		return err
	}
	return m.renewWith(ctx, cs, cfg.Host, cfg.CAData, "", m.cfg.CertificateTTL, CertificateWaitTimeout)
}

// Renew requests a new certificate now with the current credentials. A
// non-nil caBundle replaces the trust bundle in the kubeconfig.
func (m *Manager) Renew(ctx context.Context, caBundle []byte) error {
	unlock, err := m.lockRenewals()
	if err != nil {
		return err
	}
	defer unlock()
	server, ca, err := m.serverAndCA()
	if err != nil {
		return err
	}
	if caBundle != nil {
		ca = caBundle
	}
	return m.renewWith(ctx, m.Client(), server, ca, "", m.cfg.CertificateTTL, CertificateWaitTimeout)
}

// renewWith requests a certificate for the pending key through cs, and
// waits at most wait for it (requestCertificate). The CSR is named name, or
// from the key when name is empty.
func (m *Manager) renewWith(ctx context.Context, cs kubernetes.Interface, server string, ca []byte, name string, ttl, wait time.Duration) error {
	if cs == nil {
		return errors.New("no client certificate yet: run the agent first so that it bootstraps")
	}
	key, err := m.store.PendingKey(m.cfg.KeyAlgorithm)
	if err != nil {
		return err
	}
	if name == "" {
		if name, err = CSRName(m.cfg.NodeName, key.Public()); err != nil {
			return err
		}
	}
	csr, err := ClientCSR(name, m.cfg.NodeName, key, ttl)
	if err != nil {
		return err
	}
	certPEM, err := m.requestCertificate(ctx, cs, m.store, csr, key, wait)
	if err != nil {
		return err
	}
	if err := m.checkIssued(certPEM); err != nil {
		return discardRefused(m.store, err)
	}
	if err := m.checkAccepted(ctx, server, ca, certPEM, key); err != nil {
		return err
	}
	now := m.cfg.Clock.Now()
	kp, err := m.store.Update(certPEM, key, now)
	if err != nil {
		return err
	}
	if err := m.use(kp, server, ca); err != nil {
		return err
	}
	m.mu.Lock()
	m.renewed = now
	m.mu.Unlock()
	return nil
}

// checkAccepted has the API server at server, trusted with ca, review the
// client with the issued certificate and the pending key, before they
// replace the current pair: a certificate from a CA that API server does not
// trust (a signer ahead of the API server, a replica rolled back) would cut
// the agent off, and in kubelet mode have it take the kubelet's working
// pair, still on disk, for refused credentials and bootstrap again. Any
// failure keeps the current pair; the renewal is tried again later, and
// finds the same CSR, named after the pending key.
func (m *Manager) checkAccepted(ctx context.Context, server string, ca, certPEM []byte, key crypto.Signer) error {
	keyPEM, err := pki.EncodePrivateKey(key)
	if err != nil {
		return err
	}
	cs, err := m.newClient(&rest.Config{Host: server, Timeout: m.requestTimeout,
		TLSClientConfig: rest.TLSClientConfig{CAData: ca, CertData: certPEM, KeyData: keyPEM}})
	if err != nil {
		return err
	}
	// Forbidden comes after authentication: the API server knows the client.
	// The error is not wrapped: a refusal of the new certificate says
	// nothing of the current one, which refusalOf must not take as refused.
	if err := reviewSelf(ctx, cs); err != nil && !apierrors.IsForbidden(err) {
		return fmt.Errorf("the API server at %s with the new client certificate: %v; keeping the current one", server, err) //nolint:errorlint // not the current credentials' refusal
	}
	return nil
}

// checkIssued checks that certPEM, issued on the node's CSR, is a client
// certificate of the node's identity, as the CSR asked: the API server would
// take one for another identity (a signer's bug, a status.certificate written
// by hand) as that identity, and the kubelet, restarted on it, would act as
// someone else, and the agent's next Reload refuse it for good.
func (m *Manager) checkIssued(certPEM []byte) error {
	cert, err := m.issuedToNode(certPEM, "certificate")
	if err != nil {
		return err
	}
	if !slices.Contains(cert.ExtKeyUsage, x509.ExtKeyUsageClientAuth) {
		return issuedRefusal{errors.New("the issued certificate is not for client authentication: keeping the current one")}
	}
	return nil
}

// issuedToNode is the leaf of certPEM, issued on the node's CSR for a
// certificate of kind, when it is the node's identity, system:node:<name> in
// system:nodes; otherwise an issuedRefusal.
func (m *Manager) issuedToNode(certPEM []byte, kind string) (*x509.Certificate, error) {
	certs, err := pki.ParseCertificates(certPEM)
	if err != nil {
		return nil, issuedRefusal{fmt.Errorf("the issued %s: %w; keeping the current one", kind, err)}
	}
	cert, want := certs[0], "system:node:"+m.cfg.NodeName
	if cert.Subject.CommonName != want || !slices.Equal(cert.Subject.Organization, []string{"system:nodes"}) {
		return nil, issuedRefusal{fmt.Errorf("the issued %s is for %q (organizations %q), not %q in system:nodes: keeping the current one",
			kind, cert.Subject.CommonName, cert.Subject.Organization, want)}
	}
	return cert, nil
}

// requestCertificate is RequestCertificate for the pending key of store,
// with its wait for an answer bounded by wait, on the manager's clock (a CSR
// answered as it is created, or found, sets no timer). A denied or failed
// CSR discards the pending key: the answer is final, and a CSR named after
// that key would find it again, so the next attempt starts over with
// another key. The refusal of a CSR of that name for another key (a
// refresh's seed used before) keeps it: it may have a CSR of its own.
func (m *Manager) requestCertificate(ctx context.Context, cs kubernetes.Interface, store *Store,
	csr *certificatesv1.CertificateSigningRequest, key crypto.Signer, wait time.Duration) ([]byte, error) {
	certPEM, err := m.awaitCertificate(ctx, cs, csr, key, wait)
	if (errors.Is(err, ErrDenied) || errors.Is(err, ErrFailed)) && !errors.As(err, new(otherKeysRefusal)) {
		if derr := store.DiscardPendingKey(); derr != nil {
			return nil, errors.Join(err, derr)
		}
	}
	return certPEM, err
}

// awaitCertificate creates or finds csr and waits at most wait for its answer.
func (m *Manager) awaitCertificate(ctx context.Context, cs kubernetes.Interface, csr *certificatesv1.CertificateSigningRequest,
	key crypto.Signer, wait time.Duration) ([]byte, error) {
	createCtx, cancel := m.withRequestTimeout(ctx)
	created, err := createOrFind(createCtx, cs, csr, key)
	cancel()
	if err != nil {
		return nil, err
	}
	if _, answered, _ := outcome(created); !answered {
		var cancel context.CancelFunc
		ctx, cancel = withClockTimeout(ctx, m.cfg.Clock, wait)
		defer cancel()
	}
	return WaitForCertificate(ctx, cs, created)
}

// use writes the kubeconfig for kp (in ModeStandIn; the kubelet owns it in
// ModeKubelet) and switches the manager to it.
func (m *Manager) use(kp *pki.KeyPair, server string, ca []byte) error {
	if m.cfg.Mode != ModeKubelet {
		if err := writeKubeconfig(m.cfg.KubeconfigPath, server, ca, m.store.CurrentPath()); err != nil {
			return err
		}
	}
	cs, err := m.newClient(&rest.Config{Host: server, TLSClientConfig: rest.TLSClientConfig{
		CAData: ca, CertFile: m.store.CurrentPath(), KeyFile: m.store.CurrentPath(),
	}})
	if err != nil {
		return err
	}
	m.mu.Lock()
	m.current, m.client = kp, cs
	m.mu.Unlock()
	m.cfg.Metrics.setExpiry(kp.Cert.NotAfter)
	return nil
}

// serverAndCA reads the server and trust bundle from the written kubeconfig,
// or else from the bootstrap kubeconfig: certificate-authority-data, or the
// certificate-authority file it names (as the kubelet writes it after TLS
// bootstrapping).
func (m *Manager) serverAndCA() (string, []byte, error) {
	for _, path := range []string{m.cfg.KubeconfigPath, m.cfg.BootstrapKubeconfigPath} {
		if path == "" {
			continue
		}
		if _, err := os.Stat(path); err != nil {
			continue
		}
		info, err := readKubeconfig(path)
		if err != nil {
			return "", nil, err
		}
		return info.Server, info.CA, nil
	}
	return "", nil, errors.New("neither a kubeconfig nor a bootstrap kubeconfig to find the API server in")
}

// Run rotates the certificate at a jittered 70-90% of its lifetime, but no
// sooner than MinRenewalInterval after the last successful renewal (see
// NextRotation), with jittered exponential backoff after failures, until ctx
// ends. In ModeKubelet the kubelet rotates: Run only waits for ctx to end.
func (m *Manager) Run(ctx context.Context) {
	if m.cfg.Mode == ModeKubelet {
		<-ctx.Done()
		return
	}
	retry := newBackoff(certificateBackoff)
	jitter := rand.Float64()
	for ctx.Err() == nil {
		// Evaluated again after every wait: an in-place renewal or a refresh
		// may have replaced the certificate in the meantime.
		if wait := m.nextRotation(jitter).Sub(m.cfg.Clock.Now()); wait > 0 {
			select {
			case <-ctx.Done():
				return
			case <-m.cfg.Clock.After(wait):
			}
			continue
		}
		err := m.Renew(ctx, nil)
		if err != nil && (refusalOf(err) != notRefused || !m.cfg.Clock.Now().Before(m.Current().Cert.NotAfter)) {
			// The API server no longer takes this certificate, or serves one
			// the kubeconfig does not trust (the certificate expired, or the
			// node missed a CA rotation): start over with the token, as
			// Start does.
			err = m.bootstrap(ctx)
		}
		if err == nil {
			retry.reset()
			jitter = rand.Float64()
			continue
		}
		m.cfg.Metrics.renewError()
		select {
		case <-ctx.Done():
			return
		case <-m.cfg.Clock.After(retry.next()):
		}
	}
}

// nextRotation is NextRotation for the current certificate.
func (m *Manager) nextRotation(jitter float64) time.Time {
	m.mu.Lock()
	defer m.mu.Unlock()
	return NextRotation(m.current.Cert.NotBefore, m.current.Cert.NotAfter, m.renewed, m.cfg.MinRenewalInterval, jitter)
}

// RotationDeadline is when a certificate valid from notBefore to notAfter is
// renewed, for a jitter in [0, 1).
func RotationDeadline(notBefore, notAfter time.Time, jitter float64) time.Time {
	life := notAfter.Sub(notBefore)
	return notBefore.Add(time.Duration(float64(life) * (rotationStart + rotationWindow*jitter)))
}

// NextRotation is when to renew a certificate valid from notBefore to
// notAfter that was obtained at renewed (zero when unknown), for a jitter in
// [0, 1): its RotationDeadline, but not sooner than minInterval after
// renewed. The deadline is on the signer's clock and renewed on the node's:
// a node whose clock runs ahead, or a signer that issues short-lived
// certificates, finds each new certificate already due, and the floor keeps
// it from renewing in a loop.
//
// The floor is capped at half of what the certificate had left when it
// arrived, its lifetime less pki.Backdate (how far kube-controller-manager and
// Carousel backdate NotBefore), so that it never lets a certificate expire
// before it is renewed.
func NextRotation(notBefore, notAfter, renewed time.Time, minInterval time.Duration, jitter float64) time.Time {
	deadline := RotationDeadline(notBefore, notAfter, jitter)
	left := max(notAfter.Sub(notBefore)-pki.Backdate, 0)
	floor := renewed.Add(min(minInterval, left/2))
	if deadline.Before(floor) {
		return floor
	}
	return deadline
}

func writeKubeconfig(path, server string, ca []byte, pairPath string) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["default"] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: ca}
	cfg.AuthInfos["default-auth"] = &clientcmdapi.AuthInfo{ClientCertificate: pairPath, ClientKey: pairPath}
	cfg.Contexts["default"] = &clientcmdapi.Context{Cluster: "default", AuthInfo: "default-auth"}
	cfg.CurrentContext = "default"
	data, err := clientcmd.Write(*cfg)
	if err != nil {
		return err
	}
	return writeAtomic(path, data)
}
