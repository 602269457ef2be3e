package nodeagent

import (
	"context"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/carousel-dev/carousel/pkg/bootstrap"
	"github.com/carousel-dev/carousel/pkg/noderenewal"
	"github.com/carousel-dev/carousel/pkg/pki"
)

// renewal carries out one renewal request on the node, as named, ordered
// steps. Each step is safe to repeat: the request stays pending on the Node
// until the last step reports it, and a renewal interrupted anywhere (a
// crash, a failed step) is carried out again from the first step, with the
// progress record telling what was already done.
//
// The same steps, fewer of them, bring a kubelet that bootstrapped again in
// line with the node trust bundles after a re-bootstrap (resyncSteps).
type renewal struct {
	n *Node
	// label starts the log lines: "renewal <request>", or rebootstrapLabel.
	label string
	// record names the progress record (progress.Request).
	record string
	// req is the request carried out; zero for a resync.
	req     noderenewal.Request
	started time.Time

	trust noderenewal.Trust
	// progress is the progress record; readTrust loads it when nil.
	progress *progress
}

type renewalStep struct {
	name string
	run  func(context.Context) error
}

// renewalSteps are the steps of a renewal request for the node's mode.
func (r *renewal) renewalSteps() []renewalStep {
	steps := []renewalStep{
		{"read the node trust bundles", r.readTrust},
		{checkServerStep, r.checkServer},
		{"install the trust bundles", r.installTrust},
		{"renew the client certificate", r.renewClient},
	}
	if r.n.Kubelet != nil {
		steps = append(steps,
			renewalStep{"renew the kubelet's serving certificate", r.renewServing},
			renewalStep{"restart the kubelet", r.restartKubelet},
			renewalStep{"wait for the kubelet", r.waitForKubelet},
		)
	}
	return append(steps, renewalStep{"report on the Node", r.report})
}

// resyncSteps bring a kubelet (ModeKubelet) that has just bootstrapped
// again in line with the node trust bundles, the way a renewal does, but
// without renewing the client certificate (the bootstrap just obtained one,
// from the current client CA): install the bundles (the clientCAFile above
// all, which the bootstrap leaves as it was), renew the serving certificate
// only when it does not verify against the kubelet bundle, restart the
// kubelet when something changed that it does not reload by itself, and
// report on the Node what it now uses, answering no request (none asked for
// it): what an earlier report said is stale, and the old-CA usage gate
// takes a Node for moved by what it reports.
func (r *renewal) resyncSteps() []renewalStep {
	return []renewalStep{
		{"read the node trust bundles", r.readTrust},
		{checkServerStep, r.checkServer},
		{"install the trust bundles", r.installTrust},
		{"renew the kubelet's serving certificate", r.renewUntrustedServing},
		{"restart the kubelet", r.restartKubelet},
		{"wait for the kubelet", r.waitForKubelet},
		{"report on the Node", r.report},
	}
}

// run runs steps in order and stops at the first that fails.
func (r *renewal) run(ctx context.Context, steps []renewalStep) error {
	for _, s := range steps {
		if err := s.run(ctx); err != nil {
			return fmt.Errorf("%s: %w", s.name, err)
		}
	}
	return nil
}

// renew carries out req.
func (n *Node) renew(ctx context.Context, req noderenewal.Request) error {
	r := &renewal{n: n, label: "renewal " + req.String(), record: req.String(), req: req, started: n.Manager.cfg.Clock.Now()}
	if err := r.run(ctx, r.renewalSteps()); err != nil {
		return err
	}
	if err := clearProgress(r.certDir()); err != nil {
		return err
	}
	n.Manager.cfg.Metrics.renewalDone(n.Manager.cfg.Clock.Since(r.started))
	return nil
}

func (r *renewal) logf(step, format string, args ...any) {
	r.n.logf("%s: %s: %s", r.label, step, fmt.Sprintf(format, args...))
}

func (r *renewal) certDir() string { return r.n.Manager.cfg.CertDir }

// readTrust reads the bundles Carousel publishes for nodes from
// kube-system/carousel-node-trust, as the node, over the connection it
// already trusts, and the progress record of the request.
func (r *renewal) readTrust(ctx context.Context) error {
	m := r.n.Manager
	if err := m.Reload(); err != nil {
		return err
	}
	getCtx, cancel := m.withRequestTimeout(ctx)
	cm, err := m.Client().CoreV1().ConfigMaps(metav1.NamespaceSystem).Get(getCtx, bootstrap.NodeTrustConfigMap, metav1.GetOptions{})
	cancel()
	if err != nil {
		return fmt.Errorf("reading %s/%s: %w", metav1.NamespaceSystem, bootstrap.NodeTrustConfigMap, err)
	}
	r.trust = noderenewal.Trust{Cluster: []byte(cm.Data[bootstrap.NodeTrustKeyClusterCA]), Kubelet: []byte(cm.Data[bootstrap.NodeTrustKeyKubeletCA])}
	for key, bundle := range map[string][]byte{bootstrap.NodeTrustKeyClusterCA: r.trust.Cluster, bootstrap.NodeTrustKeyKubeletCA: r.trust.Kubelet} {
		if _, err := pki.ParseCertificates(bundle); err != nil {
			return fmt.Errorf("%s/%s key %s: %w", metav1.NamespaceSystem, bootstrap.NodeTrustConfigMap, key, err)
		}
	}
	if r.progress == nil {
		if r.progress, err = loadProgress(r.certDir(), r.record); err != nil {
			return err
		}
	}
	r.logf("read the node trust bundles", "cluster bundle %s, kubelet bundle %s", noderenewal.Digest(r.trust.Cluster), noderenewal.Digest(r.trust.Kubelet))
	return nil
}

const checkServerStep = "check the API server against the cluster bundle"

// checkServer makes one request of the API server with the kubeconfig as it
// is, but trusting the published cluster bundle alone, before installTrust
// writes that bundle into the kubeconfigs: one that does not verify the
// certificate the API server serves (published before the API server
// serves a certificate from the new cluster CA, or simply wrong) would cut
// the kubelet and the agent off the API server, and so from the corrected
// bundle too. Any answer of the API server, a refusal included, proves the
// handshake; only a failed connection stops the renewal, which is tried
// again later.
func (r *renewal) checkServer(context.Context) error {
	host, err := r.probeServer(r.n.Manager.cfg.KubeconfigPath)
	if err != nil && host == "" {
		return fmt.Errorf("%s: %w; not installing the published cluster bundle %s", r.n.Manager.cfg.KubeconfigPath, err, noderenewal.Digest(r.trust.Cluster))
	}
	if err != nil {
		return fmt.Errorf("the API server at %s, with only the published cluster bundle %s trusted: %w; not installing it",
			host, noderenewal.Digest(r.trust.Cluster), err)
	}
	r.logf(checkServerStep, "the API server at %s serves a certificate the bundle verifies", host)
	return nil
}

// probeServer makes one anonymous request of the API server of the
// kubeconfig at path, trusting the published cluster bundle alone, and
// returns that server's address. Any answer of the API server, a refusal
// included, proves the handshake, which is all it asks: it sends none of the
// kubeconfig's credentials and runs none of its plugins (a bootstrap
// kubeconfig is copied from a Secret its tenant writes), and a
// certificate-authority file that is gone does not stop it.
func (r *renewal) probeServer(path string) (host string, err error) {
	raw, err := (&clientcmd.ClientConfigLoadingRules{ExplicitPath: path}).Load()
	if err != nil {
		return "", err
	}
	name, cluster, err := bootstrap.CurrentCluster(raw)
	if err != nil {
		return "", err
	}
	if cluster.Server == "" {
		return "", fmt.Errorf("cluster %q names no server", name)
	}
	cfg := &rest.Config{Host: cluster.Server, Timeout: checkServerTimeout,
		TLSClientConfig: rest.TLSClientConfig{CAData: r.trust.Cluster, ServerName: cluster.TLSServerName}}
	if cluster.ProxyURL != "" {
		proxy, err := url.Parse(cluster.ProxyURL)
		if err != nil {
			return cluster.Server, fmt.Errorf("proxy-url: %w", err)
		}
		cfg.Proxy = http.ProxyURL(proxy)
	}
	cs, err := r.n.Manager.newClient(cfg)
	if err != nil {
		return cfg.Host, err
	}
	if _, err := cs.Discovery().ServerVersion(); err != nil && !errors.As(err, new(apierrors.APIStatus)) {
		return cfg.Host, err
	}
	return cfg.Host, nil
}

// bundleVerifiesBootstrapServer says whether the published cluster bundle
// verifies the API server of the bootstrap kubeconfig at path. checkServer
// asked the kubeconfig's server; a bootstrap kubeconfig of another address
// (another load balancer, whose certificate an authority Carousel does not
// manage may sign) is asked too, and left as it is, logged, when the bundle
// does not verify its server (written, it would close the kubelet's way back
// in, re-bootstrap) or the server cannot be asked (one used only to
// provision, or taken down) or does not parse: the renewal, which the
// kubelet's own kubeconfig needs, goes on. One whose certificate-authority
// file is gone is asked trusting the bundle all the same, and written when
// the bundle verifies its server, which gives it the bundle as data.
func (r *renewal) bundleVerifiesBootstrapServer(path string) (bool, error) {
	server, err := kubeconfigServer(path)
	if err != nil {
		r.logf(installTrustStep, "%s cannot be read: %v: left as it is", path, err)
		return false, nil
	}
	kubeconfig, err := readKubeconfig(r.n.Manager.cfg.KubeconfigPath)
	if err != nil {
		return false, err
	}
	if server == kubeconfig.Server {
		return true, nil
	}
	host, err := r.probeServer(path)
	if err != nil {
		r.logf(installTrustStep, "%s: its API server at %s, with only the published cluster bundle %s trusted: %v: left as it is",
			path, host, noderenewal.Digest(r.trust.Cluster), err)
		return false, nil
	}
	return true, nil
}

// checkServerTimeout bounds checkServer's request.
const checkServerTimeout = 30 * time.Second

const installTrustStep = "install the trust bundles"

// installTrust writes the cluster bundle into the kubeconfig and the
// bootstrap kubeconfig (when the bundle verifies its server), and (in
// ModeKubelet) the kubelet bundle into the kubelet's clientCAFile: each file
// atomically, and only when it differs.
func (r *renewal) installTrust(context.Context) error {
	const step = installTrustStep
	m := r.n.Manager
	type target struct {
		what, path string
		perm       os.FileMode
		edit       func([]byte) ([]byte, error)
		changed    *bool
	}
	targets := []target{
		{"cluster bundle", m.cfg.KubeconfigPath, 0o600, kubeconfigCA(r.trust.Cluster), &r.progress.Changes.KubeconfigCA},
	}
	if p := m.cfg.BootstrapKubeconfigPath; p != "" {
		if _, err := os.Stat(p); err == nil {
			verifies, err := r.bundleVerifiesBootstrapServer(p)
			if err != nil {
				return err
			}
			if verifies {
				targets = append(targets, target{"cluster bundle", p, 0o600, kubeconfigCA(r.trust.Cluster), &r.progress.Changes.BootstrapKubeconfigCA})
			}
		}
	}
	if r.n.Kubelet != nil {
		targets = append(targets, target{"kubelet bundle", r.n.Kubelet.Config.ClientCAFile, 0o644, replaceWith(r.trust.Kubelet), &r.progress.Changes.ClientCAFile})
	}
	for _, t := range targets {
		edit, err := planFile(t.path, t.perm, t.edit)
		if err != nil {
			return err
		}
		if edit == nil {
			r.logf(step, "%s already has the %s", t.path, t.what)
			continue
		}
		// Recorded first: a crash after the write must still restart the
		// kubelet. A restart of an earlier attempt of this request came
		// before this write: for a file the kubelet loads only at start
		// (RestartReasons), it restarts again.
		*t.changed = true
		if t.changed == &r.progress.Changes.KubeconfigCA {
			r.progress.Restarted = false
		}
		if err := r.progress.save(r.certDir()); err != nil {
			return err
		}
		if err := edit.apply(); err != nil {
			return err
		}
		r.logf(step, "wrote the %s into %s", t.what, edit.path)
	}
	return nil
}

// renewClient obtains a new client certificate by CSR, as the node, over a
// connection that trusts the new cluster bundle, and stores it in the cert
// dir, once per request.
func (r *renewal) renewClient(ctx context.Context) error {
	const step = "renew the client certificate"
	m := r.n.Manager
	if r.progress.ClientRenewed {
		r.logf(step, "already renewed for this request")
		return nil
	}
	var err error
	if r.n.Kubelet != nil {
		err = m.RenewKubelet(ctx)
	} else {
		err = m.Renew(ctx, r.trust.Cluster)
	}
	if err != nil {
		return err
	}
	r.progress.ClientRenewed, r.progress.Changes.ClientPair = true, true
	if err := r.progress.save(r.certDir()); err != nil {
		return err
	}
	cert := m.Current().Cert
	r.logf(step, "stored a certificate from issuer %s, valid until %s", hex.EncodeToString(cert.AuthorityKeyId), cert.NotAfter.Format(time.RFC3339))
	return nil
}

// renewServing obtains a serving certificate for the kubelet by CSR, as the
// node, once per request, and stores it as the kubelet's current serving
// pair: a request means new credentials for the phase, and Carousel signs
// serving certificates with the kubelet CA of the phase (one from the old
// kubelet CA still verifies against the Preparing bundle, but not against
// the one Finalizing leaves). The kubelet keeps serving its old certificate
// until it restarts with the new one, so a CSR that waits for an
// administrator's approval never leaves it without one.
func (r *renewal) renewServing(ctx context.Context) error {
	const step = "renew the kubelet's serving certificate"
	if r.progress.ServingRenewed {
		r.logf(step, "already renewed for this request")
		return nil
	}
	// Recorded first: a crash after the pair is stored must still restart the kubelet.
	r.progress.Changes.ServingPair = true
	if err := r.progress.save(r.certDir()); err != nil {
		return err
	}
	kp, err := r.n.Manager.RenewKubeletServing(ctx, r.trust.Kubelet)
	if err != nil {
		return err
	}
	r.progress.ServingRenewed = true
	if err := r.progress.save(r.certDir()); err != nil {
		return err
	}
	r.logf(step, "stored a certificate from issuer %s for %s, valid until %s", hex.EncodeToString(kp.Cert.AuthorityKeyId),
		strings.Join(append(kp.Cert.DNSNames, ipStrings(kp.Cert.IPAddresses)...), ", "), kp.Cert.NotAfter.Format(time.RFC3339))
	return nil
}

// renewUntrustedServing renews the kubelet's serving certificate, as
// renewServing, only when it does not verify against the kubelet bundle
// read, or there is none: a resync has no request that asks for new
// credentials, only a node to bring in line.
func (r *renewal) renewUntrustedServing(ctx context.Context) error {
	const step = "renew the kubelet's serving certificate"
	if !r.progress.ServingRenewed {
		path := filepath.Join(r.certDir(), servingCurrentFile)
		state, why, err := checkServing(path, r.trust.Kubelet, r.n.Manager.cfg.Clock.Now())
		if err != nil {
			return err
		}
		if state == servingTrusted {
			r.logf(step, "not needed: %s verifies against the kubelet bundle", path)
			return nil
		}
		if why != nil {
			r.logf(step, "needed: %s is %s: %v", path, state, why)
		} else {
			r.logf(step, "needed: %s is %s", path, state)
		}
	}
	return r.renewServing(ctx)
}

func ipStrings(ips []net.IP) []string {
	out := make([]string, len(ips))
	for i, ip := range ips {
		out[i] = ip.String()
	}
	return out
}

// restartKubelet restarts the kubelet, once per request, when something
// changed that it does not load by itself (RestartReasons).
func (r *renewal) restartKubelet(ctx context.Context) error {
	const step = "restart the kubelet"
	reasons := RestartReasons(r.progress.Changes)
	switch {
	case len(reasons) == 0:
		r.logf(step, "not needed: nothing changed that the kubelet does not reload")
		return nil
	case r.progress.Restarted:
		r.logf(step, "already restarted for this request")
		return nil
	}
	r.logf(step, "restarting: %s", strings.Join(reasons, "; "))
	if err := r.n.Kubelet.restart(ctx); err != nil {
		return err
	}
	r.n.Manager.cfg.Metrics.kubeletRestarted()
	r.progress.Restarted = true
	return r.progress.save(r.certDir())
}

// waitForKubelet waits, after a restart and at most the kubelet's
// RestartTimeout, until the kubelet's healthz answers and, when its serving
// pair was renewed, until it serves that certificate on its HTTPS port.
func (r *renewal) waitForKubelet(ctx context.Context) error {
	const step = "wait for the kubelet"
	if !r.progress.Restarted {
		return nil
	}
	m, k := r.n.Manager, r.n.Kubelet
	timeout := k.restartTimeout()
	ctx, cancel := withClockTimeout(ctx, m.cfg.Clock, timeout)
	defer cancel()
	serving := &Store{Dir: r.certDir(), Name: ServingStore}
	err := pollUntil(ctx, m.cfg.Clock, newBackoff(kubeletBackoff), func(ctx context.Context) error {
		if err := k.Healthy(ctx); err != nil {
			return fmt.Errorf("healthz: %w", err)
		}
		if !r.progress.Changes.ServingPair {
			return nil
		}
		stored, err := serving.Current()
		if err != nil {
			return err
		}
		if stored == nil {
			return errors.New("no serving certificate stored")
		}
		served, err := k.Serves(ctx)
		if err != nil {
			return fmt.Errorf("its HTTPS port: %w", err)
		}
		if !served.Equal(stored.Cert) {
			return errors.New("it does not serve the serving certificate stored for it yet")
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("the kubelet is not back within %s: %w", timeout, err)
	}
	if r.progress.Changes.ServingPair {
		r.logf(step, "healthy, and serving the new serving certificate")
	} else {
		r.logf(step, "healthy")
	}
	return nil
}

// report answers the request on the Node (a resync answers none) with what
// the node now uses, read back from disk: the client certificate's issuer,
// the kubeconfig's bundle and (in ModeKubelet) the clientCAFile's and the
// serving certificate's issuer. In ModeStandIn, which has no kubelet to
// serve clients, the kubelet bundle reported is the one read.
func (r *renewal) report(ctx context.Context) error {
	const step = "report on the Node"
	m := r.n.Manager
	if err := m.Reload(); err != nil {
		return err
	}
	info, err := readKubeconfig(m.cfg.KubeconfigPath)
	if err != nil {
		return err
	}
	uses := noderenewal.Trust{Cluster: info.CA, Kubelet: r.trust.Kubelet}
	if r.n.Kubelet != nil {
		if uses.Kubelet, err = os.ReadFile(r.n.Kubelet.Config.ClientCAFile); err != nil {
			return err
		}
	}
	kp, err := m.store.Current()
	if err != nil {
		return err
	}
	if kp == nil {
		return errors.New("no client certificate")
	}
	var serving *x509.Certificate
	if r.n.Kubelet != nil {
		data, err := os.ReadFile(filepath.Join(r.certDir(), servingCurrentFile))
		if err != nil {
			return err
		}
		pair, err := parsePair(data)
		if err != nil {
			return fmt.Errorf("%s: %w", servingCurrentFile, err)
		}
		serving = pair.Cert
	}
	report := noderenewal.ReportOf(r.req, kp.Cert, serving, uses)
	if err := m.annotateNode(ctx, report.Annotations()); err != nil {
		return err
	}
	r.logf(step, "client certificate issuer %s, serving certificate issuer %s, cluster bundle %s, kubelet bundle %s",
		report.Issuer, report.ServingIssuer, report.Bundle, report.KubeletBundle)
	return nil
}
