package e2e

import (
	"bufio"
	"context"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
	"github.com/carousel-dev/carousel/pkg/credentials"
	"github.com/carousel-dev/carousel/pkg/evidence"
	"github.com/carousel-dev/carousel/pkg/nodeagent"
	"github.com/carousel-dev/carousel/pkg/pki"
	"github.com/carousel-dev/carousel/test/framework"
	"github.com/carousel-dev/carousel/test/framework/kit"
)

// grace widens a planned API-server restart: clients notice a restart a
// moment after it started and reconnect a moment after it ended.
const grace = 2 * time.Second

// The suite's bindings of the shared kit (test/framework/kit) to its target.

func key() client.ObjectKey { return client.ObjectKey{Namespace: tgt.Namespace, Name: tgt.Name} }

func cluster(ctx context.Context) *v1alpha1.Cluster {
	GinkgoHelper()
	return kit.GetCluster(ctx, tgt.Client, key())
}

func annotate(ctx context.Context, op string) error {
	return kit.Annotate(ctx, tgt.Client, cluster(ctx), op)
}

func cas(ctx context.Context) map[v1alpha1.CARole]*credentials.CAs {
	GinkgoHelper()
	return kit.LoadCAs(ctx, tgt.Client, cluster(ctx))
}

func bundle(ctx context.Context, role v1alpha1.CARole) pki.Bundle {
	GinkgoHelper()
	return kit.LoadBundle(ctx, tgt.Client, cluster(ctx), role)
}

// adminKubeconfig reads the admin credential Carousel publishes now.
func adminKubeconfig(ctx context.Context) []byte {
	GinkgoHelper()
	s := &corev1.Secret{}
	Expect(tgt.Client.Get(ctx, client.ObjectKey{Namespace: tgt.Namespace, Name: credentials.CertificateSecretName(tgt.Name, credentials.CertAdmin)}, s)).To(Succeed())
	return s.Data[v1alpha1.DataKeyKubeconfig]
}

func clientFor(kubeconfig []byte) kubernetes.Interface {
	GinkgoHelper()
	cfg, err := clientcmd.RESTConfigFromKubeConfig(kubeconfig)
	Expect(err).NotTo(HaveOccurred())
	cfg.Timeout = 5 * time.Second
	return kubernetes.NewForConfigOrDie(cfg)
}

// nodeCertificates reads every agent's current client certificate from its
// store; none against an existing management cluster.
func nodeCertificates() []*x509.Certificate {
	GinkgoHelper()
	var out []*x509.Certificate
	if env == nil {
		return nil
	}
	for _, a := range env.Agents {
		kp, err := (&nodeagent.Store{Dir: filepath.Join(a.Dir, "pki")}).Current()
		Expect(err).NotTo(HaveOccurred())
		Expect(kp).NotTo(BeNil(), "agent %s has a current pair", a.Name)
		out = append(out, kp.Cert)
	}
	return out
}

func waitForPhase(ctx context.Context, phase v1alpha1.CARotationPhase) {
	GinkgoHelper()
	kit.WaitForPhase(ctx, tgt.Client, key(), phase, kit.Wait{Timeout: 5 * time.Minute, Polling: time.Second})
}

// protocolClient is a client of the managed cluster that follows the
// documented protocol: it uses the admin credential it was handed and picks
// up the new one (new client certificate, new trust bundle) when the rotation
// says so, at Prepared and at Completed. It counts the requests that failed.
type protocolClient struct {
	mu       sync.Mutex
	failures []time.Time
	requests int
	lastErr  error
}

func (p *protocolClient) run(ctx context.Context) {
	current := clientFor(adminKubeconfig(ctx))
	seen := cluster(ctx).CARotationPhase()
	for ctx.Err() == nil {
		if phase := cluster(ctx).CARotationPhase(); phase != seen {
			if phase == v1alpha1.RotationPrepared || phase == v1alpha1.RotationCompleted {
				current = clientFor(adminKubeconfig(ctx))
			}
			seen = phase
		}
		_, err := current.CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{})
		p.mu.Lock()
		p.requests++
		if err != nil && ctx.Err() == nil {
			p.failures = append(p.failures, time.Now())
			p.lastErr = err
		}
		p.mu.Unlock()
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// plannedRestarts are the platform's API-server restarts; against an
// existing management cluster there are none to excuse a failure.
func plannedRestarts() []framework.Window {
	if env == nil {
		return nil
	}
	return env.Platform.APIServerRestarts()
}

// unplanned returns the failures outside the platform's planned restarts.
func unplanned(failures []time.Time) []time.Time {
	var out []time.Time
	for _, f := range failures {
		planned := false
		for _, w := range plannedRestarts() {
			if w.Contains(f, grace) {
				planned = true
				break
			}
		}
		if !planned {
			out = append(out, f)
		}
	}
	return out
}

// heartbeatFailures reads the agents' logs for failed Lease renewals (only
// in the local environment, where the agents are ours).
func heartbeatFailures() []time.Time {
	GinkgoHelper()
	var out []time.Time
	if env == nil {
		return nil
	}
	for _, a := range env.Agents {
		f, err := os.Open(a.LogPath())
		Expect(err).NotTo(HaveOccurred())
		scanner := bufio.NewScanner(f)
		for scanner.Scan() {
			line := scanner.Text()
			if !strings.Contains(line, "heartbeat failed") {
				continue
			}
			if t, err := time.Parse(time.RFC3339Nano, strings.Fields(line)[0]); err == nil {
				out = append(out, t)
			}
		}
		_ = f.Close()
	}
	return out
}

// caRecorder samples the CA Secrets through the whole journey, so the suite
// can tell how many distinct CAs of each role ever existed.
type caRecorder struct {
	mu   sync.Mutex
	seen map[v1alpha1.CARole]map[string]bool
}

func (r *caRecorder) run(ctx context.Context) {
	for ctx.Err() == nil {
		for _, role := range v1alpha1.CARoles() {
			s := &corev1.Secret{}
			if tgt.Client.Get(ctx, client.ObjectKey{Namespace: tgt.Namespace, Name: credentials.CASecretName(tgt.Name, role)}, s) != nil {
				continue
			}
			x, err := credentials.DecodeCASecret(s)
			if err != nil {
				continue
			}
			r.mu.Lock()
			if r.seen[role] == nil {
				r.seen[role] = map[string]bool{}
			}
			r.seen[role][pki.Fingerprint(x.Current.Cert)] = true
			r.mu.Unlock()
		}
		select {
		case <-ctx.Done():
		case <-time.After(50 * time.Millisecond):
		}
	}
}

var _ = Describe("The CA rotation journey", Ordered, func() {
	var (
		probe    = &protocolClient{}
		recorder = &caRecorder{seen: map[v1alpha1.CARole]map[string]bool{}}
		before   map[v1alpha1.CARole]*credentials.CAs
		oldAdmin []byte
		stop     context.CancelFunc
	)

	BeforeAll(func(ctx SpecContext) {
		var probeCtx context.Context
		probeCtx, stop = context.WithCancel(context.Background())
		DeferCleanup(stop)
		go probe.run(probeCtx)
		go recorder.run(probeCtx)
	})

	It("has every node bootstrapped on the current client CA, and kube-root-ca.crt carries the cluster CA", func(ctx SpecContext) {
		before = cas(ctx)
		oldAdmin = adminKubeconfig(ctx)
		for _, cert := range nodeCertificates() {
			Expect(pki.Verify(cert, pki.NewBundle(before[v1alpha1.CARoleClient].Current.Cert), x509.ExtKeyUsageClientAuth, time.Now())).To(Succeed())
		}
		admin := clientFor(oldAdmin)
		nodes, err := admin.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		Expect(err).NotTo(HaveOccurred())
		Expect(nodes.Items).NotTo(BeEmpty())
		expectRootCA(ctx, admin, bundle(ctx, v1alpha1.CARoleCluster))
	})

	It("refuses, through the real webhook, operations the phase does not allow", func(ctx SpecContext) {
		Expect(annotate(ctx, v1alpha1.OperationCompleteCARotation)).To(MatchError(MatchRegexp(
			`cannot complete the CA rotation in phase (none \(never rotated\)|Completed), only in phase Prepared: start one with carousel.dev/operation=start-ca-rotation`)))
		Expect(annotate(ctx, "rotate-everything")).To(MatchError(ContainSubstring(`unknown operation "rotate-everything"`)))
		Expect(annotate(ctx, "rollout-workers=nope")).To(MatchError(ContainSubstring(`worker pool "nope" does not exist`)))
	})

	var (
		preparedIn, completedIn           time.Duration
		restartsPreparing, restartsFinish time.Duration
		prepared                          map[v1alpha1.CARole]*credentials.CAs
	)

	It("prepares: both CAs trusted, clients and nodes on the new CAs, after a crash mid-Preparing", func(ctx SpecContext) {
		start := time.Now()
		Expect(annotate(ctx, v1alpha1.OperationStartCARotation)).To(Succeed())
		Eventually(func() error { return annotate(ctx, v1alpha1.OperationStartCARotation) }).Should(
			MatchError(ContainSubstring("cannot start a CA rotation: the rotation is in phase Preparing")), "start twice")
		By("killing the controller manager once the first new CA exists")
		Eventually(func() bool {
			for _, x := range cas(ctx) {
				if x.Previous != nil {
					return true
				}
			}
			return false
		}).Should(BeTrue())
		crashOperator(ctx)
		waitForPhase(ctx, v1alpha1.RotationPrepared)
		preparedIn = time.Since(start)
		restartsPreparing = restartTime(start, time.Now())

		prepared = cas(ctx)
		for _, role := range v1alpha1.CARoles() {
			Expect(bundle(ctx, role)).To(HaveLen(2), "bundle %s holds the old and the new CA", role)
		}
		for _, cert := range nodeCertificates() {
			Expect(pki.Verify(cert, pki.NewBundle(prepared[v1alpha1.CARoleClient].Current.Cert), x509.ExtKeyUsageClientAuth, time.Now())).
				To(Succeed(), "node %s is on the new client CA", cert.Subject.CommonName)
		}
		expectNodesReported(ctx, prepared[v1alpha1.CARoleClient].Current.Cert)
		_, err := clientFor(oldAdmin).CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{})
		Expect(err).NotTo(HaveOccurred(), "old credentials still work in Prepared")
		newAdmin := clientFor(adminKubeconfig(ctx))
		_, err = newAdmin.CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{})
		Expect(err).NotTo(HaveOccurred(), "newly issued credentials work")
		expectRootCA(ctx, newAdmin, bundle(ctx, v1alpha1.CARoleCluster))
	})

	It("completes: only the new CAs remain and old credentials are rejected, after a crash mid-Finalizing", func(ctx SpecContext) {
		start := time.Now()
		Expect(annotate(ctx, v1alpha1.OperationCompleteCARotation)).To(Succeed())
		By("killing the controller manager once the old CAs are being dropped")
		Eventually(func() bool {
			for _, x := range cas(ctx) {
				if x.Previous == nil {
					return true
				}
			}
			return false
		}).WithTimeout(3 * time.Minute).Should(BeTrue())
		crashOperator(ctx)
		waitForPhase(ctx, v1alpha1.RotationCompleted)
		completedIn = time.Since(start)
		restartsFinish = restartTime(start, time.Now())

		after := cas(ctx)
		for _, role := range v1alpha1.CARoles() {
			Expect(after[role].Previous).To(BeNil(), "the old %s CA key is gone", role)
			Expect(after[role].Current.Cert.Equal(prepared[role].Current.Cert)).To(BeTrue())
			Expect(kit.Fingerprints(bundle(ctx, role))).To(Equal([]string{pki.Fingerprint(after[role].Current.Cert)}))
		}
		for _, cert := range nodeCertificates() {
			Expect(pki.Verify(cert, pki.NewBundle(after[v1alpha1.CARoleClient].Current.Cert), x509.ExtKeyUsageClientAuth, time.Now())).To(Succeed())
		}
		expectNodesReported(ctx, after[v1alpha1.CARoleClient].Current.Cert)
		_, err := clientFor(oldAdmin).CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{})
		Expect(err).To(HaveOccurred(), "credentials from the old CAs are rejected")
		Expect(apierrors.IsUnauthorized(err) || isTLSError(err)).To(BeTrue(), "rejected, not just unreachable: %v", err)
		Expect(evidence.Checker{}.ServesChainTo(ctx, cluster(ctx).Spec.ControlPlane.Endpoint, after[v1alpha1.CARoleCluster].Current.CertPEM())).To(Succeed())
		expectRootCA(ctx, clientFor(adminKubeconfig(ctx)), bundle(ctx, v1alpha1.CARoleCluster))

		recorder.mu.Lock()
		for _, role := range v1alpha1.CARoles() {
			Expect(recorder.seen[role]).To(HaveLen(2), "role %s: exactly one new CA despite two crashes", role)
		}
		recorder.mu.Unlock()
	})

	It("served every request that followed the protocol outside planned API-server restarts", func() {
		stop()
		probe.mu.Lock()
		defer probe.mu.Unlock()
		heartbeats := heartbeatFailures()
		failed := len(unplanned(probe.failures)) + len(unplanned(heartbeats))
		summary := fmt.Sprintf("rotation e2e: prepared in %.0fs, completed in %.0fs, failed requests %d", preparedIn.Seconds(), completedIn.Seconds(), failed)
		fmt.Println(summary)
		AddReportEntry("summary", summary)
		AddReportEntry("probe requests", probe.requests)
		AddReportEntry("time in control-plane restarts", fmt.Sprintf("Preparing %.0fs of %.0fs, Finalizing %.0fs of %.0fs",
			restartsPreparing.Seconds(), preparedIn.Seconds(), restartsFinish.Seconds(), completedIn.Seconds()))
		AddReportEntry("API-server and etcd restarts (planned)", len(plannedRestarts()))
		AddReportEntry("failed probe requests and heartbeats during planned restarts", len(probe.failures)+len(heartbeats)-failed)
		Expect(failed).To(BeZero(), "last probe error: %v", probe.lastErr)
	})
})

// crashOperator kills the controller manager with SIGKILL and starts it
// again, in the local environment; an existing deployment is not ours to kill.
func crashOperator(ctx context.Context) {
	GinkgoHelper()
	if env == nil {
		By("skipping the crash: the controller manager of an existing management cluster is not ours to kill")
		return
	}
	env.KillOperator()
	Expect(env.StartOperator(ctx)).To(Succeed())
}

// expectNodesReported checks what every node reported on its Node: a client
// certificate issued by clientCA.
func expectNodesReported(ctx context.Context, clientCA *x509.Certificate) {
	GinkgoHelper()
	nodes, err := clientFor(adminKubeconfig(ctx)).CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	Expect(err).NotTo(HaveOccurred())
	Expect(nodes.Items).NotTo(BeEmpty())
	for _, n := range nodes.Items {
		Expect(n.Annotations).To(HaveKeyWithValue(v1alpha1.AnnotationClientCertificateIssuer, hex.EncodeToString(clientCA.SubjectKeyId)),
			"node %s reported a client certificate from the current client CA", n.Name)
	}
}

// restartTime sums the platform's restarts between from and to.
func restartTime(from, to time.Time) time.Duration {
	var total time.Duration
	for _, w := range plannedRestarts() {
		if !w.Start.Before(from) && !w.End.After(to) {
			total += w.End.Sub(w.Start)
		}
	}
	return total
}

func expectRootCA(ctx context.Context, cs kubernetes.Interface, want pki.Bundle) {
	GinkgoHelper()
	Eventually(func(g Gomega) {
		cm, err := cs.CoreV1().ConfigMaps("default").Get(ctx, "kube-root-ca.crt", metav1.GetOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		got, err := pki.ParseBundle([]byte(cm.Data["ca.crt"]))
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(kit.Fingerprints(got)).To(Equal(kit.Fingerprints(want)))
	}).WithTimeout(2*time.Minute).Should(Succeed(), "kube-root-ca.crt carries the cluster bundle")
}

func isTLSError(err error) bool {
	var unknown x509.UnknownAuthorityError
	return errors.As(err, &unknown) || strings.Contains(err.Error(), "tls: ")
}
