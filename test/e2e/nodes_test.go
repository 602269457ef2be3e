package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
	"github.com/carousel-dev/carousel/pkg/credentials"
	"github.com/carousel-dev/carousel/pkg/pki"
	"github.com/carousel-dev/carousel/test/framework"
	"github.com/carousel-dev/carousel/test/framework/kit"
)

// kubelets are the real kubelets of the local environment; none against an
// existing management cluster, whose nodes are not ours to read.
func kubelets() []*framework.KubeletNode {
	if env == nil {
		return nil
	}
	return env.Kubelets
}

// runningKubelets are the kubelets whose machine is on.
func runningKubelets() []*framework.KubeletNode {
	var running []*framework.KubeletNode
	for _, n := range kubelets() {
		if n.Running() {
			running = append(running, n)
		}
	}
	return running
}

// poweredOff reports whether node is a kubelet of ours whose machine is off.
func poweredOff(node string) bool {
	for _, n := range kubelets() {
		if n.Name == node {
			return !n.Running()
		}
	}
	return false
}

// kubeletFileCertificate parses the first certificate of a kubelet's file,
// which holds the key too.
func kubeletFileCertificate(n *framework.KubeletNode, path string) *x509.Certificate {
	GinkgoHelper()
	data, err := n.ReadFile(path)
	Expect(err).NotTo(HaveOccurred())
	for block, rest := pem.Decode(data); block != nil; block, rest = pem.Decode(rest) {
		if block.Type == "CERTIFICATE" {
			cert, err := x509.ParseCertificate(block.Bytes)
			Expect(err).NotTo(HaveOccurred(), "%s of %s", path, n.Name)
			return cert
		}
	}
	Fail(fmt.Sprintf("%s of %s holds no certificate", path, n.Name))
	return nil
}

// kubeconfigBundle returns the trust bundle of a kubelet's kubeconfig file.
func kubeconfigBundle(n *framework.KubeletNode, path string) pki.Bundle {
	GinkgoHelper()
	data, err := n.ReadFile(path)
	Expect(err).NotTo(HaveOccurred())
	cfg, err := clientcmd.Load(data)
	Expect(err).NotTo(HaveOccurred(), "%s of %s", path, n.Name)
	Expect(cfg.Clusters).To(HaveLen(1), "%s of %s has one cluster", path, n.Name)
	for _, c := range cfg.Clusters {
		b, err := pki.ParseBundle(c.CertificateAuthorityData)
		Expect(err).NotTo(HaveOccurred(), "certificate-authority-data of %s of %s", path, n.Name)
		return b
	}
	return nil
}

// expectKubelets checks every running kubelet: its client certificate chains to
// clientCA, the certificate it serves (and keeps in its cert dir) to
// kubeletCA, its kubeconfig and bootstrap kubeconfig trust exactly
// clusterBundle, and its clientCAFile holds exactly kubeletBundle.
func expectKubelets(ctx context.Context, clientCA, kubeletCA *x509.Certificate, clusterBundle, kubeletBundle pki.Bundle) {
	GinkgoHelper()
	now := time.Now()
	for _, n := range runningKubelets() {
		client := kubeletFileCertificate(n, framework.KubeletClientCertificate)
		Expect(pki.Verify(client, pki.NewBundle(clientCA), x509.ExtKeyUsageClientAuth, now)).To(Succeed(),
			"kubelet %s's client certificate chains to client CA %s", n.Name, clientCA.Subject.CommonName)
		// Read twice over a rotation of the kubelet's own, which can fall in between.
		// The kubelet may be restarting (its node agent restarts it after
		// a bootstrap): retried, not failed at once.
		var served *x509.Certificate
		Eventually(func(g Gomega) {
			var err error
			served, err = n.ServedCertificate(ctx)
			g.Expect(err).NotTo(HaveOccurred(), "TLS handshake with kubelet %s", n.Name)
			g.Expect(served.Equal(kubeletFileCertificate(n, framework.KubeletServingCertificate))).To(BeTrue())
		}).WithTimeout(30*time.Second).Should(Succeed(), "kubelet %s serves its current serving certificate", n.Name)
		Expect(pki.Verify(served, pki.NewBundle(kubeletCA), x509.ExtKeyUsageServerAuth, now)).To(Succeed(),
			"kubelet %s's serving certificate chains to kubelet CA %s", n.Name, kubeletCA.Subject.CommonName)
		Expect(served.VerifyHostname(n.IP)).To(Succeed(), "kubelet %s's serving certificate names its IP", n.Name)
		expectKubeletTrust(n, clusterBundle, kubeletBundle)
	}
}

// expectKubeletTrust checks the bundles a kubelet trusts: the API server
// through clusterBundle (its kubeconfigs), its clients through kubeletBundle
// (its clientCAFile).
func expectKubeletTrust(n *framework.KubeletNode, clusterBundle, kubeletBundle pki.Bundle) {
	GinkgoHelper()
	for _, kubeconfig := range []string{framework.KubeletKubeconfig, framework.KubeletBootstrapConfig} {
		Expect(kit.Fingerprints(kubeconfigBundle(n, kubeconfig))).To(Equal(kit.Fingerprints(clusterBundle)),
			"kubelet %s's %s trusts exactly the cluster bundle", n.Name, kubeconfig)
	}
	data, err := n.ReadFile(framework.KubeletClientCAFile)
	Expect(err).NotTo(HaveOccurred())
	got, err := pki.ParseBundle(data)
	Expect(err).NotTo(HaveOccurred())
	Expect(kit.Fingerprints(got)).To(Equal(kit.Fingerprints(kubeletBundle)), "kubelet %s's clientCAFile holds exactly the kubelet bundle", n.Name)
}

// expectHeldKubelets checks that no kubelet of a held pool was rolled since
// the rotation started: none was asked to renew, none restarted, and each
// still trusts only the bundles of before the rotation (oldTrust: cluster,
// kubelet). Their client certificates are not checked: each kubelet renews
// its own every few minutes here, from the client CA of the phase.
func expectHeldKubelets(ctx context.Context, oldTrust [2]pki.Bundle, since time.Time) {
	GinkgoHelper()
	if env == nil {
		return
	}
	nodes, err := clientFor(adminKubeconfig(ctx)).CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	Expect(err).NotTo(HaveOccurred())
	for _, n := range nodes.Items {
		Expect(n.Annotations).NotTo(HaveKey(v1alpha1.AnnotationRenewCredentials), "node %s of a held pool is not asked to renew", n.Name)
	}
	_, restarts := kubeletRestarts(since, time.Now())
	Expect(restarts).To(BeZero(), "no kubelet of a held pool restarts")
	for _, n := range runningKubelets() {
		expectKubeletTrust(n, oldTrust[0], oldTrust[1])
	}
}

// kubeletClientPair reads the API server's kubelet client certificate and key
// Carousel publishes now.
func kubeletClientPair(ctx context.Context) tls.Certificate {
	GinkgoHelper()
	s := &corev1.Secret{}
	Expect(tgt.Client.Get(ctx, client.ObjectKey{Namespace: tgt.Namespace, Name: credentials.CertificateSecretName(tgt.Name, credentials.CertKubeAPIServerKubelet)}, s)).To(Succeed())
	pair, err := tls.X509KeyPair(s.Data[v1alpha1.DataKeyCertificate], s.Data[v1alpha1.DataKeyPrivateKey])
	Expect(err).NotTo(HaveOccurred())
	return pair
}

// kubeletStatus is the HTTP status a kubelet answers GET /healthz with, to a
// client presenting pair and trusting kubeletCA for the kubelet.
func kubeletStatus(ctx context.Context, n *framework.KubeletNode, pair tls.Certificate, kubeletCA *x509.Certificate) int {
	GinkgoHelper()
	roots := x509.NewCertPool()
	roots.AddCert(kubeletCA)
	c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		DialContext:     env.Netns.DialContext,
		TLSClientConfig: &tls.Config{RootCAs: roots, Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12},
	}}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+n.Address()+"/healthz", nil)
	Expect(err).NotTo(HaveOccurred())
	resp, err := c.Do(req)
	Expect(err).NotTo(HaveOccurred(), "kubelet %s", n.Name)
	_ = resp.Body.Close()
	return resp.StatusCode
}

// failure is a failed probe: when, of which node (if any), and why.
type failure struct {
	// sent is when the request was sent, at when it failed: a request to a
	// kubelet that restarts meanwhile can hang until its timeout (a tunnel
	// server may lose the agent's close of a connection the kubelet reset).
	sent, at time.Time
	node     string
	err      error
	// reason says why the failure is allowed; empty for one that is not.
	reason string
	// renewed is, for a Lease sample that found a heartbeat late, when the
	// Lease was last renewed.
	renewed time.Time
}

// inFlight is when the request was under way: from when it was sent until
// it failed.
func (f failure) inFlight() framework.Window { return framework.Window{Start: f.sent, End: f.at} }

// nodeProbe follows the protocol (see follower) and, every interval,
// asks the API server for every node's kubelet healthz through the node
// proxy (API server -> kubelet on the kubelet CA, both ways) and reads every
// node's Lease (the kubelets' own heartbeats).
type nodeProbe struct {
	mu sync.Mutex
	// proxied counts API server -> kubelet calls, heartbeats Lease samples.
	proxied, heartbeats           int
	proxyFailures, staleHeartbeat []failure
	// listsWithoutLease counts Lease lists that lacked a node's Lease,
	// which was then read by name (seen right after API server replicas
	// or etcd members restarted, the read by name then sometimes not
	// finding it either; not understood yet).
	listsWithoutLease int
}

// heartbeatDeadline is how old a Lease may be before the sample counts as a
// missed heartbeat: two renewals of the kubelets' (framework.NodeLeaseDuration/4).
var heartbeatDeadline = 2*framework.NodeLeaseDuration/4 + grace

func (p *nodeProbe) run(ctx context.Context, admin *follower, nodes []string) {
	for ctx.Err() == nil {
		current := admin.current(ctx)
		for _, n := range nodes {
			sent := time.Now()
			body, err := current.CoreV1().RESTClient().Get().AbsPath("/api/v1/nodes", n, "proxy", "healthz").DoRaw(ctx)
			answered := time.Now()
			if err != nil && len(body) > 0 {
				err = fmt.Errorf("%w: %.300s", err, body)
			}
			if err != nil && !apiServerReady(ctx, current) {
				// The API server did not take the call: the API-server probe
				// counts its outages.
				continue
			}
			p.record(ctx, &p.proxied, &p.proxyFailures, failure{sent: sent, at: answered, node: n, err: err})
		}
		p.sampleLeases(ctx, current, nodes)
		select {
		case <-ctx.Done():
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// apiServerReady reports whether the API server answers /readyz with ok. A
// node-proxy call that failed while it does counts as a failed API server ->
// kubelet call; asked after the failure, it errs on the side of counting.
func apiServerReady(ctx context.Context, cs kubernetes.Interface) bool {
	body, err := cs.CoreV1().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
	return err == nil && string(body) == "ok"
}

func (p *nodeProbe) sampleLeases(ctx context.Context, cs kubernetes.Interface, nodes []string) {
	leases, err := cs.CoordinationV1().Leases(corev1.NamespaceNodeLease).List(ctx, metav1.ListOptions{})
	if err != nil {
		// The API server did not answer: the API-server probe counts that.
		return
	}
	renewed := map[string]time.Time{}
	for _, l := range leases.Items {
		if l.Spec.RenewTime != nil {
			renewed[l.Name] = l.Spec.RenewTime.Time
		}
	}
	now := time.Now()
	for _, n := range nodes {
		if _, listed := renewed[n]; !listed {
			p.mu.Lock()
			p.listsWithoutLease++
			p.mu.Unlock()
			l, err := cs.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx, n, metav1.GetOptions{})
			if err == nil && l.Spec.RenewTime == nil {
				err = fmt.Errorf("never renewed")
			}
			if err != nil {
				err = fmt.Errorf("lease of %s not in the list, and reading it: %w", n, err)
				reason := ""
				if leaseRenewedSince(ctx, cs, n, now.Add(-heartbeatDeadline)) {
					reason = "the API server answered from a view without the Lease, which was there, renewed in time, a moment later"
				}
				p.record(ctx, &p.heartbeats, &p.staleHeartbeat, failure{sent: now, at: now, node: n, err: err, reason: reason})
				continue
			}
			renewed[n] = l.Spec.RenewTime.Time
		}
		var err error
		if age := now.Sub(renewed[n]); age > heartbeatDeadline {
			err = fmt.Errorf("lease of %s last renewed %s ago", n, age.Round(time.Millisecond))
		}
		p.record(ctx, &p.heartbeats, &p.staleHeartbeat, failure{sent: now, at: now, node: n, err: err, renewed: renewed[n]})
	}
}

// leaseRenewedSince reports whether node's Lease can be read within
// seconds, renewed after since: then a read that did not find it saw a
// stale view of the cluster, not a kubelet that stopped renewing.
func leaseRenewedSince(ctx context.Context, cs kubernetes.Interface, node string, since time.Time) bool {
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 3*time.Second, true, func(ctx context.Context) (bool, error) {
		l, err := cs.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx, node, metav1.GetOptions{})
		return err == nil && l.Spec.RenewTime != nil && l.Spec.RenewTime.After(since), nil
	})
	return err == nil
}

// record counts a request and, when r.err is set, files it as a failure.
func (p *nodeProbe) record(ctx context.Context, count *int, failures *[]failure, r failure) {
	p.mu.Lock()
	defer p.mu.Unlock()
	*count++
	if r.err != nil && ctx.Err() == nil {
		*failures = append(*failures, r)
	}
}

// duringKubeletRestart reports whether f was under way during one of its
// node's kubelet restarts (widened by grace): a request the restart broke
// can fail well after it on a loaded machine.
func duringKubeletRestart(f failure, restarts []framework.Window) bool {
	return slices.ContainsFunc(restarts, func(w framework.Window) bool { return w.Overlaps(f.inFlight(), grace) })
}

// heartbeatLateFromRestart reports whether f, a Lease sample that found a
// heartbeat late, was taken during one of its node's kubelet restarts
// (widened by grace) and the kubelet had renewed until the restart began:
// a kubelet that had stopped renewing before, refused by the API server
// say, is not excused by a restart that followed.
func heartbeatLateFromRestart(f failure, restarts []framework.Window) bool {
	return !f.renewed.IsZero() && slices.ContainsFunc(restarts, func(w framework.Window) bool {
		return w.Overlaps(f.inFlight(), grace) && !f.renewed.Before(w.Start.Add(-framework.NodeLeaseDuration/4-grace))
	})
}

// kubeletRestartsOf is when the kubelet of node restarted.
func kubeletRestartsOf(node string) []framework.Window {
	for _, n := range kubelets() {
		if n.Name == node {
			return n.Restarts()
		}
	}
	return nil
}

// kubeletRestarts sums, over all nodes, the kubelet restarts between from
// and to, and counts them.
func kubeletRestarts(from, to time.Time) (time.Duration, int) {
	var windows []framework.Window
	for _, n := range kubelets() {
		windows = append(windows, n.Restarts()...)
	}
	return within(windows, from, to)
}

// selfRenewed reports whether csrs hold a client certificate the kubelet of
// node asked for itself with its own identity (the selfnodeclient path: a
// CSR the kubelet names csr-*, requested by system:node:<node>, unlike the
// agent's node-csr-* and bootstrap CSRs) and that ca signed.
func selfRenewed(csrs []certificatesv1.CertificateSigningRequest, node string, ca *x509.Certificate) bool {
	for _, c := range csrs {
		if c.Spec.SignerName != certificatesv1.KubeAPIServerClientKubeletSignerName || c.Spec.Username != "system:node:"+node ||
			!strings.HasPrefix(c.Name, "csr-") || len(c.Status.Certificate) == 0 {
			continue
		}
		certs, err := pki.ParseCertificates(c.Status.Certificate)
		if err == nil && bytes.Equal(certs[0].AuthorityKeyId, ca.SubjectKeyId) {
			return true
		}
	}
	return false
}

// bootstrapped reports whether the managed cluster holds a client
// certificate that node obtained by bootstrapping (a CSR made with a
// bootstrap token, system:bootstrap:<id>, for system:node:<node>) and that
// ca signed.
func bootstrapped(ctx context.Context, cs kubernetes.Interface, node string, ca *x509.Certificate) bool {
	GinkgoHelper()
	csrs, err := cs.CertificatesV1().CertificateSigningRequests().List(ctx, metav1.ListOptions{})
	Expect(err).NotTo(HaveOccurred())
	for _, c := range csrs.Items {
		if c.Spec.SignerName != certificatesv1.KubeAPIServerClientKubeletSignerName || !strings.HasPrefix(c.Spec.Username, "system:bootstrap:") ||
			len(c.Status.Certificate) == 0 {
			continue
		}
		certs, err := pki.ParseCertificates(c.Status.Certificate)
		if err == nil && certs[0].Subject.CommonName == "system:node:"+node && bytes.Equal(certs[0].AuthorityKeyId, ca.SubjectKeyId) {
			return true
		}
	}
	return false
}
