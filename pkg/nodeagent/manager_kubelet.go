package nodeagent

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/carousel-dev/carousel/pkg/noderenewal"
	"github.com/carousel-dev/carousel/pkg/pki"
)

var (
	// errNoKubeletCredentials: the kubelet has not bootstrapped yet.
	errNoKubeletCredentials = errors.New("the kubelet has not written its kubeconfig and client certificate yet")
	// errNotTheKubeletsCredentials: the flags do not name the kubelet's
	// credentials, or the node the kubelet is.
	errNotTheKubeletsCredentials = errors.New("not the kubelet's credentials")
)

// awaitKubelet waits, with backoff and at most StartupTimeout, until the
// kubelet bootstrapped: its kubeconfig and current pair exist (Reload). A
// kubelet whose credentials are not the ones the agent renews is an error
// at once.
//
// A re-bootstrap of the kubelet that the agent left unfinished (see
// rebootstrap.go) is not waited for: the kubelet has credentials again only
// once the agent restarted it, which Node.WatchRenewals does. Until then the
// manager has none (Current is nil).
func (m *Manager) awaitKubelet(ctx context.Context) error {
	ctx, cancel := withClockTimeout(ctx, m.cfg.Clock, m.cfg.StartupTimeout)
	defer cancel()
	err := pollUntil(ctx, m.cfg.Clock, newBackoff(kubeletBackoff), func(context.Context) error {
		err := m.reloadUntilTheKubelets()
		if errors.Is(err, errNoKubeletCredentials) && rebootstrapUnfinished(m.cfg.CertDir) {
			return nil
		}
		return err
	})
	if err != nil && ctx.Err() != nil {
		return fmt.Errorf("no kubelet credentials within %s: %w", m.cfg.StartupTimeout, err)
	}
	return err
}

// reloadUntilTheKubelets is Reload for pollUntil: credentials that are not
// the kubelet's end the poll at once.
func (m *Manager) reloadUntilTheKubelets() error {
	err := m.Reload()
	if errors.Is(err, errNotTheKubeletsCredentials) {
		return permanentError{err}
	}
	return err
}

// Reload reads, in ModeKubelet, the kubelet's kubeconfig and current pair
// from disk again (the kubelet rotates them) and switches the manager's
// client to them. It checks that they are the ones the agent renews: the
// kubeconfig's client certificate is the pair in CertDir, and the pair is
// the node's. In ModeStandIn the manager owns them and Reload does nothing.
func (m *Manager) Reload() error {
	if m.cfg.Mode != ModeKubelet {
		return nil
	}
	info, err := readKubeconfig(m.cfg.KubeconfigPath)
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%w: %w", errNoKubeletCredentials, err)
	}
	if err != nil {
		return err
	}
	if info.Insecure {
		// The agent verifies the API server against the cluster bundle: it
		// would take this server for one that refuses the kubelet.
		return fmt.Errorf("%w: the kubelet's kubeconfig %s skips the verification of the API server (insecure-skip-tls-verify): "+
			"give the kubelet a bootstrap kubeconfig with the cluster CA bundle as certificate-authority-data", errNotTheKubeletsCredentials, m.cfg.KubeconfigPath)
	}
	if info.TLSServerName != "" || info.ProxyURL != "" {
		// The probe of the API server would pass where every request of
		// the agent's fails.
		return fmt.Errorf("%w: the kubeconfig %s sets tls-server-name or proxy-url, which the agent's requests do not apply (the kubelet writes neither when it bootstraps): "+
			"give the kubelet a server address its API server's certificate names, reached without a proxy", errNotTheKubeletsCredentials, m.cfg.KubeconfigPath)
	}
	if err := m.checkKubeletPair(info); err != nil {
		return err
	}
	kp, err := m.store.Current()
	if err != nil {
		return err
	}
	if kp == nil {
		return fmt.Errorf("%w: no %s", errNoKubeletCredentials, m.store.CurrentPath())
	}
	if cn, want := kp.Cert.Subject.CommonName, "system:node:"+m.cfg.NodeName; cn != want {
		return fmt.Errorf("%w: the kubelet's client certificate is for %q, not %q: pass the kubelet's node name as --node-name",
			errNotTheKubeletsCredentials, cn, want)
	}
	return m.use(kp, info.Server, info.CA)
}

// checkKubeletPair checks that the kubeconfig authenticates with the pair the
// agent renews, <CertDir>/kubelet-client-current.pem, as the kubelet's does
// after TLS bootstrapping.
func (m *Manager) checkKubeletPair(info kubeconfigInfo) error {
	want, err := filepath.Abs(m.store.CurrentPath())
	if err != nil {
		return err
	}
	for _, p := range []string{info.ClientCertificate, info.ClientKey} {
		got, err := filepath.Abs(p)
		if err != nil || p == "" || filepath.Clean(got) != filepath.Clean(want) {
			return fmt.Errorf("%w: the kubelet's kubeconfig %s authenticates with %q, not with the rotated pair %s: "+
				"pass the kubelet's --kubeconfig and --cert-dir", errNotTheKubeletsCredentials, m.cfg.KubeconfigPath, p, want)
		}
	}
	return nil
}

// RenewKubelet requests, in ModeKubelet, a new client certificate for the
// kubelet with its current credentials as read from disk, and stores it as
// the kubelet's current pair. The kubelet loads it when it restarts.
func (m *Manager) RenewKubelet(ctx context.Context) error {
	if m.cfg.Mode != ModeKubelet {
		return errors.New("RenewKubelet is for ModeKubelet")
	}
	unlock, err := m.lockRenewals()
	if err != nil {
		return err
	}
	defer unlock()
	if err := m.Reload(); err != nil {
		return err
	}
	info, err := readKubeconfig(m.cfg.KubeconfigPath)
	if err != nil {
		return err
	}
	return m.renewWith(ctx, m.Client(), info.Server, info.CA, "", m.cfg.CertificateTTL, CertificateWaitTimeout)
}

// RenewKubeletServing requests, in ModeKubelet and as the node, a serving
// certificate for the kubelet with the Node's current addresses, the way the
// kubelet asks for one, and stores it as the kubelet's current serving pair
// (kubelet-server-current.pem). The kubelet loads it when it restarts, so it
// serves again at once instead of waiting for a CSR of its own to be
// approved; until then it keeps serving the one it has. The certificate is
// stored only when it is the node's, for server authentication, and
// verifies against kubeletBundle, the node trust bundle's kubelet bundle
// (checkIssuedServing); otherwise the pending key is discarded, and the next
// attempt asks again with another, after the delay that follows a denial.
func (m *Manager) RenewKubeletServing(ctx context.Context, kubeletBundle []byte) (*pki.KeyPair, error) {
	if m.cfg.Mode != ModeKubelet {
		return nil, errors.New("RenewKubeletServing is for ModeKubelet")
	}
	unlock, err := m.lockRenewals()
	if err != nil {
		return nil, err
	}
	defer unlock()
	cs := m.Client()
	getCtx, cancel := m.withRequestTimeout(ctx)
	node, err := cs.CoreV1().Nodes().Get(getCtx, m.cfg.NodeName, metav1.GetOptions{})
	cancel()
	if err != nil {
		return nil, fmt.Errorf("reading node %s for its addresses: %w", m.cfg.NodeName, err)
	}
	store := &Store{Dir: m.cfg.CertDir, Name: ServingStore}
	key, err := store.PendingKey(m.cfg.KeyAlgorithm)
	if err != nil {
		return nil, err
	}
	name, err := CSRName(m.cfg.NodeName, key.Public())
	if err != nil {
		return nil, err
	}
	csr, err := ServingCSR(name, m.cfg.NodeName, key, node.Status.Addresses)
	if err != nil {
		return nil, err
	}
	certPEM, err := m.requestCertificate(ctx, cs, store, csr, key, CertificateWaitTimeout)
	if err != nil {
		return nil, err
	}
	if err := m.checkIssuedServing(certPEM, kubeletBundle); err != nil {
		if refusedRequest(err) {
			return nil, discardRefused(store, err)
		}
		return nil, err // the bundle, not the certificate: the next attempt takes it as it is
	}
	return store.Update(certPEM, key, m.cfg.Clock.Now())
}

// checkIssuedServing refuses a serving certificate the kubelet must not be
// restarted on, as checkIssued does a client one: one for another identity
// than the node's, one not for server authentication, or one that does not
// verify against the kubelet bundle (a signer's bug, a status.certificate
// written by hand), with which the API server would refuse the kubelet's
// logs, exec and metrics until Carousel asked again.
func (m *Manager) checkIssuedServing(certPEM, kubeletBundle []byte) error {
	cert, err := m.issuedToNode(certPEM, "serving certificate")
	if err != nil {
		return err
	}
	roots, err := pki.ParseCertificates(kubeletBundle)
	if err != nil {
		return fmt.Errorf("the kubelet bundle: %w", err)
	}
	// Judged no earlier than it is valid from: a node whose clock is behind
	// the signer's would refuse every certificate, each backdated by only
	// five minutes; the API server judges it by its own clock.
	at := m.cfg.Clock.Now()
	if at.Before(cert.NotBefore) {
		at = cert.NotBefore
	}
	if err := verifyServing(cert, certPEM, roots, at); err != nil {
		return issuedRefusal{fmt.Errorf("the issued serving certificate (issuer %s) does not verify against the kubelet bundle %s for server authentication: %w; keeping the current one",
			hex.EncodeToString(cert.AuthorityKeyId), noderenewal.Digest(kubeletBundle), err)}
	}
	return nil
}
