package integration

import (
	"crypto/x509"
	"sync/atomic"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
	"github.com/carousel-dev/carousel/pkg/credentials"
	"github.com/carousel-dev/carousel/pkg/evidence"
	"github.com/carousel-dev/carousel/pkg/pki"
)

// foreignClient returns a client key pair from a CA the API server does not trust.
func foreignClient() (certPEM, keyPEM, caPEM []byte) {
	GinkgoHelper()
	key, err := pki.GenerateKey(pki.ECDSAP256)
	Expect(err).NotTo(HaveOccurred())
	ca, err := pki.NewCA(pki.CATemplate{CommonName: "foreign", Validity: time.Hour}, key, time.Now())
	Expect(err).NotTo(HaveOccurred())
	leaf, err := ca.IssueKeyPair(pki.LeafTemplate{CommonName: "stranger", Usages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, Validity: time.Hour},
		pki.ECDSAP256, time.Now())
	Expect(err).NotTo(HaveOccurred())
	keyPEM, err = leaf.KeyPEM()
	Expect(err).NotTo(HaveOccurred())
	return leaf.CertPEM(), keyPEM, ca.CertPEM()
}

var _ = Describe("Evidence from a real kube-apiserver", func() {
	checker := evidence.Checker{Timeout: 5 * time.Second}

	It("tells an accepted client certificate from a rejected one, and checks the serving chain", func(ctx SpecContext) {
		user, err := testEnv.AddUser(envtest.User{Name: "carousel:probe"}, nil)
		Expect(err).NotTo(HaveOccurred())
		trusted := user.Config()
		Expect(checker.ClientAccepted(ctx, cfg.Host, cfg.CAData, trusted.CertData, trusted.KeyData)).To(Succeed())
		Expect(checker.ClientRejected(ctx, cfg.Host, cfg.CAData, trusted.CertData, trusted.KeyData)).
			To(MatchError(ContainSubstring(`still accepts the client certificate "carousel:probe"`)))

		certPEM, keyPEM, foreignCA := foreignClient()
		Expect(checker.ClientRejected(ctx, cfg.Host, cfg.CAData, certPEM, keyPEM)).To(Succeed())
		Expect(checker.ClientAccepted(ctx, cfg.Host, cfg.CAData, certPEM, keyPEM)).To(HaveOccurred())

		Expect(checker.ServesChainTo(ctx, cfg.Host, cfg.CAData)).To(Succeed())
		Expect(checker.ServesChainTo(ctx, cfg.Host, foreignCA)).To(MatchError(ContainSubstring("does not verify against the new cluster CA")))
	})

	It("keeps a rotation in Preparing while the API server does not accept the new client CA", func(ctx SpecContext) {
		ns := newNamespace(ctx)
		var writes atomic.Int64
		startControllers(ns, &writes)
		c := &v1alpha1.Cluster{}
		c.Namespace, c.Name = ns, "unproven"
		c.Spec.KubernetesVersion = "1.36.3"
		c.Spec.ControlPlane.Endpoint = cfg.Host // an API server that does not trust Carousel's client CA
		Expect(k8s.Create(ctx, c)).To(Succeed())
		key := client.ObjectKeyFromObject(c)
		c = waitForReady(ctx, key)

		Expect(annotate(ctx, c, v1alpha1.OperationStartCARotation)).To(Succeed())
		Eventually(func(g Gomega) {
			c = getCluster(ctx, key)
			g.Expect(meta.FindStatusCondition(c.Status.Conditions, v1alpha1.ConditionCARotation)).To(HaveField("Reason", "WaitingForClientCertificates"))
			reachable := meta.FindStatusCondition(c.Status.Conditions, v1alpha1.ConditionControlPlaneReachable)
			g.Expect(reachable).NotTo(BeNil())
			g.Expect(reachable.Status).To(Equal(metav1.ConditionFalse))
			g.Expect(reachable.Reason).To(Equal(v1alpha1.ReasonEndpointUnreachable))
		}).Should(Succeed())
		Consistently(func() v1alpha1.CARotationPhase { return getCluster(ctx, key).CARotationPhase() }).
			WithTimeout(2 * time.Second).Should(Equal(v1alpha1.RotationPreparing))
		operator := &corev1.Secret{}
		Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: credentials.CertificateSecretName(c.Name, credentials.CertOperator)}, operator)).To(Succeed())
		certs, err := pki.ParseCertificates(operator.Data[v1alpha1.DataKeyCertificate])
		Expect(err).NotTo(HaveOccurred())
		newClientCA := loadCAs(ctx, c)[v1alpha1.CARoleClient].Current.Cert
		Expect(certs[0].CheckSignatureFrom(newClientCA)).To(HaveOccurred(), "clients stay on the old CA while the API server does not trust the new one")
	})
})
