package integration

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
	outputv1alpha1 "github.com/carousel-dev/carousel/apis/output/v1alpha1"
	"github.com/carousel-dev/carousel/pkg/credentials"
	"github.com/carousel-dev/carousel/pkg/rotation"
	"github.com/carousel-dev/carousel/test/framework/kit"
)

// kubectlCarousel runs the plugin in-process against the test API server, as
// a cluster admin, and returns its standard output.
func kubectlCarousel(ctx context.Context, args ...string) (string, error) {
	GinkgoHelper()
	admin, err := testEnv.AddUser(envtest.User{Name: "plugin-admin", Groups: []string{"system:masters"}}, nil)
	Expect(err).NotTo(HaveOccurred())
	kubeconfig, err := admin.KubeConfig()
	Expect(err).NotTo(HaveOccurred())
	path := filepath.Join(GinkgoT().TempDir(), "kubeconfig")
	Expect(os.WriteFile(path, kubeconfig, 0o600)).To(Succeed())
	return kit.KubectlCarousel(ctx, path, clock.RealClock{}, args...)
}

// kubectlCarouselAt is kubectlCarousel with clk as the time of the plugin
// and of the management cluster: the plugin reaches the test API server
// through a proxy that authenticates as a cluster admin and dates each
// answer by clk (its Date header, by which the plugin judges when an upload
// expires, as it does by a real API server's).
func kubectlCarouselAt(ctx context.Context, clk clock.Clock, args ...string) (string, error) {
	GinkgoHelper()
	upstream, err := url.Parse(cfg.Host)
	Expect(err).NotTo(HaveOccurred())
	transport, err := rest.TransportFor(cfg)
	Expect(err).NotTo(HaveOccurred())
	proxy := httputil.NewSingleHostReverseProxy(upstream)
	proxy.Transport, proxy.FlushInterval = transport, -1
	proxy.ModifyResponse = func(resp *http.Response) error {
		resp.Header.Set("Date", clk.Now().UTC().Format(http.TimeFormat))
		return nil
	}
	server := httptest.NewServer(proxy)
	defer server.Close()
	kubeconfig, err := clientcmd.Write(clientcmdapi.Config{
		Clusters:       map[string]*clientcmdapi.Cluster{"management": {Server: server.URL}},
		AuthInfos:      map[string]*clientcmdapi.AuthInfo{"admin": {}},
		Contexts:       map[string]*clientcmdapi.Context{"management": {Cluster: "management", AuthInfo: "admin"}},
		CurrentContext: "management",
	})
	Expect(err).NotTo(HaveOccurred())
	path := filepath.Join(GinkgoT().TempDir(), "kubeconfig")
	Expect(os.WriteFile(path, kubeconfig, 0o600)).To(Succeed())
	return kit.KubectlCarousel(ctx, path, clk, args...)
}

var _ = Describe("kubectl carousel", func() {
	It("starts, follows and completes a rotation, and shows status and expiration", func(ctx SpecContext) {
		ns := newNamespace(ctx)
		var writes atomic.Int64
		startControllers(ns, &writes)
		c := createCluster(ctx, ns, "plugged", v1alpha1.WorkerPool{Name: "manual", RolloutStrategy: v1alpha1.RolloutManual})
		key := client.ObjectKeyFromObject(c)
		waitForReady(ctx, key)

		out, err := kubectlCarousel(ctx, "rotation", "plan", "plugged", "-n", ns)
		Expect(err).NotTo(HaveOccurred())
		Expect(out).To(ContainSubstring("now in phase none (never rotated)"))
		Expect(out).To(MatchRegexp(`re-issue from the new CAs: kube-apiserver-etcd-client, front-proxy-client, .*carousel-operator\n`))
		Expect(out).To(MatchRegexp(`keep on the old CAs: kube-apiserver, kube-apiserver-kubelet-client, etcd-server`))
		Expect(out).To(ContainSubstring("manual (Manual): nodes unknown: the Cluster has no endpoint"))
		Expect(getCluster(ctx, key).CARotationPhase()).To(BeEmpty(), "plan changes nothing")

		out, err = kubectlCarousel(ctx, "rotation", "complete", "plugged", "-n", ns)
		Expect(err).To(MatchError(ContainSubstring("cannot complete the CA rotation in phase none (never rotated)")))
		Expect(out).To(BeEmpty())

		out, err = kubectlCarousel(ctx, "rotation", "start", "plugged", "-n", ns)
		Expect(err).NotTo(HaveOccurred())
		Expect(out).To(ContainSubstring("cluster " + ns + "/plugged: start-ca-rotation requested"))
		Eventually(func(g Gomega) {
			out, err := kubectlCarousel(ctx, "rotation", "status", "plugged", "-n", ns)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(out).To(MatchRegexp(`Phase:\s+Preparing`))
			g.Expect(out).To(MatchRegexp(`Pending worker rollouts:\s+manual`))
			g.Expect(out).To(MatchRegexp(`Waiting for:\s+Preparing: 1 worker pool\(s\) still to roll`))
			g.Expect(out).To(MatchRegexp(`(?m)^CARotationInProgress\s+True\s+WaitingForWorkerRollout\s+\S+Z\s+Preparing: 1 worker pool\(s\) still to roll`),
				"the conditions the recovery guide reads")
			g.Expect(out).To(MatchRegexp(`(?m)^Ready\s+True\s+CredentialsIssued\s`))
			for _, role := range v1alpha1.CARoles() {
				g.Expect(out).To(MatchRegexp(`(?m)^`+string(role)+`\s+[0-9a-f]{16}\s+\S+\s+[0-9a-f]{16}`), "role %s has a current and a previous CA", role)
			}
		}).Should(Succeed())

		By("printing the Cluster, the plan and the expiration as JSON or YAML for scripts")
		out, err = kubectlCarousel(ctx, "rotation", "status", "plugged", "-n", ns, "-o", "yaml")
		Expect(err).NotTo(HaveOccurred())
		printed := &v1alpha1.Cluster{}
		Expect(yaml.UnmarshalStrict([]byte(out), printed)).To(Succeed())
		Expect(printed.APIVersion + " " + printed.Kind).To(Equal("carousel.dev/v1alpha1 Cluster"))
		Expect(printed.CARotationPhase()).To(Equal(v1alpha1.RotationPreparing))
		Expect(printed.ManagedFields).To(BeEmpty(), "as kubectl get, without --show-managed-fields")
		out, err = kubectlCarousel(ctx, "rotation", "plan", "plugged", "-n", ns, "-o", "json")
		Expect(err).NotTo(HaveOccurred())
		plan := &outputv1alpha1.RotationPlan{}
		Expect(json.Unmarshal([]byte(out), plan)).To(Succeed())
		Expect(plan.Kind).To(Equal("RotationPlan"))
		Expect(plan.Phase).To(Equal("Preparing"))
		Expect(plan.Phases[0].Steps).To(ContainElement(HaveField("WorkerPools", ConsistOf(outputv1alpha1.WorkerPoolPlan{
			Name: "manual", RolloutStrategy: "Manual", NodesUnknown: "the Cluster has no endpoint"}))))
		out, err = kubectlCarousel(ctx, "certs", "check-expiration", "plugged", "-n", ns, "-o", "json")
		Expect(err).NotTo(HaveOccurred())
		expiration := &outputv1alpha1.CertificateExpirationInfo{}
		Expect(json.Unmarshal([]byte(out), expiration)).To(Succeed())
		Expect(expiration.Certificates).To(HaveLen(len(credentials.Certificates(c))))
		Expect(expiration.Certificates).To(HaveEach(HaveField("ResidualTime.Duration", BeNumerically(">", 364*24*time.Hour))))
		Expect(expiration.CertificateAuthorities).To(ContainElement(And(HaveField("Role", "client"), HaveField("Generation", "previous"))))

		By("completing Cluster names")
		out, err = kubectlCarousel(ctx, "__complete", "rotation", "status", "-n", ns, "plu")
		Expect(err).NotTo(HaveOccurred())
		Expect(out).To(Equal("plugged\n:4\n"))

		out, err = kubectlCarousel(ctx, "certs", "check-expiration", "plugged", "-n", ns)
		Expect(err).NotTo(HaveOccurred())
		Expect(out).To(ContainSubstring("RESIDUAL TIME"))
		for _, cert := range credentials.Certificates(c) {
			Expect(out).To(MatchRegexp(`(?m)^` + cert.Name + `\s+\w{3} \d{2}, \d{4} \d{2}:\d{2} UTC\s+(364d|365d)\s+` + string(cert.SignedBy)))
		}
		Expect(out).To(MatchRegexp(`(?m)^client\s+.*\s+previous$`))

		Expect(annotate(ctx, getCluster(ctx, key), "rollout-workers=manual")).To(Succeed())
		waitForPhase(ctx, key, v1alpha1.RotationPrepared)
		done := make(chan string)
		go func() {
			defer GinkgoRecover()
			out, err := kubectlCarousel(ctx, "rotation", "complete", "plugged", "-n", ns, "--wait", "--timeout", "1m")
			Expect(err).NotTo(HaveOccurred())
			done <- out
		}()
		Eventually(func() bool { return getCluster(ctx, key).IsPendingWorkerPool("manual") }).Should(BeTrue())
		Expect(annotate(ctx, getCluster(ctx, key), "rollout-workers=manual")).To(Succeed())
		var followed string
		Eventually(done).WithTimeout(time.Minute).Should(Receive(&followed))
		Expect(followed).To(ContainSubstring("complete-ca-rotation requested"))
		Expect(followed).To(HaveSuffix("phase Completed\n"))
		lines := strings.Split(strings.TrimSpace(followed), "\n")
		for i := 1; i < len(lines); i++ {
			Expect(lines[i]).NotTo(Equal(lines[i-1]), "--wait prints each change once:\n%s", followed)
		}
	})

	It("starts a rotation without workers rollout and rolls the held pools one at a time", func(ctx SpecContext) {
		ns := newNamespace(ctx)
		var writes atomic.Int64
		startControllers(ns, &writes)
		createCluster(ctx, ns, "held", v1alpha1.WorkerPool{Name: "canary", RolloutStrategy: v1alpha1.RolloutManual},
			v1alpha1.WorkerPool{Name: "bulk", RolloutStrategy: v1alpha1.RolloutManual})
		key := client.ObjectKey{Namespace: ns, Name: "held"}
		waitForReady(ctx, key)

		out, err := kubectlCarousel(ctx, "rotation", "start", "held", "-n", ns, "--without-workers-rollout", "--wait", "--timeout", "1m")
		Expect(err).NotTo(HaveOccurred())
		Expect(out).To(HavePrefix("cluster " + ns + "/held: start-ca-rotation-without-workers-rollout requested\n"))
		Expect(out).To(HaveSuffix("phase WaitingForWorkersRollout: everything but the held worker pools is prepared; 2 pool(s) held: canary, bulk; " +
			"roll them with carousel.dev/operation=rotate-rollout-workers=<pool>[,<pool>]\n"))
		out, err = kubectlCarousel(ctx, "rotation", "status", "held", "-n", ns)
		Expect(err).NotTo(HaveOccurred())
		Expect(out).To(MatchRegexp(`Phase:\s+WaitingForWorkersRollout\n`))
		Expect(out).To(MatchRegexp(`Pending worker rollouts:\s+canary \(held: kubectl carousel rotation rollout-workers\), bulk \(held: kubectl carousel rotation rollout-workers\)\n`))

		By("completing the held pools' names")
		out, err = kubectlCarousel(ctx, "__complete", "rotation", "rollout-workers", "held", "canary", "-n", ns, "")
		Expect(err).NotTo(HaveOccurred())
		Expect(out).To(Equal("bulk\n:4\n"))

		_, err = kubectlCarousel(ctx, "rotation", "rollout-workers", "held", "-n", ns)
		Expect(err).To(MatchError(ContainSubstring("takes the name of a Cluster and of at least one worker pool, got 1 argument(s)")))
		_, err = kubectlCarousel(ctx, "rotation", "rollout-workers", "held", "nope", "-n", ns)
		Expect(err).To(MatchError(ContainSubstring(`worker pool "nope" does not exist (phase WaitingForWorkersRollout)`)))

		By("rolling the canary pool: --wait follows it back to WaitingForWorkersRollout")
		done := make(chan string)
		go func() {
			defer GinkgoRecover()
			out, err := kubectlCarousel(ctx, "rotation", "rollout-workers", "held", "canary", "-n", ns, "--wait", "--timeout", "1m")
			Expect(err).NotTo(HaveOccurred())
			done <- out
		}()
		Eventually(func(g Gomega) {
			c := getCluster(ctx, key)
			g.Expect(c.CARotationPhase()).To(Equal(v1alpha1.RotationPreparing))
			g.Expect(c.Annotations).NotTo(HaveKey(v1alpha1.OperationAnnotation))
			g.Expect(meta.FindStatusCondition(c.Status.Conditions, v1alpha1.ConditionCARotation)).To(HaveField("Reason", string(v1alpha1.ReasonWaitingForWorkers)))
		}).Should(Succeed())
		Expect(annotate(ctx, getCluster(ctx, key), "rollout-workers=canary")).To(Succeed(), "the Manual pool reported rolled")
		var followed string
		Eventually(done).WithTimeout(time.Minute).Should(Receive(&followed))
		Expect(followed).To(HavePrefix("cluster " + ns + "/held: rotate-rollout-workers=canary requested\n"))
		Expect(followed).To(MatchRegexp(`\nphase Preparing: [^\n]*roll pool canary and report it`))
		Expect(followed).NotTo(ContainSubstring("phase Preparing: WaitingForWorkersRollout"), "no line shows the condition of the phase before")
		Expect(followed).To(HaveSuffix("phase WaitingForWorkersRollout: everything but the held worker pools is prepared; 1 pool(s) held: bulk; " +
			"roll them with carousel.dev/operation=rotate-rollout-workers=<pool>[,<pool>]\n"))

		_, err = kubectlCarousel(ctx, "rotation", "complete", "held", "-n", ns)
		Expect(err).To(MatchError(ContainSubstring("cannot complete the CA rotation in phase WaitingForWorkersRollout")))
		out, err = kubectlCarousel(ctx, "rotation", "rollout-workers", "held", "bulk", "-n", ns)
		Expect(err).NotTo(HaveOccurred())
		Expect(out).To(Equal("cluster " + ns + "/held: rotate-rollout-workers=bulk requested\n"))
		Eventually(func() bool {
			c := getCluster(ctx, key)
			return c.IsPendingWorkerPool("bulk") && !c.IsHeldWorkerPool("bulk")
		}).Should(BeTrue())
		Expect(annotate(ctx, getCluster(ctx, key), "rollout-workers=bulk")).To(Succeed())
		waitForPhase(ctx, key, v1alpha1.RotationPrepared)
	})

	It("aborts a rotation with a held pool: --wait follows it to Aborted, every pool, the held one too, rolling back and again", func(ctx SpecContext) {
		ns := newNamespace(ctx)
		var writes atomic.Int64
		startControllers(ns, &writes)
		createCluster(ctx, ns, "aborted", v1alpha1.WorkerPool{Name: "canary", RolloutStrategy: v1alpha1.RolloutManual},
			v1alpha1.WorkerPool{Name: "bulk", RolloutStrategy: v1alpha1.RolloutManual})
		key := client.ObjectKey{Namespace: ns, Name: "aborted"}
		waitForReady(ctx, key)
		_, err := kubectlCarousel(ctx, "rotation", "abort", "aborted", "-n", ns)
		Expect(err).To(MatchError(ContainSubstring("cannot abort the CA rotation in phase none (never rotated)")))

		_, err = kubectlCarousel(ctx, "rotation", "start", "aborted", "-n", ns, "--without-workers-rollout", "--wait", "--timeout", "1m")
		Expect(err).NotTo(HaveOccurred())
		_, err = kubectlCarousel(ctx, "rotation", "rollout-workers", "aborted", "canary", "-n", ns)
		Expect(err).NotTo(HaveOccurred())
		Eventually(func() bool {
			c := getCluster(ctx, key)
			return c.IsPendingWorkerPool("canary") && !c.IsHeldWorkerPool("canary")
		}).Should(BeTrue())
		Expect(annotate(ctx, getCluster(ctx, key), "rollout-workers=canary")).To(Succeed(), "the Manual pool reported rolled")
		c := waitForPhase(ctx, key, v1alpha1.RotationWaitingForWorkersRollout)
		recordKubeconfig(ctx, c, "carousel:admin:dave", loadCAs(ctx, c)[v1alpha1.CARoleClient].Current)

		done := make(chan string)
		go func() {
			defer GinkgoRecover()
			out, err := kubectlCarousel(ctx, "rotation", "abort", "aborted", "-n", ns, "--wait", "--timeout", "1m")
			Expect(err).NotTo(HaveOccurred())
			done <- out
		}()
		for rollout := range 2 { // back to the old credentials, then to the old trust alone
			if rollout == 1 {
				By("waiting for dave, who holds a kubeconfig from the new client CA, until --force")
				Eventually(func(g Gomega) {
					cond := meta.FindStatusCondition(getCluster(ctx, key).Status.Conditions, v1alpha1.ConditionCARotation)
					g.Expect(cond).NotTo(BeNil())
					g.Expect(cond.Reason).To(Equal(string(v1alpha1.ReasonWaitingForKubeconfigHolders)))
					g.Expect(cond.Message).To(ContainSubstring(": carousel:admin:dave; "))
				}).Should(Succeed())
				out, err := kubectlCarousel(ctx, "rotation", "abort", "aborted", "-n", ns, "--force")
				Expect(err).NotTo(HaveOccurred())
				Expect(out).To(ContainSubstring("abort-ca-rotation=force requested"))
				Eventually(func() *metav1.Time { return getCluster(ctx, key).CARotation().AbortForcedTime }).ShouldNot(BeNil())
				out, err = kubectlCarousel(ctx, "rotation", "status", "aborted", "-n", ns)
				Expect(err).NotTo(HaveOccurred())
				Expect(out).To(MatchRegexp(`Abort forced:\s+\d{4}-`))
			}
			Eventually(func(g Gomega) {
				c := getCluster(ctx, key)
				g.Expect(c.Annotations).NotTo(HaveKey(v1alpha1.OperationAnnotation))
				g.Expect(c.CARotationPhase()).To(Equal(v1alpha1.RotationAborting))
				g.Expect(c.CARotation().AbortRolledBackTime != nil).To(Equal(rollout == 1), "the second rollout comes once the first is recorded")
				g.Expect(c.IsPendingWorkerPool("canary")).To(BeTrue())
				g.Expect(c.IsPendingWorkerPool("bulk")).To(BeTrue(), "the held pool rolls too: its kubelets may have renewed from the new client CA")
				g.Expect(rotation.HeldPools(c.CARotation())).To(BeEmpty())
				g.Expect(meta.FindStatusCondition(c.Status.Conditions, v1alpha1.ConditionCARotation)).To(HaveField("Reason", string(v1alpha1.ReasonWaitingForWorkers)))
			}).Should(Succeed())
			out, err := kubectlCarousel(ctx, "rotation", "status", "aborted", "-n", ns)
			Expect(err).NotTo(HaveOccurred())
			Expect(out).To(MatchRegexp(`Phase:\s+Aborting\n`))
			Expect(out).To(MatchRegexp(`Last abort triggered:\s+\d{4}-`))
			Expect(out).To(MatchRegexp(`Pending worker rollouts:\s+canary, bulk\n`))
			Expect(annotate(ctx, getCluster(ctx, key), "rollout-workers=canary,bulk")).To(Succeed())
		}
		var followed string
		Eventually(done).WithTimeout(time.Minute).Should(Receive(&followed))
		Expect(followed).To(HavePrefix("cluster " + ns + "/aborted: abort-ca-rotation requested\n"))
		Expect(followed).To(ContainSubstring("phase Aborting: "))
		Expect(followed).To(HaveSuffix("phase Aborted\n"))
		Expect(getCluster(ctx, key).CARotation().PendingWorkersRollouts).To(BeEmpty())
		_, err = kubectlCarousel(ctx, "rotation", "complete", "aborted", "-n", ns)
		Expect(err).To(MatchError(ContainSubstring("cannot complete the CA rotation in phase Aborted")))
	})

	It("rotates the CAs and the service-account key together with --scope all, and the key alone with --scope service-account-key", func(ctx SpecContext) {
		ns := newNamespace(ctx)
		var writes atomic.Int64
		startControllers(ns, &writes)
		c := createCluster(ctx, ns, "both")
		key := client.ObjectKeyFromObject(c)
		waitForReady(ctx, key)
		c = getCluster(ctx, key)
		patch := client.MergeFrom(c.DeepCopy())
		c.Spec.ServiceAccountKeyRotation.WorkloadTokenRefresh = &metav1.Duration{} // no pod holds a token
		Expect(k8s.Patch(ctx, c, patch)).To(Succeed())

		_, err := kubectlCarousel(ctx, "rotation", "start", "both", "-n", ns, "--scope", "keys")
		Expect(err).To(MatchError(ContainSubstring(`--scope "keys" is not one of ca, service-account-key, all`)))
		_, err = kubectlCarousel(ctx, "rotation", "start", "both", "-n", ns, "--scope", "all", "--without-workers-rollout")
		Expect(err).To(MatchError(ContainSubstring("--without-workers-rollout rotates the CAs only: it cannot be combined with --scope all")))

		out, err := kubectlCarousel(ctx, "rotation", "start", "both", "-n", ns, "--scope", "all", "--wait", "--timeout", "1m")
		Expect(err).NotTo(HaveOccurred())
		Expect(out).To(HavePrefix("cluster " + ns + "/both: rotate-credentials-start requested\n"))
		Expect(out).To(MatchRegexp(`\nphase Prepared[^\n]*; service-account key phase Prepared: complete it with carousel.dev/operation=rotate-serviceaccount-key-complete[^\n]*\n$`))
		c = getCluster(ctx, key)
		Expect(c.CARotationPhase()).To(Equal(v1alpha1.RotationPrepared))
		Expect(c.ServiceAccountKeyRotationPhase()).To(Equal(v1alpha1.ServiceAccountKeyPrepared))

		out, err = kubectlCarousel(ctx, "rotation", "status", "both", "-n", ns)
		Expect(err).NotTo(HaveOccurred())
		Expect(out).To(MatchRegexp(`Service-account key phase:\s+Prepared\n`))

		out, err = kubectlCarousel(ctx, "rotation", "complete", "both", "-n", ns, "--scope", "all", "--wait", "--timeout", "1m")
		Expect(err).NotTo(HaveOccurred())
		Expect(out).To(HavePrefix("cluster " + ns + "/both: rotate-credentials-complete requested\n"))
		Expect(out).To(HaveSuffix("phase Completed; service-account key phase Completed\n"))

		By("rotating the key alone; the CA rotation stays Completed")
		out, err = kubectlCarousel(ctx, "rotation", "start", "both", "-n", ns, "--scope", "service-account-key", "--wait", "--timeout", "1m")
		Expect(err).NotTo(HaveOccurred())
		Expect(out).To(HavePrefix("cluster " + ns + "/both: rotate-serviceaccount-key-start requested\n"))
		Expect(out).NotTo(MatchRegexp(`(?m)^phase `), "the CA rotation is not followed")
		_, err = kubectlCarousel(ctx, "rotation", "start", "both", "-n", ns, "--scope", "all")
		Expect(err).To(MatchError(ContainSubstring("cannot start a service-account key rotation: the rotation is in phase Prepared")))
		Expect(getCluster(ctx, key).CARotationPhase()).To(Equal(v1alpha1.RotationCompleted))
	})

	It("ends --wait when Carousel refuses the operation, with its reason, and replaces no operation not taken yet", func(ctx SpecContext) {
		// No controller runs in this namespace: the spec does what Carousel
		// does when it refuses an operation the webhook admitted (the old-CA
		// usage gate finding a dependent after admission, say).
		ns := newNamespace(ctx)
		c := createCluster(ctx, ns, "refused")
		c.Status.Credentials = &v1alpha1.ClusterCredentials{Rotation: &v1alpha1.CredentialsRotation{CertificateAuthorities: &v1alpha1.CARotation{
			Phase: v1alpha1.RotationPrepared, LastInitiationTime: ptr.To(metav1.Now()), OldCAUsage: &v1alpha1.OldCAUsage{}}}}
		Expect(k8s.Status().Update(ctx, c)).To(Succeed())

		type result struct {
			out string
			err error
		}
		done := make(chan result, 1)
		// completeAndWait runs rotation complete --wait until the annotation is set; its result comes on done.
		completeAndWait := func() {
			go func() {
				defer GinkgoRecover()
				out, err := kubectlCarousel(ctx, "rotation", "complete", "refused", "-n", ns, "--wait", "--timeout", "5m")
				done <- result{out, err}
			}()
			Eventually(func() map[string]string { return getCluster(ctx, client.ObjectKeyFromObject(c)).Annotations }).
				Should(HaveKeyWithValue(v1alpha1.OperationAnnotation, v1alpha1.OperationCompleteCARotation))
		}
		// takeOperation removes the annotation, as Carousel does once it applied or refused the operation.
		takeOperation := func() {
			latest := getCluster(ctx, client.ObjectKeyFromObject(c))
			patch := client.MergeFrom(latest.DeepCopy())
			delete(latest.Annotations, v1alpha1.OperationAnnotation)
			Expect(k8s.Patch(ctx, latest, patch)).To(Succeed())
		}
		completeAndWait()

		By("asking for another operation before Carousel took the first")
		_, err := kubectlCarousel(ctx, "rotation", "abort", "refused", "-n", ns)
		Expect(err).To(MatchError(ContainSubstring("has carousel.dev/operation=complete-ca-rotation, which Carousel has not taken yet")))
		Expect(getCluster(ctx, client.ObjectKeyFromObject(c)).Annotations).To(HaveKeyWithValue(v1alpha1.OperationAnnotation, v1alpha1.OperationCompleteCARotation))

		By("refusing the completion as Carousel does: a Warning event, then the annotation removed")
		reason := `Operation "complete-ca-rotation" refused in phase "Prepared": node n1 still uses a client certificate from the old client CA`
		Expect(k8s.Create(ctx, &corev1.Event{
			ObjectMeta:     metav1.ObjectMeta{Namespace: ns, GenerateName: "refused."},
			InvolvedObject: corev1.ObjectReference{APIVersion: v1alpha1.SchemeGroupVersion.String(), Kind: "Cluster", Namespace: ns, Name: c.Name, UID: c.UID},
			Reason:         v1alpha1.EventOperationRefused, Message: reason, Type: corev1.EventTypeWarning,
			LastTimestamp: metav1.Now(), Source: corev1.EventSource{Component: "carousel"},
		})).To(Succeed())
		takeOperation()

		var r result
		Eventually(done).WithTimeout(30*time.Second).Should(Receive(&r), "--wait ends well before its --timeout")
		Expect(r.err).To(MatchError("cluster " + ns + "/refused: Carousel refused complete-ca-rotation and removed it: " + reason))
		Expect(r.out).To(ContainSubstring("phase Prepared"))

		By("an operation removed without an event (Carousel had applied it already) is followed on, whatever earlier refusals say")
		completeAndWait()
		takeOperation()
		Consistently(done).WithTimeout(12*time.Second).ShouldNot(Receive(), "it looks for a refusal for 10s, and goes on following")
		latest := getCluster(ctx, client.ObjectKeyFromObject(c))
		latest.Status.Credentials.Rotation.CertificateAuthorities.Phase = v1alpha1.RotationCompleted
		Expect(k8s.Status().Update(ctx, latest)).To(Succeed())
		Eventually(done).WithTimeout(30 * time.Second).Should(Receive(&r))
		Expect(r.err).NotTo(HaveOccurred())
		Expect(r.out).To(ContainSubstring("phase Completed"))
	})

	It("refuses a kubeconfig without an endpoint and a TTL out of bounds", func(ctx SpecContext) {
		ns := newNamespace(ctx)
		var writes atomic.Int64
		startControllers(ns, &writes)
		c := createCluster(ctx, ns, "unreachable")
		waitForReady(ctx, client.ObjectKeyFromObject(c))
		_, err := kubectlCarousel(ctx, "kubeconfig", "unreachable", "-n", ns)
		Expect(err).To(MatchError(ContainSubstring("no spec.controlPlane.endpoint")))
		_, err = kubectlCarousel(ctx, "kubeconfig", "unreachable", "-n", ns, "--ttl", "48h")
		Expect(err).To(MatchError(ContainSubstring("--ttl must be between 10m0s and 24h0m0s")))
	})

	It("uploads an encrypted copy of the CA keys that only the printed key opens, until its token expires", func(ctx SpecContext) {
		ns := newNamespace(ctx)
		var writes atomic.Int64
		startControllers(ns, &writes)
		c := createCluster(ctx, ns, "copied")
		waitForReady(ctx, client.ObjectKeyFromObject(c))
		By("a namespace writer adding a data key to the service-account key Secret: a file name on the downloader's machine")
		saKey := &corev1.Secret{}
		saName := client.ObjectKey{Namespace: ns, Name: credentials.ServiceAccountKeySecretName("copied")}
		Expect(k8s.Get(ctx, saName, saKey)).To(Succeed())
		saKey.Data["prod.kubeconfig"] = []byte("users: [{name: u, user: {exec: {command: /tmp/evil}}}]")
		Expect(k8s.Update(ctx, saKey)).To(Succeed())

		for _, ttl := range []string{"0s", "48h"} {
			_, err := kubectlCarousel(ctx, "certs", "upload", "copied", "-n", ns, "--ttl", ttl)
			Expect(err).To(MatchError(ContainSubstring("--ttl must be between 10m0s and 24h0m0s")), ttl)
		}
		uploads := &corev1.SecretList{}
		Expect(k8s.List(ctx, uploads, client.InNamespace("kube-system"), client.MatchingLabels{v1alpha1.LabelCertsUpload: string(c.UID)})).To(Succeed())
		Expect(uploads.Items).To(BeEmpty(), "nothing is written for a refused --ttl")

		out, err := kubectlCarousel(ctx, "certs", "upload", "copied", "-n", ns, "--ttl", "1h")
		Expect(err).NotTo(HaveOccurred())
		id := regexp.MustCompile(`as upload ([a-z0-9]{6}),`).FindStringSubmatch(out)
		key := regexp.MustCompile(`(?m)^([0-9a-f]{64})$`).FindStringSubmatch(out)
		Expect(id).To(HaveLen(2), out)
		Expect(key).To(HaveLen(2), out)

		copySecret := &corev1.Secret{}
		Expect(k8s.Get(ctx, client.ObjectKey{Namespace: "kube-system", Name: "carousel-certs-" + id[1]}, copySecret)).To(Succeed())
		Expect(copySecret.OwnerReferences).To(ConsistOf(HaveField("Name", "bootstrap-token-"+id[1])), "deleted with its token")
		Expect(string(copySecret.Data["certificates"])).NotTo(ContainSubstring("PRIVATE KEY"))

		dir := GinkgoT().TempDir()
		_, err = kubectlCarousel(ctx, "certs", "download", "copied", "-n", ns, "--upload-id", id[1], "--certificate-key", key[1], "--dir", dir)
		Expect(err).NotTo(HaveOccurred())
		clientCA := &corev1.Secret{}
		Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: credentials.CASecretName("copied", v1alpha1.CARoleClient)}, clientCA)).To(Succeed())
		Expect(os.ReadFile(filepath.Join(dir, "client-ca-tls.key"))).To(Equal(clientCA.Data[v1alpha1.DataKeyPrivateKey]))
		Expect(filepath.Join(dir, "sa.key")).To(BeARegularFile())
		Expect(k8s.Get(ctx, saName, saKey)).To(Succeed())
		Expect(saKey.Data).To(HaveKey("prod.kubeconfig"), "the upload read it")
		Expect(filepath.Join(dir, "prod.kubeconfig")).NotTo(BeAnExistingFile(), "a data key Carousel does not write names no file")

		By("downloading into a directory that has one of the files: nothing is written")
		mine := GinkgoT().TempDir()
		Expect(os.WriteFile(filepath.Join(mine, "sa.key"), []byte("mine"), 0o644)).To(Succeed())
		_, err = kubectlCarousel(ctx, "certs", "download", "copied", "-n", ns, "--upload-id", id[1], "--certificate-key", key[1], "--dir", mine)
		Expect(err).To(MatchError(ContainSubstring("already has sa.key; download replaces no file")))
		Expect(os.ReadFile(filepath.Join(mine, "sa.key"))).To(Equal([]byte("mine")))
		Expect(filepath.Join(mine, "client-ca-tls.key")).NotTo(BeAnExistingFile())

		wrong := strings.Repeat("0", 64)
		_, err = kubectlCarousel(ctx, "certs", "download", "copied", "-n", ns, "--upload-id", id[1], "--certificate-key", wrong, "--dir", dir)
		Expect(err).To(MatchError(ContainSubstring("the certificate key does not open this upload")))

		token := &corev1.Secret{}
		Expect(k8s.Get(ctx, client.ObjectKey{Namespace: "kube-system", Name: "bootstrap-token-" + id[1]}, token)).To(Succeed())
		token.Data["expiration"] = []byte(time.Now().Add(-time.Minute).UTC().Format(time.RFC3339))
		Expect(k8s.Update(ctx, token)).To(Succeed())
		_, err = kubectlCarousel(ctx, "certs", "download", "copied", "-n", ns, "--upload-id", id[1], "--certificate-key", key[1], "--dir", dir)
		Expect(err).To(MatchError(ContainSubstring("upload " + id[1] + " expired at")))
		Expect(k8s.Delete(ctx, token)).To(Succeed())
		_, err = kubectlCarousel(ctx, "certs", "download", "copied", "-n", ns, "--upload-id", id[1], "--certificate-key", key[1], "--dir", dir)
		Expect(err).To(MatchError(ContainSubstring("does not exist or has expired")))
	})
})
