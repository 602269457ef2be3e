package e2e

import (
	"bytes"
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
	"github.com/carousel-dev/carousel/pkg/bootstrap"
	"github.com/carousel-dev/carousel/pkg/credentials"
	"github.com/carousel-dev/carousel/pkg/evidence"
	"github.com/carousel-dev/carousel/pkg/noderenewal"
	"github.com/carousel-dev/carousel/pkg/pki"
	"github.com/carousel-dev/carousel/test/framework"
	"github.com/carousel-dev/carousel/test/framework/kit"
)

// grace widens a kubelet's restart: clients notice a restart a
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
	cs, err := newClient(kubeconfig)
	Expect(err).NotTo(HaveOccurred())
	return cs
}

func newClient(kubeconfig []byte) (kubernetes.Interface, error) {
	cfg, err := clientcmd.RESTConfigFromKubeConfig(kubeconfig)
	if err != nil {
		return nil, err
	}
	cfg.Timeout = 5 * time.Second
	return kubernetes.NewForConfig(cfg)
}

// follower is the admin client of a prober that follows the documented
// protocol: it uses the admin credential it was handed and picks up the new
// one (new client certificate, new trust bundle) when the rotation says so:
// at Prepared and at Completed, and, in Aborting and Aborted, whenever
// Carousel has re-issued it from the old CAs. It runs in the probers'
// goroutines, so it asserts nothing: what it cannot read now it reads at
// the next call.
type follower struct {
	client     kubernetes.Interface
	kubeconfig []byte
	seen       v1alpha1.CARotationPhase
}

func newFollower(ctx context.Context) *follower {
	GinkgoHelper()
	kubeconfig := adminKubeconfig(ctx)
	return &follower{client: clientFor(kubeconfig), kubeconfig: kubeconfig, seen: cluster(ctx).CARotationPhase()}
}

// current returns the client to use now.
func (f *follower) current(ctx context.Context) kubernetes.Interface {
	c := &v1alpha1.Cluster{}
	if tgt.Client.Get(ctx, key(), c) != nil {
		return f.client
	}
	phase := c.CARotationPhase()
	aborting := phase == v1alpha1.RotationAborting || phase == v1alpha1.RotationAborted
	if phase == f.seen && !aborting {
		return f.client
	}
	if phase == v1alpha1.RotationPrepared || phase == v1alpha1.RotationCompleted || aborting {
		s := &corev1.Secret{}
		if tgt.Client.Get(ctx, client.ObjectKey{Namespace: tgt.Namespace, Name: credentials.CertificateSecretName(tgt.Name, credentials.CertAdmin)}, s) != nil {
			return f.client
		}
		if kubeconfig := s.Data[v1alpha1.DataKeyKubeconfig]; !bytes.Equal(kubeconfig, f.kubeconfig) {
			cs, err := newClient(kubeconfig)
			if err != nil {
				return f.client
			}
			f.client, f.kubeconfig = cs, kubeconfig
		}
	}
	f.seen = phase
	return f.client
}

// waitForPhase waits for a phase; Preparing alone gives pods
// spec.caRotation.workloadTrustReload (7 minutes) to reload kube-root-ca.crt.
func waitForPhase(ctx context.Context, phase v1alpha1.CARotationPhase) {
	GinkgoHelper()
	kit.WaitForPhase(ctx, tgt.Client, key(), phase, kit.Wait{Timeout: 12 * time.Minute, Polling: time.Second})
}

// requestProbe makes a request of the managed cluster every interval, as a
// client that follows the documented protocol (see follower), and counts the
// requests and those that failed.
type requestProbe struct {
	interval time.Duration
	request  func(ctx context.Context, cs kubernetes.Interface) error

	mu       sync.Mutex
	failures []failure
	requests int
	// lastServed is when the last request that succeeded was sent.
	lastServed time.Time
}

// readNamespace is the protocol-following client's request.
func readNamespace(ctx context.Context, cs kubernetes.Interface) error {
	_, err := cs.CoreV1().Namespaces().Get(ctx, metav1.NamespaceDefault, metav1.GetOptions{})
	return err
}

// run makes the probe's requests with the client clientNow returns for each.
func (p *requestProbe) run(ctx context.Context, clientNow func(context.Context) kubernetes.Interface) {
	for ctx.Err() == nil {
		sent := time.Now()
		err := p.request(ctx, clientNow(ctx))
		p.mu.Lock()
		p.requests++
		switch {
		case err == nil:
			p.lastServed = sent
		case ctx.Err() == nil:
			p.failures = append(p.failures, failure{sent: sent, at: time.Now(), err: err})
		}
		p.mu.Unlock()
		select {
		case <-ctx.Done():
		case <-time.After(p.interval):
		}
	}
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
		probe      = &requestProbe{interval: 100 * time.Millisecond, request: readNamespace}
		nodes      = &nodeProbe{}
		aggregated = &requestProbe{interval: 300 * time.Millisecond, request: readNodeMetrics}
		inCluster  = &requestProbe{interval: 300 * time.Millisecond, request: whoAmI}
		outages    = &apiServiceOutages{}
		pod        *workload
		roles      = &roleCheckpoints{passed: map[v1alpha1.CARole][]string{}}
		recorder   = &caRecorder{seen: map[v1alpha1.CARole]map[string]bool{}}
		before     map[v1alpha1.CARole]*credentials.CAs
		// oldTrust are the cluster and kubelet bundles before the rotation.
		oldTrust         [2]pki.Bundle
		oldAdmin         []byte
		oldKubeletClient tls.Certificate
		stop             context.CancelFunc
		// offNode is the node whose machine is off through the whole rotation.
		offNode *framework.KubeletNode
		// machines are the Replace pool's Machines before the rotation.
		machines []machine
		// automatic is a Cluster that Carousel rotates on its own, by policy.
		automatic *v1alpha1.Cluster
	)

	BeforeAll(func(ctx SpecContext) {
		if env != nil {
			// It is powered off when the rotation starts; the probes leave it out.
			offNode = env.Kubelets[len(env.Kubelets)-1]
			By("running Cluster API (its controller manager, built from source) with a MachineDeployment of two Machines, " +
				"each a real kubelet of the test provider")
			Expect(env.StartClusterAPI(ctx)).To(Succeed())
			Expect(env.CreateMachineDeployment(ctx, replacePool, replacePool, replaceReplicas)).To(Succeed())
			machines = waitForMachines(ctx, 3*time.Minute)
			By("letting the InPlace pool stop waiting for a node whose Lease is a minute behind the others, and adding the Replace pool")
			c := cluster(ctx)
			patch := client.MergeFrom(c.DeepCopy())
			c.Spec.Workers[0].OfflineNodeTimeout = &metav1.Duration{Duration: offlineNodeTimeout}
			c.Spec.Workers = append(c.Spec.Workers, v1alpha1.WorkerPool{
				Name: replacePool, RolloutStrategy: v1alpha1.RolloutReplace, MachineDeployment: replacePool,
			})
			Expect(tgt.Client.Patch(ctx, c, patch)).To(Succeed())
		}
		By("leaving a second Cluster to its automatic-rotation policy for the whole journey")
		automatic = createAutomaticCluster(ctx)
		var probeCtx context.Context
		probeCtx, stop = context.WithCancel(context.Background())
		DeferCleanup(stop)
		go probe.run(probeCtx, newFollower(ctx).current)
		go recorder.run(probeCtx)
		if metricsServerRuns() {
			go aggregated.run(probeCtx, newFollower(ctx).current)
			go outages.run(probeCtx, newFollower(ctx))
		}
		if env != nil {
			By("starting the in-cluster workload on a kubelet that stays on through the rotation")
			pod = startWorkload(ctx, clientFor(adminKubeconfig(ctx)), env.Kubelets[0])
			podClient := pod.client(ctx)
			go inCluster.run(probeCtx, func(context.Context) kubernetes.Interface { return podClient })
		}
		list, err := clientFor(adminKubeconfig(ctx)).CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		Expect(err).NotTo(HaveOccurred())
		var names []string
		for _, n := range list.Items {
			// The Replace pool's nodes go away with their Machines.
			if (offNode == nil || n.Name != offNode.Name) && n.Labels[v1alpha1.LabelPool] != replacePool {
				names = append(names, n.Name)
			}
		}
		Expect(names).NotTo(BeEmpty(), "no node to probe")
		go nodes.run(probeCtx, newFollower(ctx), names)
	})

	It("has every kubelet bootstrapped through Carousel on the current CAs, and kube-root-ca.crt carries the cluster CA", func(ctx SpecContext) {
		before = cas(ctx)
		oldTrust = [2]pki.Bundle{bundle(ctx, v1alpha1.CARoleCluster), bundle(ctx, v1alpha1.CARoleKubelet)}
		oldAdmin = adminKubeconfig(ctx)
		oldKubeletClient = kubeletClientPair(ctx)
		expectKubelets(ctx, before[v1alpha1.CARoleClient].Current.Cert, before[v1alpha1.CARoleKubelet].Current.Cert,
			bundle(ctx, v1alpha1.CARoleCluster), bundle(ctx, v1alpha1.CARoleKubelet))
		admin := clientFor(oldAdmin)
		list, err := admin.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		Expect(err).NotTo(HaveOccurred())
		Expect(list.Items).NotTo(BeEmpty())
		expectRootCA(ctx, admin, bundle(ctx, v1alpha1.CARoleCluster))
		roles.check(ctx, "before the rotation")
	})

	It("refuses, through the real webhook, operations the phase does not allow", func(ctx SpecContext) {
		Expect(annotate(ctx, v1alpha1.OperationCompleteCARotation)).To(MatchError(MatchRegexp(
			`cannot complete the CA rotation in phase (none \(never rotated\)|Completed), only in phase Prepared: start one with carousel.dev/operation=start-ca-rotation`)))
		Expect(annotate(ctx, "rotate-everything")).To(MatchError(ContainSubstring(`unknown operation "rotate-everything"`)))
		Expect(annotate(ctx, "rollout-workers=nope")).To(MatchError(ContainSubstring(`worker pool "nope" does not exist`)))
	})

	It("follows the tutorial up to the rotation: the cluster, its certificates, its nodes, the plan", func(ctx SpecContext) {
		if !runsTutorial() {
			Skip("the tutorial runs against the environment make run starts")
		}
		Expect(tutorial.step(ctx, "cluster")).To(MatchRegexp(`(?m)^`+tgt.Name+`\s+(<none>\s+)?True\s`), "Ready, never rotated")
		out := tutorial.step(ctx, "expiration")
		for _, role := range v1alpha1.CARoles() {
			Expect(out).To(MatchRegexp(`(?m)^`+string(role)+`\s+.*\s+current$`), "the %s CA", role)
		}
		Expect(out).NotTo(ContainSubstring("previous"))
		Expect(tutorial.step(ctx, "nodes")).To(MatchRegexp(`(?m)^` + env.Kubelets[0].Name + `\s+Ready\s`))
		Expect(tutorial.step(ctx, "plan")).To(ContainSubstring("Phase 1: start-ca-rotation -> Preparing -> Prepared"))
	})

	var (
		preparedIn, completedIn           time.Duration
		rolloutsPreparing, rolloutsFinish time.Duration
		kubeletsPreparing, kubeletsFinish string
		prepared                          map[v1alpha1.CARole]*credentials.CAs
		// How long Cluster API took to replace the Replace pool's Machines.
		replacedPreparing, replacedFinishing time.Duration
		// The second rotation, aborted in Prepared, and when it was Aborting.
		preparedAgainIn, abortedIn time.Duration
		kubeletsAborting           string
		aborting                   [2]time.Time
	)

	It("prepares: the control plane first with the pool held, then the pool; both CAs trusted, clients and nodes on the new CAs, after a crash mid-Preparing", func(ctx SpecContext) {
		if offNode != nil {
			By("powering off a node for the whole rotation, with a client certificate from the current client CA that is still valid " +
				"when it comes back, as a node's year-long one would be")
			env.PowerOff(offNode)
			Expect(offNode.ProvisionClientCertificate(provisionedClientCertificate(ctx, offNode.Name))).To(Succeed())
		}
		start := time.Now()
		started, rolled := func() string { return "" }, func() string { return "" }
		if runsTutorial() {
			started = tutorial.start(ctx, "start", v1alpha1.OperationStartCARotationWithoutWorkersRollout, v1alpha1.RotationPreparingWithoutWorkersRollout)
		} else {
			Expect(annotate(ctx, v1alpha1.OperationStartCARotationWithoutWorkersRollout)).To(Succeed())
		}
		// Until the controller takes the start up, the webhook lets another operation replace it.
		Eventually(func() v1alpha1.CARotationPhase { return cluster(ctx).CARotationPhase() }).Should(Equal(v1alpha1.RotationPreparingWithoutWorkersRollout))
		Eventually(func() error { return annotate(ctx, v1alpha1.OperationStartCARotation) }).Should(
			MatchError(ContainSubstring("cannot start a CA rotation: the rotation is in phase PreparingWithoutWorkersRollout")), "start twice")
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

		By("holding the pool while the control plane moves to the new CAs, until the API server accepts the new client CA")
		Eventually(func(g Gomega) {
			c := cluster(ctx)
			g.Expect(c.CARotationPhase()).To(Equal(v1alpha1.RotationPreparingWithoutWorkersRollout))
			g.Expect(meta.FindStatusCondition(c.Status.Conditions, v1alpha1.ConditionCARotation)).To(
				HaveField("Reason", string(v1alpha1.ReasonWaitingForWorkloadTrust)), "every step but the time pods get is done")
			for _, pool := range c.Spec.Workers {
				g.Expect(c.IsHeldWorkerPool(pool.Name)).To(BeTrue(), "pool %s is held", pool.Name)
			}
		}).WithTimeout(10 * time.Minute).WithPolling(time.Second).Should(Succeed())
		expectHeldKubelets(ctx, oldTrust, start)
		if env != nil {
			Expect(machineDeployment(ctx).GetAnnotations()).NotTo(HaveKey(v1alpha1.AnnotationRolledFor), "the held Replace pool is not rolled")
			Expect(machineNames(waitForMachines(ctx, time.Minute))).To(Equal(machineNames(machines)), "nor is a Machine of it replaced")
		}
		if runsTutorial() {
			Expect(started()).To(Equal("cluster " + tgt.Namespace + "/" + tgt.Name + ": " + v1alpha1.OperationStartCARotationWithoutWorkersRollout + " requested\n"))
		}

		if env != nil {
			By("rolling the Replace pool first, while the control plane waits for pods to reload their trust: Cluster API replaces its Machines")
			Expect(annotate(ctx, v1alpha1.Operation{Verb: v1alpha1.VerbRotateRolloutWorkers, Pools: []string{replacePool}}.String())).To(Succeed())
			Eventually(func() bool { return cluster(ctx).IsPendingWorkerPool(replacePool) }).WithTimeout(10*time.Minute).WithPolling(time.Second).Should(
				BeFalse(), "pool %s rolled", replacePool)
			// Another held pool may be rolled once the others are done.
			Eventually(func() v1alpha1.CARotationPhase { return cluster(ctx).CARotationPhase() }).WithTimeout(10 * time.Minute).WithPolling(time.Second).Should(
				Equal(v1alpha1.RotationWaitingForWorkersRollout))
		}
		By("rolling the pool")
		var pools []string
		for _, pool := range cluster(ctx).Spec.Workers {
			if cluster(ctx).IsHeldWorkerPool(pool.Name) {
				pools = append(pools, pool.Name)
			}
		}
		release := v1alpha1.Operation{Verb: v1alpha1.VerbRotateRolloutWorkers, Pools: pools}.String()
		if runsTutorial() {
			rolled = tutorial.start(ctx, "rollout-workers", release, v1alpha1.RotationPreparing)
		} else {
			Expect(annotate(ctx, release)).To(Succeed())
		}
		waitForPhase(ctx, v1alpha1.RotationPrepared)
		preparedIn = time.Since(start)
		if runsTutorial() {
			Expect(rolled()).To(And(ContainSubstring(release+" requested"), MatchRegexp(`\nphase Prepared(: [^\n]*)?\n$`)))
		}
		rolloutsPreparing = rolloutTime(start, time.Now())
		kubeletsPreparing = kubeletRestartsText(start, time.Now())

		prepared = cas(ctx)
		for _, role := range v1alpha1.CARoles() {
			Expect(bundle(ctx, role)).To(HaveLen(2), "bundle %s holds the old and the new CA", role)
		}
		// Client and serving certificates on the new CAs; both CAs trusted.
		expectKubelets(ctx, prepared[v1alpha1.CARoleClient].Current.Cert, prepared[v1alpha1.CARoleKubelet].Current.Cert,
			bundle(ctx, v1alpha1.CARoleCluster), bundle(ctx, v1alpha1.CARoleKubelet))
		expectNodesReported(ctx, prepared[v1alpha1.CARoleClient].Current.Cert)
		expectRolledWithoutOffline(ctx, start, offNode)
		if env != nil {
			By("the Replace pool: Cluster API replaced every Machine, and each new kubelet bootstrapped on the new client CA and trusts both CAs")
			machines, replacedPreparing = expectMachinesReplaced(ctx, machines, v1alpha1.RotationPreparing, prepared[v1alpha1.CARoleClient].Current.Cert,
				bundle(ctx, v1alpha1.CARoleCluster), bundle(ctx, v1alpha1.CARoleKubelet))
		}
		_, err := clientFor(oldAdmin).CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{})
		Expect(err).NotTo(HaveOccurred(), "old credentials still work in Prepared")
		if env != nil {
			By("the old-CA usage gate hears of that use from the managed API server's audit events")
			kc, err := clientcmd.Load(oldAdmin)
			Expect(err).NotTo(HaveOccurred())
			var used *x509.Certificate
			for _, user := range kc.AuthInfos {
				certs, err := pki.ParseCertificates(user.ClientCertificateData)
				Expect(err).NotTo(HaveOccurred())
				used = certs[0]
			}
			Eventually(func(g Gomega) {
				u := cluster(ctx).CARotation().OldCAUsage
				g.Expect(u).NotTo(BeNil())
				g.Expect(u.Dependents).To(ContainElement(And(HaveField("Kind", v1alpha1.OldCADependentUser), HaveField("Name", used.Subject.CommonName),
					HaveField("Message", ContainSubstring("X509SHA256="+pki.Fingerprint(used)[:16])))))
			}).WithTimeout(time.Minute).Should(Succeed())
		}
		newAdmin := clientFor(adminKubeconfig(ctx))
		_, err = newAdmin.CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{})
		Expect(err).NotTo(HaveOccurred(), "newly issued credentials work")
		expectRootCA(ctx, newAdmin, bundle(ctx, v1alpha1.CARoleCluster))
		if pod != nil {
			Expect(pod.projectedRootCA()).To(Equal(kit.Fingerprints(bundle(ctx, v1alpha1.CARoleCluster))),
				"the kubelet wrote both cluster CAs into the pod before Prepared")
		}
		roles.check(ctx, "Prepared")
		By("the old-CA usage gate: every real kubelet reports a client certificate from the new client CA, the powered-off node aside")
		if runsTutorial() {
			// The reader takes a new kubeconfig, which moves the one of the step nodes, from the old client CA.
			out := tutorial.step(ctx, "prepared")
			Expect(out).To(MatchRegexp(`Phase:\s+Prepared\n`))
			for _, role := range v1alpha1.CARoles() {
				Expect(out).To(MatchRegexp(`(?m)^`+string(role)+`\s+[0-9a-f]{16}\s+\S+\s+[0-9a-f]{16}`), "role %s has a current and a previous CA", role)
			}
			Expect(out).To(MatchRegexp(`Kubeconfig\s+carousel:admin:\S+\s`), "the kubeconfig of the step nodes is on the old client CA")
		}
		// The audit events of the first minutes of Prepared are collected for
		// two, and the journey's own uses of old credentials count for one
		// more (--old-ca-usage-window).
		Eventually(func(g Gomega) {
			u := cluster(ctx).CARotation().OldCAUsage
			g.Expect(u).NotTo(BeNil())
			g.Expect(u.Total).To(BeZero(), "%+v", u.Dependents)
			if env != nil {
				g.Expect(u.AuditEventsReceived).To(BeTrue(), "the managed API server of the local environment sends its audit events to Carousel")
			}
			cond := meta.FindStatusCondition(cluster(ctx).Status.Conditions, v1alpha1.ConditionOldCAsUnused)
			g.Expect(cond).NotTo(BeNil())
			g.Expect(cond.Status).To(Equal(metav1.ConditionTrue))
		}).WithTimeout(6 * time.Minute).Should(Succeed())
	})

	It("completes: only the new CAs remain and old credentials are rejected, after a crash mid-Finalizing", func(ctx SpecContext) {
		start := time.Now()
		completed := func() string { return "" }
		if runsTutorial() {
			completed = tutorial.start(ctx, "complete", v1alpha1.OperationCompleteCARotation, v1alpha1.RotationFinalizing)
		} else {
			Expect(annotate(ctx, v1alpha1.OperationCompleteCARotation)).To(Succeed())
		}
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
		if runsTutorial() {
			Expect(completed()).To(And(ContainSubstring("complete-ca-rotation requested"), MatchRegexp(`\nphase Completed(: [^\n]*)?\n$`)))
		}
		rolloutsFinish = rolloutTime(start, time.Now())
		kubeletsFinish = kubeletRestartsText(start, time.Now())

		after := cas(ctx)
		for _, role := range v1alpha1.CARoles() {
			Expect(after[role].Previous).To(BeNil(), "the old %s CA key is gone", role)
			Expect(after[role].Current.Cert.Equal(prepared[role].Current.Cert)).To(BeTrue())
			Expect(kit.Fingerprints(bundle(ctx, role))).To(Equal([]string{pki.Fingerprint(after[role].Current.Cert)}))
		}
		expectKubelets(ctx, after[v1alpha1.CARoleClient].Current.Cert, after[v1alpha1.CARoleKubelet].Current.Cert,
			bundle(ctx, v1alpha1.CARoleCluster), bundle(ctx, v1alpha1.CARoleKubelet))
		expectNodesReported(ctx, after[v1alpha1.CARoleClient].Current.Cert)
		expectRolledWithoutOffline(ctx, start, offNode)
		if env != nil {
			By("the Replace pool: replaced again, each new kubelet trusting the new CAs only")
			machines, replacedFinishing = expectMachinesReplaced(ctx, machines, v1alpha1.RotationFinalizing, after[v1alpha1.CARoleClient].Current.Cert,
				bundle(ctx, v1alpha1.CARoleCluster), bundle(ctx, v1alpha1.CARoleKubelet))
		}
		newKubeletClient := kubeletClientPair(ctx)
		for _, n := range runningKubelets() {
			Expect(kubeletStatus(ctx, n, oldKubeletClient, after[v1alpha1.CARoleKubelet].Current.Cert)).To(Equal(http.StatusUnauthorized),
				"kubelet %s refuses the API server's kubelet client certificate from the old kubelet CA", n.Name)
			Expect(kubeletStatus(ctx, n, newKubeletClient, after[v1alpha1.CARoleKubelet].Current.Cert)).To(Equal(http.StatusOK),
				"kubelet %s accepts the current one", n.Name)
		}
		_, err := clientFor(oldAdmin).CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{})
		Expect(err).To(HaveOccurred(), "credentials from the old CAs are rejected")
		Expect(apierrors.IsUnauthorized(err) || isTLSError(err)).To(BeTrue(), "rejected, not just unreachable: %v", err)
		Expect(evidence.Checker{}.ServesChainTo(ctx, cluster(ctx).Spec.ControlPlane.Endpoint, after[v1alpha1.CARoleCluster].Current.CertPEM())).To(Succeed())
		expectRootCA(ctx, clientFor(adminKubeconfig(ctx)), bundle(ctx, v1alpha1.CARoleCluster))
		if pod != nil {
			By("the in-cluster workload, which trusts the API server only through the kube-root-ca.crt its kubelet projects, is served on the new server certificate")
			completed := time.Now()
			Eventually(func() time.Time {
				inCluster.mu.Lock()
				defer inCluster.mu.Unlock()
				return inCluster.lastServed
			}).WithTimeout(30 * time.Second).Should(BeTemporally(">", completed))
			Eventually(pod.projectedRootCA).WithTimeout(3*time.Minute).WithPolling(time.Second).Should(
				Equal(kit.Fingerprints(bundle(ctx, v1alpha1.CARoleCluster))), "the kubelet writes the new cluster CA alone into the pod")
		}

		recorder.mu.Lock()
		for _, role := range v1alpha1.CARoles() {
			Expect(recorder.seen[role]).To(HaveLen(2), "role %s: exactly one new CA despite two crashes", role)
		}
		recorder.mu.Unlock()
		roles.check(ctx, "Completed")
		if runsTutorial() {
			out := tutorial.step(ctx, "completed")
			Expect(out).NotTo(ContainSubstring("previous"), "only the new CAs are left")
			Expect(out).To(ContainSubstring("the old admin certificate is refused"))
			Expect(out).To(MatchRegexp(`(?m)^`+env.Kubelets[0].Name+`\s+Ready\s`), "a new admin kubeconfig works")
			tutorial.expectAllRun()
		}
	})

	It("brings back the node that was off through the rotation: given a fresh bootstrap kubeconfig, its node agent has the kubelet bootstrap again", func(ctx SpecContext) {
		if env == nil {
			Skip("the machines of an existing management cluster are not ours to power on")
		}
		refused := kubeletFileCertificate(offNode, framework.KubeletClientCertificate)
		Expect(time.Until(refused.NotAfter)).To(BeNumerically(">", 30*time.Second),
			"the node comes back with a client certificate that has not expired, which the kubelet would keep using")
		By("delivering Carousel's current bootstrap kubeconfig to the machine, as its provisioning does, and powering it on")
		s := &corev1.Secret{}
		Expect(tgt.Client.Get(ctx, client.ObjectKey{Namespace: tgt.Namespace, Name: credentials.BootstrapKubeconfigSecretName(tgt.Name)}, s)).To(Succeed())
		Expect(env.PowerOn(ctx, offNode, s.Data[v1alpha1.DataKeyKubeconfig])).To(Succeed())
		now := cas(ctx)
		kubeletCA := now[v1alpha1.CARoleKubelet].Current.Cert
		admin := clientFor(adminKubeconfig(ctx))
		Eventually(func(g Gomega) {
			served, err := offNode.ServedCertificate(ctx)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(pki.Verify(served, pki.NewBundle(kubeletCA), x509.ExtKeyUsageServerAuth, time.Now())).To(Succeed(), "serves from the new kubelet CA")
			_, err = admin.CoreV1().RESTClient().Get().AbsPath("/api/v1/nodes", offNode.Name, "proxy", "healthz").DoRaw(ctx)
			g.Expect(err).NotTo(HaveOccurred(), "API server -> kubelet %s", offNode.Name)
			n, err := admin.CoreV1().Nodes().Get(ctx, offNode.Name, metav1.GetOptions{})
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(framework.NodeReady(n)).To(BeTrue(), "node %s is Ready", offNode.Name)
		}).WithTimeout(3*time.Minute).WithPolling(time.Second).Should(Succeed(), "logs: %s, %s", offNode.KubeletLogPath(), offNode.Dir)
		expectKubelets(ctx, now[v1alpha1.CARoleClient].Current.Cert, kubeletCA, bundle(ctx, v1alpha1.CARoleCluster), bundle(ctx, v1alpha1.CARoleKubelet))
		By("reading what its node agent reports on the Node: the new credentials and the published bundles, answering no request")
		trust, err := admin.CoreV1().ConfigMaps(metav1.NamespaceSystem).Get(ctx, bootstrap.NodeTrustConfigMap, metav1.GetOptions{})
		Expect(err).NotTo(HaveOccurred())
		Eventually(func(g Gomega) {
			n, err := admin.CoreV1().Nodes().Get(ctx, offNode.Name, metav1.GetOptions{})
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(n.Annotations).To(HaveKeyWithValue(v1alpha1.AnnotationClientCertificateIssuer, hex.EncodeToString(now[v1alpha1.CARoleClient].Current.Cert.SubjectKeyId)))
			g.Expect(n.Annotations).To(HaveKeyWithValue(v1alpha1.AnnotationServingCertificateIssuer, hex.EncodeToString(kubeletCA.SubjectKeyId)))
			g.Expect(n.Annotations).To(HaveKeyWithValue(v1alpha1.AnnotationTrustBundle, noderenewal.Digest([]byte(trust.Data[bootstrap.NodeTrustKeyClusterCA]))))
			g.Expect(n.Annotations).To(HaveKeyWithValue(v1alpha1.AnnotationKubeletTrustBundle, noderenewal.Digest([]byte(trust.Data[bootstrap.NodeTrustKeyKubeletCA]))))
			g.Expect(n.Annotations).NotTo(HaveKey(v1alpha1.AnnotationCredentialsRenewed))
		}).WithTimeout(time.Minute).WithPolling(time.Second).Should(Succeed(), "logs: %s", offNode.Dir)
		Expect(bootstrapped(ctx, admin, offNode.Name, now[v1alpha1.CARoleClient].Current.Cert)).To(BeTrue(),
			"kubelet %s bootstrapped again: a bootstrap CSR for it, signed by the new client CA", offNode.Name)
		kept, err := offNode.ReadFile(framework.KubeletClientCertificate + ".refused")
		Expect(err).NotTo(HaveOccurred())
		Expect(kept).To(ContainSubstring(string(pki.EncodeCertificates(refused))), "the refused pair is kept aside")
	})

	It("has every kubelet that went through the rotation renew its own client certificate through selfnodeclient, from the new client CA", func(ctx SpecContext) {
		if env == nil {
			Skip("the kubelets of an existing management cluster are not ours to read")
		}
		clientCA := cas(ctx)[v1alpha1.CARoleClient].Current.Cert
		Eventually(func(g Gomega) {
			csrs, err := clientFor(adminKubeconfig(ctx)).CertificatesV1().CertificateSigningRequests().List(ctx, metav1.ListOptions{})
			g.Expect(err).NotTo(HaveOccurred())
			for _, n := range runningKubelets() {
				if n == offNode {
					continue // it just bootstrapped from the new client CA; it renews like the others, later
				}
				g.Expect(selfRenewed(csrs.Items, n.Name, clientCA)).To(BeTrue(),
					"kubelet %s renewed its client certificate itself (a csr-* of system:node:%[1]s, signed by the new client CA)", n.Name)
			}
		}).WithTimeout(4 * time.Minute).WithPolling(2 * time.Second).Should(Succeed())
		expectKubelets(ctx, clientCA, cas(ctx)[v1alpha1.CARoleKubelet].Current.Cert, bundle(ctx, v1alpha1.CARoleCluster), bundle(ctx, v1alpha1.CARoleKubelet))
	})

	It("aborts a second rotation in Prepared: kubelets, workloads and the control plane back on the CAs of before it, the new CAs deleted, after a crash mid-Aborting", func(ctx SpecContext) {
		current := cas(ctx)
		trust := [2]pki.Bundle{bundle(ctx, v1alpha1.CARoleCluster), bundle(ctx, v1alpha1.CARoleKubelet)}
		By("starting a second rotation, giving pods a minute to reload kube-root-ca.crt: their API server keeps its certificate until the abort ends")
		c := cluster(ctx)
		patch := client.MergeFrom(c.DeepCopy())
		c.Spec.CARotation.WorkloadTrustReload = &metav1.Duration{Duration: time.Minute}
		Expect(tgt.Client.Patch(ctx, c, patch)).To(Succeed())
		start := time.Now()
		Expect(annotate(ctx, v1alpha1.OperationStartCARotation)).To(Succeed())
		waitForPhase(ctx, v1alpha1.RotationPrepared)
		preparedAgainIn = time.Since(start)
		second := cas(ctx)
		expectKubelets(ctx, second[v1alpha1.CARoleClient].Current.Cert, second[v1alpha1.CARoleKubelet].Current.Cert,
			bundle(ctx, v1alpha1.CARoleCluster), bundle(ctx, v1alpha1.CARoleKubelet))
		preparedAdmin := adminKubeconfig(ctx)
		if offNode != nil {
			By("powering off a node of the InPlace pool, which renewed from the new client CA in Preparing, until its Lease is behind by the pool's offlineNodeTimeout")
			env.PowerOff(offNode)
			// A node asked before it went silent holds its slot, and the
			// pool, until it answers: this one is offline before the abort.
			admin := clientFor(adminKubeconfig(ctx))
			Eventually(func(g Gomega) {
				lease, err := admin.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx, offNode.Name, metav1.GetOptions{})
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(lease.Spec.RenewTime).NotTo(BeNil())
				g.Expect(time.Since(lease.Spec.RenewTime.Time)).To(BeNumerically(">", offlineNodeTimeout+10*time.Second))
			}).WithTimeout(3 * time.Minute).WithPolling(time.Second).Should(Succeed())
		}

		start = time.Now()
		Expect(annotate(ctx, v1alpha1.OperationAbortCARotation)).To(Succeed())
		By("killing the controller manager once the first role's old CA is current again")
		Eventually(func() bool {
			for _, x := range cas(ctx) {
				if x.AbortedRotation != "" && x.AbortedRotation == x.Rotation {
					return true
				}
			}
			return false
		}).WithTimeout(time.Minute).Should(BeTrue())
		crashOperator(ctx)
		if offNode != nil {
			By("the pool rolled without the node, the abort keeps the new CAs while its kubelet holds a certificate from them, and asks it to renew")
			admin := clientFor(adminKubeconfig(ctx))
			Eventually(func(g Gomega) {
				cond := meta.FindStatusCondition(cluster(ctx).Status.Conditions, v1alpha1.ConditionCARotation)
				g.Expect(cond).NotTo(BeNil())
				g.Expect(cond.Reason).To(Equal(string(v1alpha1.ReasonWaitingForKubeletHolders)))
				g.Expect(cond.Message).To(ContainSubstring(offNode.Name), "the Nodes it waits for") // with the Replace pool's gone Machines, perhaps
				n, err := admin.CoreV1().Nodes().Get(ctx, offNode.Name, metav1.GetOptions{})
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(n.Annotations).To(HaveKeyWithValue(v1alpha1.AnnotationRenewCredentials, noderenewal.RequestFor(cluster(ctx).CARotation()).String()))
			}).WithTimeout(5 * time.Minute).WithPolling(time.Second).Should(Succeed())
			Expect(cluster(ctx).CARotation().AbortRolledBackTime).To(BeNil())
			By("powering the node on as it was: its node agent renews it from the old CAs, and the abort goes on")
			Expect(env.PowerOn(ctx, offNode, nil)).To(Succeed())
		}
		waitForPhase(ctx, v1alpha1.RotationAborted)
		abortedIn, aborting = time.Since(start), [2]time.Time{start, time.Now()}
		kubeletsAborting = kubeletRestartsText(start, time.Now())
		for _, n := range kubelets() {
			_, restarts := within(n.Restarts(), aborting[0], aborting[1])
			if n == offNode {
				Expect(restarts).To(BeNumerically("<=", 2), "kubelet %s restarted %d times while Aborting: powered on, then its renewal", n.Name, restarts)
				continue
			}
			Expect(restarts).To(BeNumerically("<=", 1), "kubelet %s restarted %d times while Aborting: the one roll of its in-place pool "+
				"takes it back to the old CAs' certificates and to trusting them alone", n.Name, restarts)
		}

		after := cas(ctx)
		for _, role := range v1alpha1.CARoles() {
			Expect(after[role].Previous).To(BeNil(), "the new %s CA key is gone", role)
			Expect(after[role].Current.Cert.Equal(current[role].Current.Cert)).To(BeTrue(), "role %s is back on the CA of before the rotation", role)
			Expect(kit.Fingerprints(bundle(ctx, role))).To(Equal([]string{pki.Fingerprint(current[role].Current.Cert)}), "bundle %s holds only that CA", role)
		}
		By("every kubelet back on client and serving certificates from the CAs of before, trusting only them")
		expectKubelets(ctx, current[v1alpha1.CARoleClient].Current.Cert, current[v1alpha1.CARoleKubelet].Current.Cert, trust[0], trust[1])
		expectNodesReported(ctx, current[v1alpha1.CARoleClient].Current.Cert)
		if env != nil {
			By("the Replace pool: replaced again, each new kubelet on the CAs of before the rotation")
			machines, _ = expectMachinesReplaced(ctx, machines, v1alpha1.RotationAborting, current[v1alpha1.CARoleClient].Current.Cert, trust[0], trust[1])
		}
		newKubeletClient := kubeletClientPair(ctx)
		for _, n := range runningKubelets() {
			Expect(kubeletStatus(ctx, n, newKubeletClient, current[v1alpha1.CARoleKubelet].Current.Cert)).To(Equal(http.StatusOK),
				"kubelet %s accepts the API server's kubelet client certificate", n.Name)
		}
		_, err := clientFor(preparedAdmin).CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{})
		Expect(err).To(HaveOccurred(), "the admin credential of Prepared, from the deleted client CA, is rejected")
		Expect(apierrors.IsUnauthorized(err) || isTLSError(err)).To(BeTrue(), "rejected, not just unreachable: %v", err)
		Expect(evidence.Checker{}.ServesChainTo(ctx, cluster(ctx).Spec.ControlPlane.Endpoint, current[v1alpha1.CARoleCluster].Current.CertPEM())).To(Succeed())
		expectRootCA(ctx, clientFor(adminKubeconfig(ctx)), trust[0])
		if pod != nil {
			Eventually(pod.projectedRootCA).WithTimeout(3*time.Minute).WithPolling(time.Second).Should(
				Equal(kit.Fingerprints(trust[0])), "the kubelet writes the cluster CA of before the rotation alone into the pod")
		}
		recorder.mu.Lock()
		for _, role := range v1alpha1.CARoles() {
			Expect(recorder.seen[role]).To(HaveLen(3), "role %s: one new CA for the second rotation, none minted again after the crash", role)
		}
		recorder.mu.Unlock()
		roles.check(ctx, "Aborted")
		rot := cluster(ctx).CARotation()
		Expect(rot.LastAbortTriggeredTime).NotTo(BeNil())
		Expect(rot.LastAbortTime).NotTo(BeNil())
		Expect(rot.PendingWorkersRollouts).To(BeEmpty())
	})

	It("served every request of every probe, but the allowed failures, each counted and named with its reason", func() {
		stop()
		probe.mu.Lock()
		defer probe.mu.Unlock()
		nodes.mu.Lock()
		defer nodes.mu.Unlock()
		aggregated.mu.Lock()
		defer aggregated.mu.Unlock()
		inCluster.mu.Lock()
		defer inCluster.mu.Unlock()
		// Every request counts: the control plane rolls one replica at a
		// time (etcd members, API server replicas behind the load balancer,
		// metrics-server with a surge), so no restart excuses a failure. A
		// kubelet restart closes the kubelet's port: the node agent restarts
		// each kubelet once per phase, because the kubelet loads its
		// kubeconfig's CAs and its client certificate only at start
		// (docs/explanation/kubelet-credentials.md). Calls to a kubelet that
		// was restarting, and Lease samples that found its heartbeat late
		// then, are counted like every other failed request, and allowed;
		// no two kubelets of the pool ever restarted at once
		// (maxUnavailable). So are requests through the tunnel cut when a
		// drained agent stopped (see allowedKubeletCallFailure), and
		// requests for the aggregated API answered "service unavailable"
		// because the agent's end cut the aggregator's availability check
		// (see heldUnavailableAfterTunnelCut). A running
		// API server never reloads its kubelet client certificate, which
		// would close its kubelet connections under the calls in flight:
		// the platform mounts credentials with subPath (framework's
		// podFiles).
		// So are Lease samples that found no Lease where it was a moment
		// later (see sampleLeases). A certificate a kubelet or the API
		// server refused is never allowed.
		for _, f := range nodes.proxyFailures {
			Expect(f.err.Error()).NotTo(MatchRegexp(refusedCertificate.String()),
				"API server -> kubelet %s at %s failed on a certificate", f.node, f.at.Format("15:04:05.000"))
		}
		Expect(overlappingRestarts()).To(BeEmpty(), "kubelets of the pool restarted at the same time")
		var allowed, otherFailures []failure
		// classify files failures under allowed, with the reason set when
		// they were recorded or the one why finds, or under otherFailures.
		classify := func(failures []failure, why func(failure) string) {
			for _, f := range failures {
				if f.reason == "" && why != nil {
					f.reason = why(f)
				}
				if f.reason != "" {
					allowed = append(allowed, f)
				} else {
					otherFailures = append(otherFailures, f)
				}
			}
		}
		classify(nodes.proxyFailures, allowedKubeletCallFailure)
		classify(aggregated.failures, func(f failure) string {
			return cmp.Or(cutByTunnelAgentStop(f), heldUnavailableAfterTunnelCut(f, outages.all(), tunnelAgentStops(), tunnelCutTolerance))
		})
		classify(nodes.staleHeartbeat, allowedLateHeartbeat)
		classify(probe.failures, nil)
		classify(inCluster.failures, nil)
		failed := len(otherFailures) + len(allowed)
		// The failures while Aborting, counted by reason.
		failedAborting, whyAborting := 0, map[string]int{}
		for _, f := range append(slices.Clone(otherFailures), allowed...) {
			if !f.at.Before(aborting[0]) && !f.at.After(aborting[1]) {
				failedAborting++
				whyAborting[cmp.Or(f.reason, "not allowed")]++
			}
		}
		var reasonsAborting []string
		for _, why := range slices.Sorted(maps.Keys(whyAborting)) {
			reasonsAborting = append(reasonsAborting, fmt.Sprintf("%d %s", whyAborting[why], why))
		}
		requests := probe.requests + nodes.heartbeats + nodes.proxied + aggregated.requests + inCluster.requests
		exercised, missing := roles.exercised()
		summary := fmt.Sprintf("rotation e2e: prepared in %.0fs, completed in %.0fs, failed requests %d of %d, real kubelets %d, roles exercised %d/%d",
			preparedIn.Seconds(), completedIn.Seconds(), failed, requests, len(kubelets()), exercised, len(v1alpha1.CARoles()))
		abort := fmt.Sprintf("rotation e2e: a second rotation prepared in %.0fs, aborted in %.0fs, failed requests while Aborting %d (%s)",
			preparedAgainIn.Seconds(), abortedIn.Seconds(), failedAborting, strings.Join(reasonsAborting, ", "))
		AddReportEntry("abort", abort)
		fmt.Println(abort)
		AddReportEntry("probe requests", fmt.Sprintf("API server %d, API server -> kubelet %d, Lease samples %d, aggregated API %d, in-cluster workload %d",
			probe.requests, nodes.proxied, nodes.heartbeats, aggregated.requests, inCluster.requests))
		for _, m := range missing {
			AddReportEntry("role not exercised", m)
		}
		AddReportEntry("time in control-plane rollouts", fmt.Sprintf("Preparing %.0fs of %.0fs, Finalizing %.0fs of %.0fs",
			rolloutsPreparing.Seconds(), preparedIn.Seconds(), rolloutsFinish.Seconds(), completedIn.Seconds()))
		AddReportEntry("kubelet restarts", fmt.Sprintf("Preparing: %s; Finalizing: %s; Aborting: %s", kubeletsPreparing, kubeletsFinish, kubeletsAborting))
		if env != nil {
			replaced := fmt.Sprintf("Replace pool of %d Machines replaced by Cluster API in %.0fs (Preparing) and %.0fs (Finalizing)",
				replaceReplicas, replacedPreparing.Seconds(), replacedFinishing.Seconds())
			AddReportEntry("Replace pool", replaced)
			fmt.Printf("rotation e2e: %s\n", replaced)
		}
		AddReportEntry("Lease lists that lacked a node's Lease (read by name instead)", nodes.listsWithoutLease)
		if metricsServerRuns() {
			fmt.Printf("rotation e2e: the metrics APIService: %d states watched, unavailable %d times\n", outages.statesSeen(), len(outages.all()))
		}
		for _, o := range outages.all() {
			AddReportEntry("metrics APIService unavailable", o.String())
			fmt.Println("rotation e2e: metrics APIService unavailable", o)
		}
		for _, f := range otherFailures {
			failed := fmt.Sprintf("sent %s, failed %s, node %q: %v (tunnel agents ended nearby: %s)", f.sent.Format("15:04:05.000"),
				f.at.Format("15:04:05.000"), f.node, f.err, tunnelAgentStopsNear(f, 10*time.Second))
			AddReportEntry("failed request", failed)
			fmt.Println("rotation e2e: failed request, not allowed:", failed)
		}
		for _, f := range allowed {
			AddReportEntry("allowed failure: "+f.reason, fmt.Sprintf("%s %s: %v", f.at.Format("15:04:05.000"), f.node, f.err))
		}
		fmt.Printf("rotation e2e: of the failed requests, %d are allowed (see the report): a kubelet restarted, a tunnel agent "+
			"carrying the connection or the aggregator's availability check stopped, or the API server answered from a view without a Lease "+
			"that was there a moment later\n", len(allowed))
		fmt.Println(summary)
		AddReportEntry("summary", summary)
		Expect(otherFailures).To(BeEmpty(), "the failures are in the report entries above")
		// A probe that made no request has no failure to show either.
		Expect(probe.requests).To(BeNumerically(">", 0), "the API server probe made no request")
		Expect(nodes.proxied).To(BeNumerically(">", 0), "no API server -> kubelet call was made")
		Expect(nodes.heartbeats).To(BeNumerically(">", 0), "no Lease was sampled")
		if env != nil {
			Expect(inCluster.requests).To(BeNumerically(">", 0), "the in-cluster workload made no request")
		}
		if metricsServerRuns() {
			Expect(aggregated.requests).To(BeNumerically(">", 0), "the aggregated API probe made no request")
			Expect(outages.statesSeen()).To(BeNumerically(">", 0), "the watch of the metrics APIService saw nothing: its outages are unknown")
		}
	})

	It("rotated the Cluster left to its policy on its own: started in its maintenance window once a CA had used 1% of its validity, completed after a soak of 0s", func(ctx SpecContext) {
		key := client.ObjectKeyFromObject(automatic)
		issued := automatic.Status.Credentials.CertificateAuthorities
		// Due 1% into a day's validity, about 15 minutes after it was issued:
		// the journey above takes longer, but a fast one waits for it here.
		completed := kit.WaitForPhase(ctx, tgt.Client, key, v1alpha1.RotationCompleted, kit.Wait{Timeout: 20 * time.Minute, Polling: 5 * time.Second})
		rot := completed.CARotation()
		Expect(rot.LastInitiationTime.Time).To(BeTemporally(">=", issued[0].Current.NotBefore.Add(issued[0].Current.NotAfter.Sub(issued[0].Current.NotBefore.Time)/100)),
			"it started once the CAs had used 1%% of their validity")
		for i, ca := range completed.Status.Credentials.CertificateAuthorities {
			Expect(ca.Current.Fingerprint).NotTo(Equal(issued[i].Current.Fingerprint), "the %s CA was rotated", ca.Role)
			Expect(ca.Previous).To(BeNil(), "the old %s CA was dropped", ca.Role)
		}
		var events eventsv1.EventList
		Expect(tgt.Client.List(ctx, &events, client.InNamespace(tgt.Namespace))).To(Succeed())
		var notes []string
		for _, e := range events.Items {
			if e.Regarding.Name == automatic.Name && e.Reason == v1alpha1.EventAutomaticCARotation {
				notes = append(notes, e.Note)
			}
		}
		Expect(notes).To(ContainElements(
			And(HavePrefix("Maintenance window open: carrying out start-ca-rotation: the "), ContainSubstring("has used 1% of its validity")),
			HavePrefix("Maintenance window open: carrying out complete-ca-rotation: the rotation has been Prepared since")))
		Eventually(func(g Gomega) {
			cond := meta.FindStatusCondition(kit.GetCluster(ctx, tgt.Client, key).Status.Conditions, v1alpha1.ConditionAutomaticCARotationScheduled)
			g.Expect(cond).To(HaveField("Message", HavePrefix("start-ca-rotation is due at")), "the next rotation is scheduled from the new CAs")
		}).Should(Succeed())
	})
})

// createAutomaticCluster creates, next to the journey's, a Cluster without an
// endpoint that Carousel rotates on its own: its CAs are valid a day (the
// least), a rotation starts once one has used 1% of it and completes once
// Prepared, inside a maintenance window open from now on for six hours. It
// returns the Cluster once its credentials are issued, and deletes it when
// the journey ends.
func createAutomaticCluster(ctx context.Context) *v1alpha1.Cluster {
	GinkgoHelper()
	begin := time.Now().UTC().Add(-time.Minute)
	c := &v1alpha1.Cluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: tgt.Namespace, Name: tgt.Name + "-automatic"},
		Spec: v1alpha1.ClusterSpec{
			KubernetesVersion: "1.36.3",
			Certificates: v1alpha1.CertificateSettings{CAValidity: &metav1.Duration{Duration: v1alpha1.MinCAValidity},
				LeafValidity: &metav1.Duration{Duration: v1alpha1.MinLeafValidity}},
			Maintenance: &v1alpha1.MaintenanceSpec{TimeWindow: v1alpha1.MaintenanceTimeWindow{
				Begin: begin.Format("150405") + "+0000", End: begin.Add(6*time.Hour).Format("150405") + "+0000"}},
			CARotation: v1alpha1.CARotationSettings{Automatic: &v1alpha1.AutomaticCARotation{
				ValidityUsedPercent: ptr.To[int32](1), CompleteAfter: &metav1.Duration{}}},
		},
	}
	Expect(tgt.Client.Create(ctx, c)).To(Succeed())
	DeferCleanup(func(ctx SpecContext) { Expect(client.IgnoreNotFound(tgt.Client.Delete(ctx, c))).To(Succeed()) })
	return kit.WaitForReady(ctx, tgt.Client, client.ObjectKeyFromObject(c), kit.Wait{Timeout: time.Minute, Polling: time.Second})
}

// provisionedClientCertificate is a node's client certificate as its
// machine's provisioning would have signed it, from the current client CA,
// for an hour: longer than the rotation, unlike the certificates the suite's
// controller manager signs (kubeletCertificateValidity).
func provisionedClientCertificate(ctx context.Context, node string) (certPEM, keyPEM []byte) {
	GinkgoHelper()
	key, err := pki.GenerateKey(pki.ECDSAP256)
	Expect(err).NotTo(HaveOccurred())
	cert, err := cas(ctx)[v1alpha1.CARoleClient].Current.Issue(pki.LeafTemplate{
		CommonName: "system:node:" + node, Organization: []string{"system:nodes"},
		Usages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, Validity: time.Hour,
	}, key.Public(), time.Now())
	Expect(err).NotTo(HaveOccurred())
	keyPEM, err = pki.EncodePrivateKey(key)
	Expect(err).NotTo(HaveOccurred())
	return pki.EncodeCertificates(cert), keyPEM
}

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

// expectNodesReported checks what every node whose machine is on reported
// on its Node: a client certificate issued by clientCA, and its node agent's mark.
func expectNodesReported(ctx context.Context, clientCA *x509.Certificate) {
	GinkgoHelper()
	nodes, err := clientFor(adminKubeconfig(ctx)).CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	Expect(err).NotTo(HaveOccurred())
	Expect(nodes.Items).NotTo(BeEmpty())
	for _, n := range nodes.Items {
		if poweredOff(n.Name) || n.Labels[v1alpha1.LabelPool] == replacePool {
			continue // a Replace pool's nodes run no node agent: expectMachinesReplaced reads their files
		}
		Expect(n.Annotations).To(HaveKeyWithValue(v1alpha1.AnnotationClientCertificateIssuer, hex.EncodeToString(clientCA.SubjectKeyId)),
			"node %s reported a client certificate from the current client CA", n.Name)
		Expect(n.Annotations).To(HaveKeyWithValue(v1alpha1.AnnotationNodeAgent, Not(BeEmpty())), "node %s is marked as running the node agent", n.Name)
	}
}

// offlineNodeTimeout is the pool's offlineNodeTimeout in the suite: the
// least the API allows.
const offlineNodeTimeout = v1alpha1.MinOfflineNodeTimeout

// expectRolledWithoutOffline checks, when off is not nil, that the pool was
// rolled without it in the phase that began at since, and that Carousel said
// so in an event naming it.
func expectRolledWithoutOffline(ctx context.Context, since time.Time, off *framework.KubeletNode) {
	GinkgoHelper()
	if off == nil {
		return
	}
	Eventually(func(g Gomega) {
		var events eventsv1.EventList
		g.Expect(tgt.Client.List(ctx, &events, client.InNamespace(tgt.Namespace))).To(Succeed())
		var messages []string
		for _, e := range events.Items {
			if e.Regarding.Name == tgt.Name && e.Reason == v1alpha1.EventWorkerPoolRolledWithoutOfflineNodes && !eventTime(e).Before(since.Truncate(time.Second)) {
				messages = append(messages, e.Note)
			}
		}
		g.Expect(messages).To(ContainElement(ContainSubstring(off.Name + " (")))
		for _, n := range runningKubelets() {
			g.Expect(messages).NotTo(ContainElement(ContainSubstring(n.Name+" (")), "node %s is running: the pool must wait for it", n.Name)
		}
	}).WithTimeout(30*time.Second).Should(Succeed(), "a %s event names node %s, and only it", v1alpha1.EventWorkerPoolRolledWithoutOfflineNodes, off.Name)
}

// eventTime is when an event last happened.
func eventTime(e eventsv1.Event) time.Time {
	if e.Series != nil {
		return e.Series.LastObservedTime.Time
	}
	return e.EventTime.Time
}

// overlappingRestarts names the pairs of kubelets whose restarts overlapped.
func overlappingRestarts() []string {
	var overlaps []string
	all := kubelets()
	for i, a := range all {
		for _, b := range all[i+1:] {
			for _, wa := range a.Restarts() {
				for _, wb := range b.Restarts() {
					if wa.Start.Before(wb.End) && wb.Start.Before(wa.End) {
						overlaps = append(overlaps, fmt.Sprintf("%s %s-%s and %s %s-%s", a.Name, wa.Start.Format("15:04:05.000"), wa.End.Format("15:04:05.000"),
							b.Name, wb.Start.Format("15:04:05.000"), wb.End.Format("15:04:05.000")))
					}
				}
			}
		}
	}
	return overlaps
}

// kubeletRestartsText says how many kubelet restarts there were between from
// and to, and how long the kubelets were down in them in total.
func kubeletRestartsText(from, to time.Time) string {
	total, count := kubeletRestarts(from, to)
	return fmt.Sprintf("%d restarts, %.1fs down in total", count, total.Seconds())
}

// allowedKubeletCallFailure says why a failed API server -> kubelet call is
// allowed, or "" if it is not.
func allowedKubeletCallFailure(f failure) string {
	if duringKubeletRestart(f, kubeletRestartsOf(f.node)) {
		return kubeletRestartedReason
	}
	return cutByTunnelAgentStop(f)
}

// allowedLateHeartbeat says why a Lease sample that found a heartbeat late
// is allowed, or "" if it is not.
func allowedLateHeartbeat(f failure) string {
	if heartbeatLateFromRestart(f, kubeletRestartsOf(f.node)) {
		return kubeletRestartedReason
	}
	return ""
}

const kubeletRestartedReason = "the kubelet restarted"

// cutByTunnelAgentStop says, for a request through the tunnel that failed
// because its connection broke as the platform ended a drained agent (see
// framework's stopTunnelAgent), that it is allowed; otherwise "".
func cutByTunnelAgentStop(f failure) string {
	if closedWhileInFlight(f, tunnelAgentStops(), tunnelCutTolerance) {
		return "a tunnel agent carrying it stopped"
	}
	return ""
}

// tunnelAgentStops are when the tunnel's drained agents ended, if the suite
// runs the control plane.
func tunnelAgentStops() []time.Time {
	if env == nil {
		return nil
	}
	return env.ControlPlane.TunnelAgentStops()
}

// tunnelAgentStopsNear lists the tunnel agents' ends within d of f's
// flight, to tell a failure that no rule allows from one that missed a rule.
func tunnelAgentStopsNear(f failure, d time.Duration) string {
	var near []string
	for _, t := range tunnelAgentStops() {
		if f.inFlight().Contains(t, d) {
			near = append(near, t.Format("15:04:05.000"))
		}
	}
	return cmp.Or(strings.Join(near, ", "), "none")
}

// tunnelCutTolerance widens a request's flight when matched against a
// tunnel agent's end: the API server may send a request on a connection
// whose agent has just ended before it hears of the end, and the end is
// recorded a moment after the agent's sockets closed.
const tunnelCutTolerance = 2 * time.Second

// closedWhileInFlight reports whether f failed because its connection was
// closed under it at one of instants, while it was under way (give or take
// tolerance). How long the failure took to reach the probe does not matter:
// on a loaded machine it takes seconds.
func closedWhileInFlight(f failure, instants []time.Time, tolerance time.Duration) bool {
	if !closedConnection.MatchString(f.err.Error()) {
		return false
	}
	return slices.ContainsFunc(instants, func(t time.Time) bool { return f.inFlight().Contains(t, tolerance) })
}

// closedConnection is how a request through the tunnel fails when the
// connection under it closed: before the answer's headers, the API server
// says it could not reach the service; after them, its reverse proxy aborts
// the response (http.ErrAbortHandler), which an HTTP/2 client sees as the
// stream reset with INTERNAL_ERROR.
var closedConnection = regexp.MustCompile(`use of closed network connection|error trying to reach service: (unexpected )?EOF|` +
	`stream error: stream ID \d+; INTERNAL_ERROR; received from peer`)

// rolloutTime sums the platform's rollouts of the control plane between
// from and to.
func rolloutTime(from, to time.Time) time.Duration {
	if env == nil {
		return 0
	}
	total, _ := within(env.Platform.Rollouts(), from, to)
	return total
}

// within sums and counts the windows that lie between from and to.
func within(windows []framework.Window, from, to time.Time) (time.Duration, int) {
	var total time.Duration
	count := 0
	for _, w := range windows {
		if !w.Start.Before(from) && !w.End.After(to) {
			total += w.End.Sub(w.Start)
			count++
		}
	}
	return total, count
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
