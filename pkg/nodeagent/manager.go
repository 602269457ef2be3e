package nodeagent

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	authenticationv1 "k8s.io/api/authentication/v1"
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
	maxBackoff     = 5 * time.Minute
)

// Config configures a certificate manager.
type Config struct {
	NodeName string
	// CertDir holds the key pairs (the kubelet's /var/lib/kubelet/pki).
	CertDir string
	// KubeconfigPath is the kubeconfig the manager writes, pointing at the
	// current pair; BootstrapKubeconfigPath the one with a bootstrap token.
	KubeconfigPath, BootstrapKubeconfigPath string
	KeyAlgorithm                            pki.KeyAlgorithm
	// CertificateTTL is requested as the CSR's expirationSeconds; 0 leaves it to the signer.
	CertificateTTL time.Duration
	// StartupTimeout bounds Start: KEP-266 gives up after five minutes.
	StartupTimeout time.Duration
	Clock          clock.WithTicker
	Metrics        *Metrics
}

// Manager obtains and rotates a node's client certificate.
type Manager struct {
	cfg   Config
	store *Store

	mu      sync.Mutex
	current *pki.KeyPair
	client  kubernetes.Interface // built from the kubeconfig for current

	// renewing serialises renewals (rotation, in-place renewal, refresh):
	// they share the pending key and the kubeconfig.
	renewing sync.Mutex
}

// NewManager returns a manager; call Start, then Run.
func NewManager(cfg Config) *Manager {
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	if cfg.KeyAlgorithm == "" {
		cfg.KeyAlgorithm = pki.ECDSAP256
	}
	if cfg.StartupTimeout == 0 {
		cfg.StartupTimeout = 5 * time.Minute
	}
	return &Manager{cfg: cfg, store: &Store{Dir: cfg.CertDir}}
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
// kubeconfig, retrying with backoff, and gives up after StartupTimeout. A
// stored pair that the API server rejects, or whose API server it no longer
// trusts (the node was off through a CA rotation), is replaced through the
// bootstrap kubeconfig too.
func (m *Manager) Start(ctx context.Context) error {
	kp, err := m.store.Current()
	if err == nil && kp != nil && m.cfg.Clock.Now().Before(kp.Cert.NotAfter) {
		server, ca, err := m.serverAndCA()
		if err == nil {
			if err := m.use(kp, server, ca); err != nil {
				return err
			}
			if !m.rejected(ctx) {
				return nil
			}
		}
	}
	// The deadline runs on the manager's clock, so tests can step it.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	deadline := m.cfg.Clock.NewTimer(m.cfg.StartupTimeout)
	defer deadline.Stop()
	go func() {
		select {
		case <-deadline.C():
			cancel()
		case <-ctx.Done():
		}
	}()
	var lastErr error
	for backoff := time.Second; ; backoff = min(2*backoff, maxBackoff) {
		if lastErr = m.bootstrap(ctx); lastErr == nil {
			return nil
		}
		m.cfg.Metrics.renewError()
		select {
		case <-ctx.Done():
			return fmt.Errorf("no client certificate within %s: %w", m.cfg.StartupTimeout, lastErr)
		case <-m.cfg.Clock.After(backoff):
		}
	}
}

// rejected reports whether the API server refuses the current credentials
// (401) or presents a certificate they do not trust. An API server that
// cannot be reached says nothing about the credentials.
func (m *Manager) rejected(ctx context.Context) bool {
	_, err := m.Client().AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	var unknownAuthority x509.UnknownAuthorityError
	return apierrors.IsUnauthorized(err) || errors.As(err, &unknownAuthority)
}

// bootstrap requests a certificate with the bootstrap token.
func (m *Manager) bootstrap(ctx context.Context) error {
	m.renewing.Lock()
	defer m.renewing.Unlock()
	cfg, err := clientcmd.BuildConfigFromFlags("", m.cfg.BootstrapKubeconfigPath)
	if err != nil {
		return fmt.Errorf("bootstrap kubeconfig: %w", err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	return m.renewWith(ctx, cs, cfg.Host, cfg.CAData, "", m.cfg.CertificateTTL)
}

// Renew requests a new certificate now with the current credentials. A
// non-nil caBundle replaces the trust bundle in the kubeconfig.
func (m *Manager) Renew(ctx context.Context, caBundle []byte) error {
	m.renewing.Lock()
	defer m.renewing.Unlock()
	server, ca, err := m.serverAndCA()
	if err != nil {
		return err
	}
	if caBundle != nil {
		ca = caBundle
	}
	return m.renewWith(ctx, m.Client(), server, ca, "", m.cfg.CertificateTTL)
}

// renewWith requests a certificate for the pending key through cs. The CSR
// is named name, or from the key when name is empty.
func (m *Manager) renewWith(ctx context.Context, cs kubernetes.Interface, server string, ca []byte, name string, ttl time.Duration) error {
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
	certPEM, err := RequestCertificate(ctx, cs, csr, key)
	if err != nil {
		return err
	}
	kp, err := m.store.Update(certPEM, key, m.cfg.Clock.Now())
	if err != nil {
		return err
	}
	return m.use(kp, server, ca)
}

// use writes the kubeconfig for kp and switches the manager to it.
func (m *Manager) use(kp *pki.KeyPair, server string, ca []byte) error {
	if err := writeKubeconfig(m.cfg.KubeconfigPath, server, ca, m.store.CurrentPath()); err != nil {
		return err
	}
	cs, err := kubernetes.NewForConfig(&rest.Config{Host: server, TLSClientConfig: rest.TLSClientConfig{
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
// or else from the bootstrap kubeconfig.
func (m *Manager) serverAndCA() (string, []byte, error) {
	for _, path := range []string{m.cfg.KubeconfigPath, m.cfg.BootstrapKubeconfigPath} {
		if path == "" {
			continue
		}
		if _, err := os.Stat(path); err != nil {
			continue
		}
		cfg, err := clientcmd.BuildConfigFromFlags("", path)
		if err != nil {
			return "", nil, err
		}
		return cfg.Host, cfg.CAData, nil
	}
	return "", nil, errors.New("neither a kubeconfig nor a bootstrap kubeconfig to find the API server in")
}

// Run rotates the certificate at a jittered 70-90% of its lifetime, with
// exponential backoff after failures, until ctx ends.
func (m *Manager) Run(ctx context.Context) {
	backoff := time.Second
	for {
		deadline := RotationDeadline(m.Current().Cert.NotBefore, m.Current().Cert.NotAfter, rand.Float64())
		select {
		case <-ctx.Done():
			return
		case <-m.cfg.Clock.After(deadline.Sub(m.cfg.Clock.Now())):
		}
		for {
			err := m.Renew(ctx, nil)
			if err != nil && (apierrors.IsUnauthorized(err) || !m.cfg.Clock.Now().Before(m.Current().Cert.NotAfter)) {
				// The API server no longer takes this certificate (it expired,
				// or the node missed a CA rotation): start over with the token.
				err = m.bootstrap(ctx)
			}
			if err == nil {
				backoff = time.Second
				break
			}
			m.cfg.Metrics.renewError()
			select {
			case <-ctx.Done():
				return
			case <-m.cfg.Clock.After(backoff):
			}
			backoff = min(2*backoff, maxBackoff)
		}
	}
}

// RotationDeadline is when a certificate valid from notBefore to notAfter is
// renewed, for a jitter in [0, 1).
func RotationDeadline(notBefore, notAfter time.Time, jitter float64) time.Time {
	life := notAfter.Sub(notBefore)
	return notBefore.Add(time.Duration(float64(life) * (rotationStart + rotationWindow*jitter)))
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

// Metrics are the node agent's certificate metrics. A nil *Metrics records nothing.
type Metrics struct {
	expiry      prometheus.Gauge
	renewErrors prometheus.Counter
}

// NewMetrics creates the metrics and registers them with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		expiry: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "carousel_node_agent_client_certificate_expiration_seconds",
			Help: "NotAfter of the node's current client certificate, as a Unix timestamp.",
		}),
		renewErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "carousel_node_agent_client_certificate_renew_errors_total",
			Help: "Failed attempts to obtain or renew the node's client certificate.",
		}),
	}
	reg.MustRegister(m.expiry, m.renewErrors)
	return m
}

func (m *Metrics) setExpiry(t time.Time) {
	if m != nil {
		m.expiry.Set(float64(t.Unix()))
	}
}

func (m *Metrics) renewError() {
	if m != nil {
		m.renewErrors.Inc()
	}
}
