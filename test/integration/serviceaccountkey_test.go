package integration

import (
	"context"
	"crypto"
	"os"
	"sync"
	"sync/atomic"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
	"github.com/carousel-dev/carousel/pkg/credentials"
	"github.com/carousel-dev/carousel/pkg/evidence"
	"github.com/carousel-dev/carousel/test/framework"
	"github.com/carousel-dev/carousel/test/framework/kit"
)

var _ = Describe("Service-account signing key rotation on a real API server", Ordered, func() {
	const (
		serviceAccount = "rotation-probe"
		tokenSecret    = "rotation-probe-token"
	)
	var (
		writes atomic.Int64
		key    client.ObjectKey
		c      *v1alpha1.Cluster
		admin  *kubernetes.Clientset
		anon   *rest.Config
	)

	BeforeAll(func(ctx SpecContext) {
		ns := newNamespace(ctx)
		startControllers(ns, &writes)
		port, err := framework.FreePort()
		Expect(err).NotTo(HaveOccurred())
		// kube-controller-manager signs the tokens of service-account token
		// Secrets with the key it mounts, and re-issues an emptied one.
		cp := &framework.ManagedControlPlane{BinDir: os.Getenv("KUBEBUILDER_ASSETS"), Dir: GinkgoT().TempDir(), APIServerPort: port, ControllerManager: true}
		c = &v1alpha1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "sa-key"},
			Spec: v1alpha1.ClusterSpec{KubernetesVersion: "1.36.3", ControlPlane: v1alpha1.ControlPlaneSpec{Endpoint: cp.Endpoint()},
				// Long enough to be seen waiting; the spec shortens it.
				ServiceAccountKeyRotation: v1alpha1.ServiceAccountKeyRotationSettings{WorkloadTokenRefresh: &metav1.Duration{Duration: time.Hour}}}}
		Expect(k8s.Create(ctx, c)).To(Succeed())
		key = client.ObjectKeyFromObject(c)
		c = waitForReady(ctx, key)
		cfg := runControlPlane(ctx, c, cp)
		admin = kubernetes.NewForConfigOrDie(cfg)
		anon = rest.AnonymousClientConfig(cfg)
		_, err = admin.CoreV1().ServiceAccounts(metav1.NamespaceDefault).Create(ctx,
			&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: serviceAccount}}, metav1.CreateOptions{})
		Expect(err).NotTo(HaveOccurred())
		_, err = admin.CoreV1().Secrets(metav1.NamespaceDefault).Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: tokenSecret, Annotations: map[string]string{corev1.ServiceAccountNameKey: serviceAccount}},
			Type:       corev1.SecretTypeServiceAccountToken}, metav1.CreateOptions{})
		Expect(err).NotTo(HaveOccurred())
	})

	// storedToken is the token kube-controller-manager keeps in the
	// service-account token Secret, once it has written one.
	storedToken := func(ctx context.Context) string {
		s, err := admin.CoreV1().Secrets(metav1.NamespaceDefault).Get(ctx, tokenSecret, metav1.GetOptions{})
		if err != nil {
			return ""
		}
		return string(s.Data[corev1.ServiceAccountTokenKey])
	}

	// issue mints a token for the probe's service account, as the kubelet
	// does for a pod (TokenRequest), and returns it with the key ID of the
	// key that signed it.
	issue := func(ctx context.Context) (token, kid string, err error) {
		tr, err := admin.CoreV1().ServiceAccounts(metav1.NamespaceDefault).CreateToken(ctx, serviceAccount,
			&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}}, metav1.CreateOptions{})
		if err != nil {
			return "", "", err
		}
		return tr.Status.Token, evidence.TokenKeyID([]byte(tr.Status.Token)), nil
	}
	// use authenticates to the managed API server with a token, as a pod
	// does, and returns the user it was taken for.
	use := func(ctx context.Context, token string) (string, error) {
		cfg := rest.CopyConfig(anon)
		cfg.BearerToken = token
		review, err := kubernetes.NewForConfigOrDie(cfg).AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
		if err != nil {
			return "", err
		}
		return review.Status.UserInfo.Username, nil
	}
	const probeUser = "system:serviceaccount:default:" + serviceAccount
	// keyID is the key ID the API server writes in the tokens pub verifies.
	keyID := func(pub crypto.PublicKey) string {
		GinkgoHelper()
		id, err := credentials.ServiceAccountKeyID(pub)
		Expect(err).NotTo(HaveOccurred())
		return id
	}
	// signingKeyIDs returns the key IDs of the key Secret's signing key and
	// of every key it verifies with.
	signingKeyIDs := func(ctx context.Context) (signing string, verifying []string) {
		GinkgoHelper()
		s := &corev1.Secret{}
		Expect(k8s.Get(ctx, client.ObjectKey{Namespace: c.Namespace, Name: credentials.ServiceAccountKeySecretName(c.Name)}, s)).To(Succeed())
		k, err := credentials.ParseServiceAccountKey(s.Data)
		Expect(err).NotTo(HaveOccurred())
		for _, pub := range k.Verifying {
			verifying = append(verifying, keyID(pub))
		}
		return keyID(k.Signing.Public()), verifying
	}

	It("refuses to complete a rotation that was never started", func(ctx SpecContext) {
		Expect(annotate(ctx, getCluster(ctx, key), string(v1alpha1.VerbRotateServiceAccountKeyComplete))).To(MatchError(ContainSubstring(
			"cannot complete the service-account key rotation in phase none (never rotated), only in phase Prepared: " +
				"start one with carousel.dev/operation=rotate-serviceaccount-key-start")))
	})

	It("moves tokens to a new key in two phases, never rejecting a token while both keys are trusted", func(ctx SpecContext) {
		oldKey, _ := signingKeyIDs(ctx)
		before, kid, err := issue(ctx)
		Expect(err).NotTo(HaveOccurred())
		Expect(kid).To(Equal(oldKey), "the API server signs with the key Carousel issued")
		Expect(use(ctx, before)).To(Equal(probeUser))
		Eventually(storedToken).WithContext(ctx).WithTimeout(time.Minute).ShouldNot(BeEmpty(), "kube-controller-manager fills the token Secret")
		stored := storedToken(ctx)
		Expect(evidence.TokenKeyID([]byte(stored))).To(Equal(oldKey))

		By("minting and using tokens all through Preparing, as pods do while the API server rolls twice")
		probe := &kit.TokenProbe{Interval: 100 * time.Millisecond, Held: []string{before},
			Mint: func(ctx context.Context) (string, error) {
				token, _, err := issue(ctx)
				return token, err
			},
			Use: func(ctx context.Context, token string) error {
				_, err := use(ctx, token)
				return err
			}}
		var wg sync.WaitGroup
		probeCtx, stopProbe := context.WithCancel(ctx)
		wg.Go(func() { probe.Run(probeCtx) })
		Expect(annotate(ctx, getCluster(ctx, key), string(v1alpha1.VerbRotateServiceAccountKeyStart))).To(Succeed())
		var signing time.Time
		Eventually(func(g Gomega) {
			got := getCluster(ctx, key)
			g.Expect(got.ServiceAccountKeyRotationPhase()).To(Equal(v1alpha1.ServiceAccountKeyPreparing))
			g.Expect(got.ServiceAccountKeyRotation().NewKeySigningTime).NotTo(BeNil())
			signing = got.ServiceAccountKeyRotation().NewKeySigningTime.Time
			g.Expect(got.Status.Conditions).To(ContainElement(And(HaveField("Type", v1alpha1.ConditionServiceAccountKeyRotation),
				HaveField("Reason", string(v1alpha1.ReasonWaitingForWorkloadTokenRefresh)),
				HaveField("Message", ContainSubstring("giving pods until "+signing.Add(time.Hour).UTC().Format(time.RFC3339)+" to replace their service-account tokens")))))
		}).WithContext(ctx).WithTimeout(3*time.Minute).WithPolling(time.Second).Should(Succeed(), "Preparing rolls the API server twice, then gives pods an hour")
		stopProbe()
		wg.Wait()
		Expect(probe.Rejected()).To(BeEmpty(), "no token was rejected while the key moved")
		Expect(probe.Used()).To(BeNumerically(">", 10), "tokens were minted and used during Preparing")
		Expect(probe.HeldUsed()).To(BeNumerically(">", 10), "the tokens from before were used during Preparing")
		Expect(getCluster(ctx, key).CARotationPhase()).To(BeEmpty(), "the CA rotation is not started by the key rotation")

		By("giving pods no time at all: Prepared")
		got := getCluster(ctx, key)
		patch := client.MergeFrom(got.DeepCopy())
		got.Spec.ServiceAccountKeyRotation.WorkloadTokenRefresh = &metav1.Duration{}
		Expect(k8s.Patch(ctx, got, patch)).To(Succeed())
		Eventually(func(g Gomega) {
			got := getCluster(ctx, key)
			g.Expect(got.ServiceAccountKeyRotationPhase()).To(Equal(v1alpha1.ServiceAccountKeyPrepared))
			g.Expect(got.Status.Conditions).To(ContainElement(And(HaveField("Type", v1alpha1.ConditionServiceAccountKeyRotation),
				HaveField("Reason", string(v1alpha1.ReasonWaitingForCompletion)))))
		}).WithContext(ctx).WithTimeout(time.Minute).WithPolling(time.Second).Should(Succeed())
		Expect(getCluster(ctx, key).ServiceAccountKeyRotation().NewKeySigningTime.Time).To(Equal(signing), "recorded once")

		newKey, verifying := signingKeyIDs(ctx)
		Expect(newKey).NotTo(Equal(oldKey))
		Expect(verifying).To(ConsistOf(oldKey, newKey))
		during, kid, err := issue(ctx)
		Expect(err).NotTo(HaveOccurred())
		Expect(kid).To(Equal(newKey), "Prepared: the API server signs with the new key")
		Expect(use(ctx, during)).To(Equal(probeUser))
		Expect(use(ctx, before)).To(Equal(probeUser), "Prepared: a token of the old key is still accepted")
		reissued := storedToken(ctx)
		Expect(evidence.TokenKeyID([]byte(reissued))).To(Equal(newKey), "Prepared: the token Secret was re-issued with the new key")
		Expect(use(ctx, reissued)).To(Equal(probeUser))

		By("a no-op pass in Prepared writes nothing")
		idle := writes.Load()
		Expect(annotate(ctx, getCluster(ctx, key), v1alpha1.OperationReconcile)).To(Succeed())
		Eventually(writes.Load).WithTimeout(10*time.Second).Should(Equal(idle+1), "the annotation's removal is written")
		Consistently(writes.Load).WithTimeout(3*time.Second).WithPolling(500*time.Millisecond).Should(Equal(idle+1), "and nothing else")

		By("completing: the old key is dropped")
		Expect(annotate(ctx, getCluster(ctx, key), string(v1alpha1.VerbRotateServiceAccountKeyComplete))).To(Succeed())
		Eventually(func(ctx context.Context) v1alpha1.ServiceAccountKeyRotationPhase {
			return getCluster(ctx, key).ServiceAccountKeyRotationPhase()
		}).WithContext(ctx).WithTimeout(3 * time.Minute).WithPolling(time.Second).Should(Equal(v1alpha1.ServiceAccountKeyCompleted))
		signingKey, verifying := signingKeyIDs(ctx)
		Expect(signingKey).To(Equal(newKey))
		Expect(verifying).To(ConsistOf(newKey))
		_, err = use(ctx, before)
		Expect(apierrors.IsUnauthorized(err)).To(BeTrue(), "Completed: a token of the old key is rejected, got %v", err)
		Expect(use(ctx, during)).To(Equal(probeUser), "a token issued in Prepared outlives the rotation")
		Expect(use(ctx, reissued)).To(Equal(probeUser), "so does the re-issued token of the Secret")
		_, err = use(ctx, stored)
		Expect(apierrors.IsUnauthorized(err)).To(BeTrue(), "the Secret's first token, of the old key, is rejected, got %v", err)
		after, kid, err := issue(ctx)
		Expect(err).NotTo(HaveOccurred())
		Expect(kid).To(Equal(newKey))
		Expect(use(ctx, after)).To(Equal(probeUser))

		By("recording the phases as events and as a Prometheus metric")
		Eventually(func(g Gomega) []string {
			var list eventsv1.EventList
			g.Expect(k8s.List(ctx, &list, client.InNamespace(c.Namespace))).To(Succeed())
			var notes []string
			for _, e := range list.Items {
				if e.Reason == v1alpha1.EventServiceAccountKeyRotationPhaseChanged {
					notes = append(notes, e.Note)
				}
			}
			return notes
		}).WithContext(ctx).WithTimeout(10 * time.Second).Should(ContainElements(
			"service-account key rotation phase none (never rotated) → Preparing", "service-account key rotation phase Preparing → Prepared",
			"service-account key rotation phase Prepared → Finalizing", "service-account key rotation phase Finalizing → Completed"))
		families, err := metrics.Registry.Gather()
		Expect(err).NotTo(HaveOccurred())
		phase := func(p string) map[string]string {
			return map[string]string{"namespace": c.Namespace, "cluster": c.Name, "phase": p}
		}
		Expect(metricValue(families, "carousel_service_account_key_rotation_phase", phase("Completed"))).To(Equal(1.0))
		Expect(metricValue(families, "carousel_service_account_key_rotation_phase", phase("Preparing"))).To(Equal(0.0))

		rot := getCluster(ctx, key).ServiceAccountKeyRotation()
		Expect(rot.LastInitiationTime).NotTo(BeNil())
		Expect(rot.LastInitiationFinishedTime).NotTo(BeNil())
		Expect(rot.LastCompletionTriggeredTime).NotTo(BeNil())
		Expect(rot.LastCompletionTime).NotTo(BeNil())
	})
})
