package integration

import (
	"context"
	"crypto"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
	"github.com/carousel-dev/carousel/pkg/credentials"
	"github.com/carousel-dev/carousel/test/framework"
)

var _ = Describe("Service-account signing key rotation on a real API server", Ordered, func() {
	const serviceAccount = "rotation-probe"
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
		cp := &framework.ManagedControlPlane{BinDir: os.Getenv("KUBEBUILDER_ASSETS"), Dir: GinkgoT().TempDir(), APIServerPort: port}
		c = &v1alpha1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "sa-key"},
			Spec: v1alpha1.ClusterSpec{KubernetesVersion: "1.36.3", ControlPlane: v1alpha1.ControlPlaneSpec{Endpoint: cp.Endpoint()}}}
		Expect(k8s.Create(ctx, c)).To(Succeed())
		key = client.ObjectKeyFromObject(c)
		c = waitForReady(ctx, key)
		cfg := runControlPlane(ctx, c, cp)
		admin = kubernetes.NewForConfigOrDie(cfg)
		anon = rest.AnonymousClientConfig(cfg)
		_, err = admin.CoreV1().ServiceAccounts(metav1.NamespaceDefault).Create(ctx,
			&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: serviceAccount}}, metav1.CreateOptions{})
		Expect(err).NotTo(HaveOccurred())
	})

	// issue mints a token for the probe's service account, as the kubelet
	// does for a pod (TokenRequest), and returns it with the key ID of the
	// key that signed it.
	issue := func(ctx context.Context) (token, kid string, err error) {
		tr, err := admin.CoreV1().ServiceAccounts(metav1.NamespaceDefault).CreateToken(ctx, serviceAccount,
			&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}}, metav1.CreateOptions{})
		if err != nil {
			return "", "", err
		}
		return tr.Status.Token, keyIDOfToken(tr.Status.Token), nil
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

		By("minting and using tokens all through Preparing, as pods do while the API server rolls twice")
		var (
			rejected []string
			used     atomic.Int64
			mu       sync.Mutex
			wg       sync.WaitGroup
		)
		probeCtx, stopProbe := context.WithCancel(ctx)
		wg.Go(func() {
			for probeCtx.Err() == nil {
				token, kid, err := issue(probeCtx)
				if err == nil {
					_, err = use(probeCtx, token)
				}
				switch {
				case apierrors.IsUnauthorized(err):
					mu.Lock()
					rejected = append(rejected, kid+": "+err.Error())
					mu.Unlock()
				case err == nil:
					used.Add(1)
				} // anything else: the API server restarting
				select {
				case <-probeCtx.Done():
				case <-time.After(100 * time.Millisecond):
				}
			}
		})
		Expect(annotate(ctx, getCluster(ctx, key), string(v1alpha1.VerbRotateServiceAccountKeyStart))).To(Succeed())
		Eventually(func(g Gomega) {
			got := getCluster(ctx, key)
			g.Expect(got.ServiceAccountKeyRotationPhase()).To(Equal(v1alpha1.ServiceAccountKeyPrepared))
			g.Expect(got.Status.Conditions).To(ContainElement(And(HaveField("Type", v1alpha1.ConditionServiceAccountKeyRotation),
				HaveField("Reason", string(v1alpha1.ReasonWaitingForCompletion)))))
		}).WithContext(ctx).WithTimeout(3*time.Minute).WithPolling(time.Second).Should(Succeed(), "Preparing rolls the API server twice")
		stopProbe()
		wg.Wait()
		Expect(rejected).To(BeEmpty(), "no token was rejected while the key moved")
		Expect(used.Load()).To(BeNumerically(">", 10), "tokens were used during Preparing")
		Expect(getCluster(ctx, key).CARotationPhase()).To(BeEmpty(), "the CA rotation is not started by the key rotation")

		newKey, verifying := signingKeyIDs(ctx)
		Expect(newKey).NotTo(Equal(oldKey))
		Expect(verifying).To(ConsistOf(oldKey, newKey))
		during, kid, err := issue(ctx)
		Expect(err).NotTo(HaveOccurred())
		Expect(kid).To(Equal(newKey), "Prepared: the API server signs with the new key")
		Expect(use(ctx, during)).To(Equal(probeUser))
		Expect(use(ctx, before)).To(Equal(probeUser), "Prepared: a token of the old key is still accepted")

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
		signing, verifying := signingKeyIDs(ctx)
		Expect(signing).To(Equal(newKey))
		Expect(verifying).To(ConsistOf(newKey))
		_, err = use(ctx, before)
		Expect(apierrors.IsUnauthorized(err)).To(BeTrue(), "Completed: a token of the old key is rejected, got %v", err)
		Expect(use(ctx, during)).To(Equal(probeUser), "a token issued in Prepared outlives the rotation")
		after, kid, err := issue(ctx)
		Expect(err).NotTo(HaveOccurred())
		Expect(kid).To(Equal(newKey))
		Expect(use(ctx, after)).To(Equal(probeUser))
		rot := getCluster(ctx, key).ServiceAccountKeyRotation()
		Expect(rot.LastInitiationTime).NotTo(BeNil())
		Expect(rot.LastInitiationFinishedTime).NotTo(BeNil())
		Expect(rot.LastCompletionTriggeredTime).NotTo(BeNil())
		Expect(rot.LastCompletionTime).NotTo(BeNil())
	})
})

// keyIDOfToken is the kid in a JWT's header; empty when there is none.
func keyIDOfToken(token string) string {
	header, _, _ := strings.Cut(token, ".")
	raw, err := base64.RawURLEncoding.DecodeString(header)
	if err != nil {
		return ""
	}
	var h struct {
		KeyID string `json:"kid"`
	}
	_ = json.Unmarshal(raw, &h)
	return h.KeyID
}

// keyID is the key ID the API server gives the tokens a public key verifies:
// the unpadded base64url of the SHA-256 of its PKIX form.
func keyID(pub crypto.PublicKey) string {
	der, err := x509.MarshalPKIXPublicKey(pub)
	Expect(err).NotTo(HaveOccurred())
	sum := sha256.Sum256(der)
	return base64.RawURLEncoding.EncodeToString(sum[:])
}
