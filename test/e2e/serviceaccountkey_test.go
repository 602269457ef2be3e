package e2e

import (
	"context"
	"net/http"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
	"github.com/carousel-dev/carousel/pkg/credentials"
	"github.com/carousel-dev/carousel/pkg/evidence"
	"github.com/carousel-dev/carousel/test/framework"
	"github.com/carousel-dev/carousel/test/framework/kit"
)

var _ = Describe("The service-account key rotation on the HA control plane", func() {
	It("moves ServiceAccount tokens to a new key without one replica rejecting a token another minted, and rejects the old key's tokens once completed", func(ctx SpecContext) {
		By("giving pods no time to replace their tokens: the workloads that hold one are restarted before completing")
		c := cluster(ctx)
		patch := client.MergeFrom(c.DeepCopy())
		c.Spec.ServiceAccountKeyRotation.WorkloadTokenRefresh = &metav1.Duration{}
		Expect(tgt.Client.Patch(ctx, c, patch)).To(Succeed())

		before, kidBefore, err := mintToken(ctx)
		Expect(err).NotTo(HaveOccurred())
		Expect(whoAmI(ctx, tokenClient(ctx, before))).To(Succeed())

		By("minting a token through the load balancer and using it through a new connection, every 100 ms, while the API servers roll twice")
		probe := &kit.TokenProbe{Interval: 100 * time.Millisecond, Held: []string{before},
			Mint: func(ctx context.Context) (string, error) {
				token, _, err := mintToken(ctx)
				return token, err
			},
			Use: func(ctx context.Context, token string) error {
				cs, err := oneShotClient(ctx, &token)
				if err != nil {
					return err
				}
				return whoAmI(ctx, cs)
			}}
		var wg sync.WaitGroup
		probeCtx, stopProbe := context.WithCancel(ctx)
		wg.Go(func() { probe.Run(probeCtx) })
		Expect(annotate(ctx, string(v1alpha1.VerbRotateServiceAccountKeyStart))).To(Succeed())
		waitForKeyPhase(ctx, v1alpha1.ServiceAccountKeyPrepared)
		stopProbe()
		wg.Wait()
		Expect(probe.Rejected()).To(BeEmpty(), "no replica rejected a token another minted while the key moved")
		Expect(probe.Used()).To(BeNumerically(">", 50), "tokens were minted and used while the key moved")
		Expect(probe.HeldUsed()).To(BeNumerically(">", 50), "the token from before was used while the key moved")
		during, kidDuring, err := mintToken(ctx)
		Expect(err).NotTo(HaveOccurred())
		Expect(kidDuring).NotTo(Equal(kidBefore), "Prepared: the API servers sign with the new key")
		Expect(whoAmI(ctx, tokenClient(ctx, before))).To(Succeed(), "Prepared: a token of the old key is still accepted")

		if metricsServerRuns() {
			By("restarting metrics-server, whose token the platform mints only when it starts, as `kubectl rollout restart` does")
			restartWorkload(ctx, framework.MetricsServerWorkload)
		}

		By("completing")
		Expect(annotate(ctx, string(v1alpha1.VerbRotateServiceAccountKeyComplete))).To(Succeed())
		waitForKeyPhase(ctx, v1alpha1.ServiceAccountKeyCompleted)
		Expect(apierrors.IsUnauthorized(whoAmI(ctx, tokenClient(ctx, before)))).To(BeTrue(), "Completed: a token of the old key is rejected")
		Expect(whoAmI(ctx, tokenClient(ctx, during))).To(Succeed(), "a token of the new key outlives the rotation")
		if metricsServerRuns() {
			Eventually(func(ctx context.Context) error { return readNodeMetrics(ctx, clientFor(adminKubeconfig(ctx))) }).
				WithContext(ctx).WithTimeout(2*time.Minute).WithPolling(2*time.Second).Should(Succeed(),
				"metrics-server, restarted on a token of the new key, serves through the aggregator")
		}
	})
})

// waitForKeyPhase waits until the service-account key rotation is in phase,
// with no operation pending.
func waitForKeyPhase(ctx context.Context, phase v1alpha1.ServiceAccountKeyRotationPhase) {
	GinkgoHelper()
	Eventually(func(g Gomega) {
		c := cluster(ctx)
		g.Expect(c.Annotations).NotTo(HaveKey(v1alpha1.OperationAnnotation))
		g.Expect(c.ServiceAccountKeyRotationPhase()).To(Equal(phase))
	}).WithContext(ctx).WithTimeout(10 * time.Minute).WithPolling(2 * time.Second).Should(Succeed())
}

// mintToken asks the managed API server, as the kubelet does for a pod, for a
// token of the default service account of the default namespace, and
// returns it with the ID of the key that signed it.
func mintToken(ctx context.Context) (token, keyID string, err error) {
	cs, err := oneShotClient(ctx, nil)
	if err != nil {
		return "", "", err
	}
	tr, err := cs.CoreV1().ServiceAccounts(workloadNamespace).CreateToken(ctx, "default",
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}}, metav1.CreateOptions{})
	if err != nil {
		return "", "", err
	}
	return tr.Status.Token, evidence.TokenKeyID([]byte(tr.Status.Token)), nil
}

// tokenClient is a client of the managed cluster that authenticates with
// token alone.
func tokenClient(ctx context.Context, token string) kubernetes.Interface {
	GinkgoHelper()
	cs, err := oneShotClient(ctx, &token)
	Expect(err).NotTo(HaveOccurred())
	return cs
}

// oneShotClient is a client of the managed cluster on the admin credential
// (or, with token, on that bearer token and no client certificate) whose
// every request opens a new connection: the load balancer in front of the
// API server replicas picks a replica per connection. It asserts nothing: the
// token probe calls it from its own goroutine.
func oneShotClient(ctx context.Context, token *string) (kubernetes.Interface, error) {
	s := &corev1.Secret{}
	if err := tgt.Client.Get(ctx, client.ObjectKey{Namespace: tgt.Namespace, Name: credentials.CertificateSecretName(tgt.Name, credentials.CertAdmin)}, s); err != nil {
		return nil, err
	}
	cfg, err := clientcmd.RESTConfigFromKubeConfig(s.Data[v1alpha1.DataKeyKubeconfig])
	if err != nil {
		return nil, err
	}
	if token != nil {
		cfg = rest.AnonymousClientConfig(cfg)
		cfg.BearerToken = *token
	}
	cfg.Timeout = 5 * time.Second
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
		return promhttp.RoundTripperFunc(func(r *http.Request) (*http.Response, error) {
			r = r.Clone(r.Context())
			r.Close = true
			return rt.RoundTrip(r)
		})
	}
	return kubernetes.NewForConfig(cfg)
}

// restartWorkload restarts one of the platform's workloads in the management
// cluster, as `kubectl rollout restart` does, and waits until it rolled out.
func restartWorkload(ctx context.Context, name string) {
	GinkgoHelper()
	d := &appsv1.Deployment{}
	Expect(tgt.Client.Get(ctx, client.ObjectKey{Namespace: tgt.Namespace, Name: name}, d)).To(Succeed())
	patch := client.MergeFrom(d.DeepCopy())
	if d.Spec.Template.Annotations == nil {
		d.Spec.Template.Annotations = map[string]string{}
	}
	d.Spec.Template.Annotations["kubectl.kubernetes.io/restartedAt"] = time.Now().Format(time.RFC3339)
	Expect(tgt.Client.Patch(ctx, d, patch)).To(Succeed())
	Eventually(func(g Gomega) {
		g.Expect(tgt.Client.Get(ctx, client.ObjectKey{Namespace: tgt.Namespace, Name: name}, d)).To(Succeed())
		g.Expect(d.Status.ObservedGeneration).To(Equal(d.Generation))
	}).WithContext(ctx).WithTimeout(2 * time.Minute).WithPolling(time.Second).Should(Succeed())
}
