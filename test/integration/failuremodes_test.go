package integration

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
	clustercontroller "github.com/carousel-dev/carousel/pkg/controller/cluster"
	"github.com/carousel-dev/carousel/pkg/credentials"
	"github.com/carousel-dev/carousel/pkg/pki"
)

// flakyAPIServer is an EvidenceChecker whose API server refuses the new
// client CA while down is true, and behaves as every phase wants otherwise.
type flakyAPIServer struct{ down atomic.Bool }

var errAPIServerDown = errors.New("dial tcp: connection refused")

func (f *flakyAPIServer) ClientAccepted(context.Context, string, []byte, []byte, []byte) error {
	if f.down.Load() {
		return errAPIServerDown
	}
	return nil
}
func (f *flakyAPIServer) ClientRejected(context.Context, string, []byte, []byte, []byte) error {
	return nil
}
func (f *flakyAPIServer) ServesChainTo(context.Context, string, []byte) error { return nil }
func (f *flakyAPIServer) KubeRootCABehind(context.Context, string, []byte, []byte, []byte, []byte) ([]string, error) {
	if f.down.Load() {
		return nil, errAPIServerDown
	}
	return nil, nil
}
func (f *flakyAPIServer) APIServicesBehind(ctx context.Context, endpoint string, serverTrust, certPEM, keyPEM, want []byte) ([]string, error) {
	return f.KubeRootCABehind(ctx, endpoint, serverTrust, certPEM, keyPEM, want)
}
func (f *flakyAPIServer) TokenSecretsBehind(ctx context.Context, endpoint string, serverTrust, certPEM, keyPEM []byte, _ string) ([]string, error) {
	return f.KubeRootCABehind(ctx, endpoint, serverTrust, certPEM, keyPEM, nil)
}

// rejectionRecorder is a flakyAPIServer that keeps the certificates it was
// asked to check are rejected.
type rejectionRecorder struct {
	flakyAPIServer
	probes [][]byte
}

func (f *rejectionRecorder) ClientRejected(_ context.Context, _ string, _, certPEM, _ []byte) error {
	f.probes = append(f.probes, certPEM)
	return nil
}

var _ = Describe("Failure modes", func() {
	var (
		ns       string
		recorder *events.FakeRecorder
		clk      *clocktesting.FakeClock
	)
	BeforeEach(func(ctx SpecContext) {
		ns = newNamespace(ctx)
		recorder = events.NewFakeRecorder(100)
		clk = clocktesting.NewFakeClock(time.Now())
	})
	reconcilerWith := func(checker clustercontroller.EvidenceChecker) *clustercontroller.Reconciler {
		return &clustercontroller.Reconciler{Client: k8s, Clock: clk, Recorder: recorder, Evidence: checker,
			CAExpiryWarning: time.Hour, ManagedPollInterval: 5 * time.Second, MaxManagedPollInterval: 5 * time.Minute}
	}
	reconcileOnce := func(ctx context.Context, r *clustercontroller.Reconciler, key client.ObjectKey) (ctrl.Result, error) {
		return r.Reconcile(ctx, ctrl.Request{NamespacedName: key})
	}
	reconcileUntilPrepared := func(ctx context.Context, r *clustercontroller.Reconciler, key client.ObjectKey) {
		GinkgoHelper()
		handDriven{r: r, key: key, step: clk.Step}.until(ctx, v1alpha1.RotationPrepared)
	}
	readyCondition := func(ctx context.Context, key client.ObjectKey) *metav1.Condition {
		return meta.FindStatusCondition(getCluster(ctx, key).Status.Conditions, v1alpha1.ConditionReady)
	}
	expectWarning := func(reason string) {
		GinkgoHelper()
		Eventually(recorder.Events).Should(Receive(HavePrefix("Warning " + reason)))
	}
	// issued creates a Cluster, with endpoint if not empty, and runs, with a
	// Reconciler that checks the managed cluster through checker, the pass
	// that issues its credentials.
	issued := func(ctx context.Context, name, endpoint string, checker clustercontroller.EvidenceChecker) (*v1alpha1.Cluster, client.ObjectKey, *clustercontroller.Reconciler) {
		GinkgoHelper()
		c := createCluster(ctx, ns, name)
		if endpoint != "" {
			Expect(k8s.Patch(ctx, withEndpoint(c, endpoint), client.MergeFrom(c))).To(Succeed())
		}
		key := client.ObjectKeyFromObject(c)
		r := reconcilerWith(checker)
		_, err := reconcileOnce(ctx, r, key)
		Expect(err).NotTo(HaveOccurred())
		return c, key, r
	}
	// keyRotationAtTheTokenCheck creates a Cluster, name, whose managed API
	// server (apiServer, made down) fails every check, starts a
	// service-account key rotation and reconciles it until the check of the
	// token Secrets failed. It returns the Cluster's key, the Reconciler, and
	// a reader of its ControlPlaneReachable condition.
	keyRotationAtTheTokenCheck := func(ctx context.Context, name string, apiServer *flakyAPIServer) (client.ObjectKey, *clustercontroller.Reconciler, func() *metav1.Condition) {
		GinkgoHelper()
		apiServer.down.Store(true)
		_, key, r := issued(ctx, name, "https://127.0.0.1:6443", apiServer)
		Expect(annotate(ctx, getCluster(ctx, key), string(v1alpha1.VerbRotateServiceAccountKeyStart))).To(Succeed())
		reachable := func() *metav1.Condition {
			return meta.FindStatusCondition(getCluster(ctx, key).Status.Conditions, v1alpha1.ConditionControlPlaneReachable)
		}
		for range 10 { // the operation, the new key, its rollouts, the check of the token Secrets
			_, err := reconcileOnce(ctx, r, key)
			Expect(err).NotTo(HaveOccurred())
			if c := reachable(); c != nil && c.Status == metav1.ConditionFalse {
				break
			}
		}
		Expect(reachable()).To(HaveField("Reason", v1alpha1.ReasonEndpointUnreachable), "the check of the token Secrets failed")
		return key, r, reachable
	}
	// removeEndpointPastTheWebhook clears the Cluster's endpoint: the webhook
	// refuses it with refusal, then, the webhook bypassed, it is written.
	removeEndpointPastTheWebhook := func(ctx context.Context, key client.ObjectKey, refusal string) {
		GinkgoHelper()
		c := getCluster(ctx, key)
		Expect(k8s.Patch(ctx, withEndpoint(c, ""), client.MergeFrom(c))).To(MatchError(ContainSubstring(refusal)), "the webhook refuses it")
		bypassWebhook(ctx, ns)
		Eventually(func() error {
			c := getCluster(ctx, key)
			return k8s.Patch(ctx, withEndpoint(c, ""), client.MergeFrom(c))
		}).Should(Succeed())
	}
	// unlabel takes the carousel.dev/cluster label off the Secret name, as
	// a hand edit does, and returns it as it is then.
	unlabel := func(ctx context.Context, name string) *corev1.Secret {
		GinkgoHelper()
		s := &corev1.Secret{}
		Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, s)).To(Succeed())
		delete(s.Labels, v1alpha1.LabelCluster)
		Expect(k8s.Update(ctx, s)).To(Succeed())
		return s
	}

	It("issues the credentials of a Cluster created with any operation that starts a CA rotation, then rotates", func(ctx SpecContext) {
		var writes atomic.Int64
		startControllers(ns, &writes)
		starts := []string{v1alpha1.OperationStartCARotation, v1alpha1.OperationStartCARotationWithoutWorkersRollout, string(v1alpha1.VerbRotateCredentialsStart)}
		for i, start := range starts {
			c := &v1alpha1.Cluster{
				ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("eager-%d", i),
					Annotations: map[string]string{v1alpha1.OperationAnnotation: start}},
				Spec: v1alpha1.ClusterSpec{KubernetesVersion: "1.36.3"},
			}
			Expect(k8s.Create(ctx, c)).To(Succeed(), "the webhook admits %s on create", start)
		}
		for i, start := range starts {
			c := waitForPhase(ctx, client.ObjectKey{Namespace: ns, Name: fmt.Sprintf("eager-%d", i)}, v1alpha1.RotationPrepared)
			Expect(meta.IsStatusConditionTrue(c.Status.Conditions, v1alpha1.ConditionReady)).To(BeTrue())
			for role, cas := range loadCAs(ctx, c) {
				Expect(cas.Previous).NotTo(BeNil(), "%s: role %s rotated from a CA issued first", start, role)
			}
		}
	})

	It("keeps polling an API server that failed once in Preparing, backing off while it stays down", func(ctx SpecContext) {
		apiServer := &flakyAPIServer{}
		_, key, r := issued(ctx, "flaky", "https://127.0.0.1:6443", apiServer)
		Expect(annotate(ctx, getCluster(ctx, key), v1alpha1.OperationStartCARotation)).To(Succeed())
		_, err := reconcileOnce(ctx, r, key) // records Preparing
		Expect(err).NotTo(HaveOccurred())

		apiServer.down.Store(true)
		result, err := reconcileOnce(ctx, r, key)
		Expect(err).NotTo(HaveOccurred())
		Expect(getCluster(ctx, key).CARotationPhase()).To(Equal(v1alpha1.RotationPreparing))
		Expect(result.RequeueAfter).To(Equal(5*time.Second), "a failed probe is looked at again soon")

		clk.Step(20 * time.Minute)
		result, err = reconcileOnce(ctx, r, key)
		Expect(err).NotTo(HaveOccurred())
		Expect(result.RequeueAfter).To(Equal(5*time.Minute), "an API server down for long is polled less often, never forgotten")

		apiServer.down.Store(false)
		reconcileUntilPrepared(ctx, r, key)
	})

	It("says the API server is reachable again once a check that failed passes, outside a CA rotation", func(ctx SpecContext) {
		apiServer := &flakyAPIServer{}
		key, r, reachable := keyRotationAtTheTokenCheck(ctx, "sa-flaky", apiServer)

		apiServer.down.Store(false)
		_, err := reconcileOnce(ctx, r, key)
		Expect(err).NotTo(HaveOccurred())
		Expect(reachable()).To(And(HaveField("Status", metav1.ConditionTrue), HaveField("Reason", v1alpha1.ReasonEndpointReachable)),
			"nothing else of a service-account key rotation would ever say so")
	})

	It("generates no key on a pass that changes nothing while the trust probe keeps failing", func(ctx SpecContext) {
		apiServer := &flakyAPIServer{}
		apiServer.down.Store(true)
		_, key, r := issued(ctx, "probe", "https://127.0.0.1:6443", apiServer)
		Expect(annotate(ctx, getCluster(ctx, key), v1alpha1.OperationStartCARotation)).To(Succeed())
		for range 3 { // the operation, the new CAs, the first probe
			_, err := reconcileOnce(ctx, r, key)
			Expect(err).NotTo(HaveOccurred())
		}
		before := pki.KeysGenerated()
		for range 3 {
			_, err := reconcileOnce(ctx, r, key)
			Expect(err).NotTo(HaveOccurred())
		}
		Expect(pki.KeysGenerated() - before).To(BeZero())
		Expect(getCluster(ctx, key).CARotationPhase()).To(Equal(v1alpha1.RotationPreparing))
	})

	It("keeps the trust probe through restarts and drops it when Preparing ends", func(ctx SpecContext) {
		apiServer := &flakyAPIServer{}
		apiServer.down.Store(true)
		c, key, _ := issued(ctx, "probe-kept", "https://127.0.0.1:6443", apiServer)
		Expect(annotate(ctx, getCluster(ctx, key), v1alpha1.OperationStartCARotation)).To(Succeed())
		for range 3 { // the operation, the new CAs, the first probe
			_, err := reconcileOnce(ctx, reconcilerWith(apiServer), key)
			Expect(err).NotTo(HaveOccurred())
		}
		probe := client.ObjectKey{Namespace: ns, Name: credentials.CertificateSecretName(c.Name, "trust-probe")}
		Expect(k8s.Get(ctx, probe, &corev1.Secret{})).To(Succeed(), "the probe is kept for the phase")

		before := pki.KeysGenerated()
		clk.Step(45 * time.Minute) // past the half-life of the probe kept in memory before
		for range 3 {
			_, err := reconcileOnce(ctx, reconcilerWith(apiServer), key) // a new reconciler each time: a restarted operator
			Expect(err).NotTo(HaveOccurred())
		}
		Expect(pki.KeysGenerated() - before).To(BeZero())

		apiServer.down.Store(false)
		r := reconcilerWith(apiServer)
		reconcileUntilPrepared(ctx, r, key)
		_, err := reconcileOnce(ctx, r, key)
		Expect(err).NotTo(HaveOccurred())
		Expect(k8s.Get(ctx, probe, &corev1.Secret{})).To(WithTransform(apierrors.IsNotFound, BeTrue()), "the probe is gone once Preparing ended")
	})

	It("probes the dropped client CA's rejection with a certificate that CA signed, not one left from before", func(ctx SpecContext) {
		apiServer := &rejectionRecorder{}
		c, key, r := issued(ctx, "old-probe", "https://127.0.0.1:6443", apiServer)

		// A probe Secret of the Cluster's from a CA long gone, as a
		// rotation whose Completed pass did not get to delete it leaves.
		gone, err := pki.GenerateKey(pki.ECDSAP256)
		Expect(err).NotTo(HaveOccurred())
		goneCA, err := pki.NewCA(pki.CATemplate{CommonName: "a client CA long gone", Validity: time.Hour}, gone, time.Now())
		Expect(err).NotTo(HaveOccurred())
		left, err := goneCA.IssueKeyPair(pki.LeafTemplate{CommonName: "carousel:old-client-probe", Usages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
			Validity: time.Hour}, pki.ECDSAP256, time.Now())
		Expect(err).NotTo(HaveOccurred())
		leftKey, err := left.KeyPEM()
		Expect(err).NotTo(HaveOccurred())
		Expect(k8s.Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: credentials.CertificateSecretName(c.Name, "old-client-probe"),
				Labels: map[string]string{v1alpha1.LabelCluster: c.Name, v1alpha1.LabelCertificate: "old-client-probe"}},
			Data: map[string][]byte{v1alpha1.DataKeyCertificate: left.CertPEM(), v1alpha1.DataKeyPrivateKey: leftKey},
		})).To(Succeed())

		Expect(annotate(ctx, getCluster(ctx, key), v1alpha1.OperationStartCARotation)).To(Succeed())
		reconcileUntilPrepared(ctx, r, key)
		oldClientCA := loadCAs(ctx, getCluster(ctx, key))[v1alpha1.CARoleClient].Previous
		Expect(oldClientCA).NotTo(BeNil())
		Expect(annotate(ctx, getCluster(ctx, key), v1alpha1.OperationCompleteCARotation)).To(Succeed())
		handDriven{r: r, key: key, step: clk.Step}.until(ctx, v1alpha1.RotationCompleted)

		Expect(apiServer.probes).NotTo(BeEmpty(), "the dropped client CA's rejection was checked")
		for _, certPEM := range apiServer.probes {
			certs, err := pki.ParseCertificates(certPEM)
			Expect(err).NotTo(HaveOccurred())
			Expect(pki.SignedBy(certs[0], oldClientCA.Cert)).To(BeTrue(), "the probe is from the client CA that was dropped")
			Expect(certs[0].NotAfter).To(BeTemporally("==", oldClientCA.Cert.NotAfter),
				"the probe is valid as long as that CA: expired, its refusal would prove nothing")
		}
	})

	It("holds a rotation whose endpoint was removed past the webhook instead of skipping its checks", func(ctx SpecContext) {
		apiServer := &flakyAPIServer{}
		apiServer.down.Store(true) // Preparing holds until the endpoint is gone
		_, key, r := issued(ctx, "unchecked", "https://127.0.0.1:6443", apiServer)
		Expect(annotate(ctx, getCluster(ctx, key), v1alpha1.OperationStartCARotation)).To(Succeed())
		for range 3 { // the operation, the new CAs and the endpoint the checks run against, the first probe
			_, err := reconcileOnce(ctx, r, key)
			Expect(err).NotTo(HaveOccurred())
		}
		Expect(getCluster(ctx, key).CARotation().CheckedEndpoint).To(Equal("https://127.0.0.1:6443"))

		removeEndpointPastTheWebhook(ctx, key, "cannot be removed while the CA rotation is in phase Preparing")
		apiServer.down.Store(false) // nothing left that could fail a check: only the missing endpoint holds it

		for range 5 {
			_, err := reconcileOnce(ctx, r, key)
			Expect(err).NotTo(HaveOccurred())
		}
		c := getCluster(ctx, key)
		Expect(c.CARotationPhase()).To(Equal(v1alpha1.RotationPreparing), "no phase is reached unchecked")
		Expect(meta.FindStatusCondition(c.Status.Conditions, v1alpha1.ConditionControlPlaneReachable)).To(And(
			HaveField("Status", metav1.ConditionFalse), HaveField("Reason", v1alpha1.ReasonEndpointRemoved),
			HaveField("Message", ContainSubstring("it was https://127.0.0.1:6443"))))

		Expect(k8s.Patch(ctx, withEndpoint(c, "https://127.0.0.1:6443"), client.MergeFrom(c))).To(Succeed())
		reconcileUntilPrepared(ctx, r, key)
	})

	It("holds a service-account key rotation whose endpoint was removed past the webhook instead of skipping the check of its token Secrets", func(ctx SpecContext) {
		apiServer := &flakyAPIServer{} // down: the check of the token Secrets fails until the endpoint is gone
		key, r, reachable := keyRotationAtTheTokenCheck(ctx, "sa-unchecked", apiServer)
		Expect(getCluster(ctx, key).ServiceAccountKeyRotation().CheckedEndpoint).To(Equal("https://127.0.0.1:6443"))

		removeEndpointPastTheWebhook(ctx, key, "cannot be removed while the service-account key rotation is in phase Preparing")
		apiServer.down.Store(false) // nothing left that could fail the check: only the missing endpoint holds it

		for range 5 {
			_, err := reconcileOnce(ctx, r, key)
			Expect(err).NotTo(HaveOccurred())
			clk.Step(time.Hour) // past spec.serviceAccountKeyRotation.workloadTokenRefresh, were the check skipped
		}
		c := getCluster(ctx, key)
		Expect(c.ServiceAccountKeyRotationPhase()).To(Equal(v1alpha1.ServiceAccountKeyPreparing), "Prepared is not reached unchecked")
		Expect(c.ServiceAccountKeyRotation().NewKeySigningTime).To(BeNil())
		Expect(reachable()).To(And(HaveField("Status", metav1.ConditionFalse), HaveField("Reason", v1alpha1.ReasonEndpointRemoved),
			HaveField("Message", ContainSubstring("service-account key rotation")), HaveField("Message", ContainSubstring("it was https://127.0.0.1:6443"))))

		Expect(k8s.Patch(ctx, withEndpoint(c, "https://127.0.0.1:6443"), client.MergeFrom(c))).To(Succeed())
		_, err := reconcileOnce(ctx, r, key)
		Expect(err).NotTo(HaveOccurred())
		Expect(getCluster(ctx, key).ServiceAccountKeyRotation().NewKeySigningTime).NotTo(BeNil(), "the check ran and passed")
	})

	It("stops, without generating keys, when a CA Secret loses its labels", func(ctx SpecContext) {
		c, key, r := issued(ctx, "unlabelled", "", nil)
		s := unlabel(ctx, credentials.CASecretName(c.Name, v1alpha1.CARoleKubelet))

		before := pki.KeysGenerated()
		for range 3 {
			_, err := reconcileOnce(ctx, r, key)
			Expect(err).To(MatchError(ContainSubstring("lacks Carousel's labels")))
		}
		Expect(pki.KeysGenerated() - before).To(BeZero())
		Expect(readyCondition(ctx, key)).To(And(HaveField("Status", metav1.ConditionFalse), HaveField("Reason", v1alpha1.ReasonCASecretUnlabelled),
			HaveField("Message", ContainSubstring("kubectl label secret -n "+ns+" unlabelled-ca-kubelet carousel.dev/ca=kubelet carousel.dev/cluster=unlabelled"))))
		expectWarning(v1alpha1.EventCASecretUnlabelled)

		s.Labels[v1alpha1.LabelCluster] = c.Name
		Expect(k8s.Update(ctx, s)).To(Succeed())
		_, err := reconcileOnce(ctx, r, key)
		Expect(err).NotTo(HaveOccurred())
		Expect(readyCondition(ctx, key)).To(HaveField("Status", metav1.ConditionTrue))
	})

	It("stops, saying what to do, on an object it writes that lost its label or is someone else's", func(ctx SpecContext) {
		c, key, r := issued(ctx, "taken", "", nil)
		operatorCert := unlabel(ctx, credentials.CertificateSecretName(c.Name, credentials.CertOperator))
		for range 2 {
			_, err := reconcileOnce(ctx, r, key)
			Expect(err).To(MatchError(ContainSubstring("kubectl label --overwrite secret -n " + ns + " " + operatorCert.Name + " carousel.dev/cluster=taken")))
		}
		Expect(readyCondition(ctx, key)).To(And(HaveField("Status", metav1.ConditionFalse), HaveField("Reason", v1alpha1.ReasonObjectUnlabelled)))
		expectWarning(v1alpha1.ReasonObjectUnlabelled)
		for len(recorder.Events) > 0 {
			Expect(<-recorder.Events).NotTo(HavePrefix("Warning "+v1alpha1.ReasonObjectUnlabelled), "announced once")
		}
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(operatorCert), operatorCert)).To(Succeed())
		Expect(operatorCert.Labels).NotTo(HaveKey(v1alpha1.LabelCluster), "the object is left as it is")

		// Someone else's ConfigMap under the name of one of the Cluster's.
		Expect(k8s.Delete(ctx, operatorCert)).To(Succeed())
		bundle := &corev1.ConfigMap{}
		Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: credentials.BundleConfigMapName(c.Name, v1alpha1.CARoleEtcd)}, bundle)).To(Succeed())
		Expect(k8s.Delete(ctx, bundle)).To(Succeed())
		theirs := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: bundle.Name}, Data: map[string]string{"theirs": "yes"}}
		Expect(k8s.Create(ctx, theirs)).To(Succeed())
		_, err := reconcileOnce(ctx, r, key)
		Expect(err).To(MatchError(ContainSubstring("configmap " + bundle.Name + " is in the way")))
		Expect(readyCondition(ctx, key)).To(And(HaveField("Status", metav1.ConditionFalse), HaveField("Reason", v1alpha1.ReasonNameTaken)))
		expectWarning(v1alpha1.ReasonNameTaken)
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(theirs), theirs)).To(Succeed())
		Expect(theirs.Data).To(Equal(map[string]string{"theirs": "yes"}), "the object is left as it is")

		Expect(k8s.Delete(ctx, theirs)).To(Succeed())
		_, err = reconcileOnce(ctx, r, key)
		Expect(err).NotTo(HaveOccurred())
		Expect(readyCondition(ctx, key)).To(HaveField("Status", metav1.ConditionTrue))
	})

	It("does not replace a CA deleted outside a rotation until reissue-ca is asked for", func(ctx SpecContext) {
		c, key, r := issued(ctx, "lost", "", nil)
		etcd := client.ObjectKey{Namespace: ns, Name: credentials.CASecretName(c.Name, v1alpha1.CARoleEtcd)}
		lost := &corev1.Secret{}
		Expect(k8s.Get(ctx, etcd, lost)).To(Succeed())
		Expect(k8s.Delete(ctx, lost)).To(Succeed())

		before := pki.KeysGenerated()
		_, err := reconcileOnce(ctx, r, key)
		Expect(err).To(MatchError(ContainSubstring("secret lost-ca-etcd holding the etcd CA is missing")))
		Expect(pki.KeysGenerated() - before).To(BeZero())
		Expect(k8s.Get(ctx, etcd, &corev1.Secret{})).NotTo(Succeed(), "no replacement CA was minted")
		Expect(readyCondition(ctx, key)).To(And(HaveField("Reason", v1alpha1.ReasonCALost),
			HaveField("Message", ContainSubstring("carousel.dev/operation=reissue-ca=etcd"))))
		expectWarning(v1alpha1.EventCALost)

		Expect(annotate(ctx, getCluster(ctx, key), "reissue-ca=etcd")).To(Succeed())
		_, err = reconcileOnce(ctx, r, key) // records the operation
		Expect(err).NotTo(HaveOccurred())
		expectWarning(v1alpha1.EventCAReissueAccepted)
		_, err = reconcileOnce(ctx, r, key)
		Expect(err).NotTo(HaveOccurred())
		reissued := &corev1.Secret{}
		Expect(k8s.Get(ctx, etcd, reissued)).To(Succeed())
		Expect(reissued.Data[v1alpha1.DataKeyCertificate]).NotTo(Equal(lost.Data[v1alpha1.DataKeyCertificate]))
		Expect(readyCondition(ctx, key)).To(HaveField("Status", metav1.ConditionTrue))
	})

	It("neither replaces a lost service-account key nor loops on an unlabelled one until reissue-service-account-key", func(ctx SpecContext) {
		c, key, r := issued(ctx, "sakey", "", nil)
		saKey := client.ObjectKey{Namespace: ns, Name: credentials.ServiceAccountKeySecretName(c.Name)}
		original := &corev1.Secret{}
		Expect(k8s.Get(ctx, saKey, original)).To(Succeed())

		unlabelled := original.DeepCopy()
		delete(unlabelled.Labels, v1alpha1.LabelCluster)
		Expect(k8s.Update(ctx, unlabelled)).To(Succeed())
		before := pki.KeysGenerated()
		for range 3 {
			_, err := reconcileOnce(ctx, r, key)
			Expect(err).To(MatchError(ContainSubstring("holds the service-account key but lacks Carousel's labels")))
		}
		Expect(pki.KeysGenerated()-before).To(BeZero(), "no key is generated while the Secret is only unlabelled")
		expectWarning(v1alpha1.ReasonServiceAccountKeyUnlabelled)

		Expect(k8s.Delete(ctx, unlabelled)).To(Succeed())
		_, err := reconcileOnce(ctx, r, key)
		Expect(err).To(MatchError(ContainSubstring("holding the service-account key is missing")))
		Expect(pki.KeysGenerated() - before).To(BeZero())
		Expect(k8s.Get(ctx, saKey, &corev1.Secret{})).NotTo(Succeed(), "no replacement key was written")
		Expect(readyCondition(ctx, key)).To(And(HaveField("Reason", v1alpha1.ReasonServiceAccountKeyLost),
			HaveField("Message", ContainSubstring("carousel.dev/operation=reissue-service-account-key"))))
		expectWarning(v1alpha1.ReasonServiceAccountKeyLost)

		Expect(annotate(ctx, getCluster(ctx, key), v1alpha1.OperationReissueServiceAccountKey)).To(Succeed())
		_, err = reconcileOnce(ctx, r, key) // carries the operation out
		Expect(err).NotTo(HaveOccurred())
		expectWarning(v1alpha1.EventServiceAccountKeyReissued)
		reissued := &corev1.Secret{}
		Expect(k8s.Get(ctx, saKey, reissued)).To(Succeed())
		Expect(reissued.Data[credentials.DataKeyServiceAccountKey]).NotTo(Equal(original.Data[credentials.DataKeyServiceAccountKey]))
		Expect(getCluster(ctx, key).Annotations).NotTo(HaveKey(v1alpha1.OperationAnnotation))
		Eventually(func(g Gomega) {
			_, err := reconcileOnce(ctx, r, key)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(readyCondition(ctx, key)).To(HaveField("Status", metav1.ConditionTrue))
		}).Should(Succeed())
	})
})

// bypassWebhook exempts the namespace from the Cluster webhook until the
// spec ends, as a cluster whose webhook is off or set to failurePolicy
// Ignore would.
func bypassWebhook(ctx context.Context, ns string) {
	GinkgoHelper()
	vwc := &admissionregistrationv1.ValidatingWebhookConfiguration{}
	Expect(k8s.Get(ctx, client.ObjectKey{Name: "validating-webhook-configuration"}, vwc)).To(Succeed())
	original := vwc.DeepCopy()
	for i := range vwc.Webhooks {
		vwc.Webhooks[i].NamespaceSelector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{
			Key: corev1.LabelMetadataName, Operator: metav1.LabelSelectorOpNotIn, Values: []string{ns}}}}
	}
	Expect(k8s.Update(ctx, vwc)).To(Succeed())
	DeferCleanup(func(ctx SpecContext) {
		latest := &admissionregistrationv1.ValidatingWebhookConfiguration{}
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(original), latest)).To(Succeed())
		latest.Webhooks = original.Webhooks
		Expect(k8s.Update(ctx, latest)).To(Succeed())
	})
}

func withEndpoint(c *v1alpha1.Cluster, endpoint string) *v1alpha1.Cluster {
	out := c.DeepCopy()
	out.Spec.ControlPlane.Endpoint = endpoint
	return out
}
