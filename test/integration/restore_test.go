package integration

import (
	"context"
	"regexp"
	"sync/atomic"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
	"github.com/carousel-dev/carousel/pkg/credentials"
	"github.com/carousel-dev/carousel/pkg/pki"
)

var (
	uploadID       = regexp.MustCompile(`as upload ([a-z0-9]{6}),`)
	certificateKey = regexp.MustCompile(`(?m)^([0-9a-f]{64})$`)
)

// uploadCerts runs `certs upload` at clk and returns the upload ID and key.
func uploadCerts(ctx context.Context, clk clock.Clock, c *v1alpha1.Cluster, ttl string) (string, string) {
	GinkgoHelper()
	out, err := kubectlCarouselAt(ctx, clk, "certs", "upload", c.Name, "-n", c.Namespace, "--ttl", ttl)
	Expect(err).NotTo(HaveOccurred())
	id, key := uploadID.FindStringSubmatch(out), certificateKey.FindStringSubmatch(out)
	Expect(id).To(HaveLen(2), out)
	Expect(key).To(HaveLen(2), out)
	return id[1], key[1]
}

func caSecretKey(c *v1alpha1.Cluster, role v1alpha1.CARole) client.ObjectKey {
	return client.ObjectKey{Namespace: c.Namespace, Name: credentials.CASecretName(c.Name, role)}
}

// expectRestored checks that the Secret at key is back as it was lost: type,
// labels, annotations, data and the Cluster as its controller.
func expectRestored(ctx context.Context, key client.ObjectKey, lost *corev1.Secret) {
	GinkgoHelper()
	s := &corev1.Secret{}
	Expect(k8s.Get(ctx, key, s)).To(Succeed())
	Expect(s.UID).NotTo(Equal(lost.UID), "a new Secret")
	Expect(s.Type).To(Equal(lost.Type))
	Expect(s.Labels).To(Equal(lost.Labels))
	Expect(s.Annotations).To(Equal(lost.Annotations))
	Expect(s.Data).To(Equal(lost.Data))
	Expect(metav1.GetControllerOf(s)).To(And(HaveField("Kind", "Cluster"), HaveField("UID", metav1.GetControllerOf(lost).UID)),
		"controlled by the Cluster, as the operator's own Secrets are")
	Expect(metav1.GetControllerOf(s).BlockOwnerDeletion).To(BeNil(), "which needs no right to update the Cluster's finalizers")
}

func readyOf(ctx context.Context, key client.ObjectKey) *metav1.Condition {
	GinkgoHelper()
	return meta.FindStatusCondition(getCluster(ctx, key).Status.Conditions, v1alpha1.ConditionReady)
}

func uploadSecretExists(ctx context.Context, name string) bool {
	GinkgoHelper()
	err := k8s.Get(ctx, client.ObjectKey{Namespace: metav1.NamespaceSystem, Name: name}, &corev1.Secret{})
	if apierrors.IsNotFound(err) {
		return false
	}
	Expect(err).NotTo(HaveOccurred())
	return true
}

// expectUpload checks that both Secrets of an upload exist, or that neither does.
func expectUpload(ctx context.Context, id string, exists bool) {
	GinkgoHelper()
	for _, name := range []string{"bootstrap-token-" + id, "carousel-certs-" + id} {
		Expect(uploadSecretExists(ctx, name)).To(Equal(exists), "upload Secret %s", name)
	}
}

var _ = Describe("kubectl carousel certs restore", func() {
	var realClock clock.Clock = clock.RealClock{}

	It("brings back a CA Secret deleted outside a rotation exactly as uploaded, and the Cluster is Ready again without a new key", func(ctx SpecContext) {
		ns := newNamespace(ctx)
		var writes atomic.Int64
		startControllers(ns, &writes)
		c := createCluster(ctx, ns, "restored")
		key := client.ObjectKeyFromObject(c)
		c = waitForReady(ctx, key)
		id, certKey := uploadCerts(ctx, realClock, c, "1h")

		lost := &corev1.Secret{}
		Expect(k8s.Get(ctx, caSecretKey(c, v1alpha1.CARoleEtcd), lost)).To(Succeed())
		before := pki.KeysGenerated()
		Expect(k8s.Delete(ctx, lost)).To(Succeed())
		Eventually(func() *metav1.Condition { return readyOf(ctx, key) }).WithTimeout(time.Minute).Should(And(
			HaveField("Status", metav1.ConditionFalse), HaveField("Reason", v1alpha1.ReasonCALost),
			HaveField("Message", ContainSubstring("Restore it (kubectl carousel certs restore)"))))

		out, err := kubectlCarouselAt(ctx, realClock, "certs", "restore", c.Name, "-n", ns, "--upload-id", id, "--certificate-key", certKey)
		Expect(err).NotTo(HaveOccurred())
		Expect(out).To(ContainSubstring("restored secret " + ns + "/restored-ca-etcd (etcd CA "))
		Expect(out).To(ContainSubstring("kept secret " + ns + "/restored-ca-cluster: it exists, with the uploaded data"))
		Expect(out).To(ContainSubstring("kept secret " + ns + "/restored-service-account-key: it exists, with the uploaded data"))
		Expect(out).To(ContainSubstring("Restored 1 of 8 Secrets of " + ns + "/restored from upload " + id))
		expectRestored(ctx, caSecretKey(c, v1alpha1.CARoleEtcd), lost)

		after := waitForReady(ctx, key)
		Expect(pki.KeysGenerated()-before).To(BeZero(), "no key, CA or other, was generated")
		Expect(after.Status.Credentials.CertificateAuthorities).To(Equal(c.Status.Credentials.CertificateAuthorities), "the same CAs")
	})

	It("brings back a CA Secret lost in the middle of a rotation, which then proceeds without a second new CA", func(ctx SpecContext) {
		ns := newNamespace(ctx)
		var writes atomic.Int64
		startControllers(ns, &writes)
		c := createCluster(ctx, ns, "midway", v1alpha1.WorkerPool{Name: "manual", RolloutStrategy: v1alpha1.RolloutManual})
		key := client.ObjectKeyFromObject(c)
		waitForReady(ctx, key)
		Expect(annotate(ctx, getCluster(ctx, key), v1alpha1.OperationStartCARotation)).To(Succeed())
		Eventually(func(g Gomega) {
			c = getCluster(ctx, key)
			g.Expect(c.CARotationPhase()).To(Equal(v1alpha1.RotationPreparing))
			g.Expect(meta.FindStatusCondition(c.Status.Conditions, v1alpha1.ConditionCARotation)).To(HaveField("Reason", string(v1alpha1.ReasonWaitingForWorkers)))
			g.Expect(meta.IsStatusConditionTrue(c.Status.Conditions, v1alpha1.ConditionReady)).To(BeTrue())
		}).WithTimeout(time.Minute).Should(Succeed(), "the rotation waits for the manual pool, with both CAs of every role")
		cas := loadCAs(ctx, c)
		id, certKey := uploadCerts(ctx, realClock, c, "1h")

		lost := &corev1.Secret{}
		Expect(k8s.Get(ctx, caSecretKey(c, v1alpha1.CARoleClient), lost)).To(Succeed())
		Expect(lost.Annotations).To(HaveKey(v1alpha1.AnnotationRotation))
		Expect(lost.Data).To(HaveKey(credentials.DataKeyPreviousPrivateKey))
		before := pki.KeysGenerated()
		Expect(k8s.Delete(ctx, lost)).To(Succeed())
		Eventually(func() *metav1.Condition { return readyOf(ctx, key) }).WithTimeout(time.Minute).Should(And(
			HaveField("Status", metav1.ConditionFalse), HaveField("Reason", v1alpha1.ReasonCALost),
			HaveField("Message", ContainSubstring("during a CA rotation (phase Preparing)"))))

		out, err := kubectlCarouselAt(ctx, realClock, "certs", "restore", c.Name, "-n", ns, "--upload-id", id, "--certificate-key", certKey, "--role", "client")
		Expect(err).NotTo(HaveOccurred())
		Expect(out).To(ContainSubstring("restored secret " + ns + "/midway-ca-client (client CA " + pki.Fingerprint(cas[v1alpha1.CARoleClient].Current.Cert)[:16] +
			", previous " + pki.Fingerprint(cas[v1alpha1.CARoleClient].Previous.Cert)[:16] + ")"))
		Expect(out).To(ContainSubstring("Restored 1 of 1 Secrets"), "--role client restores nothing else")
		expectRestored(ctx, caSecretKey(c, v1alpha1.CARoleClient), lost)
		waitForReady(ctx, key)
		Expect(pki.KeysGenerated()-before).To(BeZero(), "no key, CA or other, was generated")
		Expect(getCluster(ctx, key).CARotationPhase()).To(Equal(v1alpha1.RotationPreparing))

		Expect(annotate(ctx, getCluster(ctx, key), "rollout-workers=manual")).To(Succeed())
		c = waitForPhase(ctx, key, v1alpha1.RotationPrepared)
		for role, now := range loadCAs(ctx, c) {
			Expect(now.Current.Cert.Equal(cas[role].Current.Cert)).To(BeTrue(), "role %s keeps the rotation's new CA", role)
			Expect(now.Previous.Cert.Equal(cas[role].Previous.Cert)).To(BeTrue(), "role %s keeps the old CA", role)
		}
	})

	It("never overwrites an existing Secret, and refuses unknown roles, wrong keys and other Clusters' uploads", func(ctx SpecContext) {
		ns := newNamespace(ctx)
		c := createCluster(ctx, ns, "kept")
		issueCredentialsOnce(ctx, c) // and no controller: nothing but restore writes the Secrets
		other := createCluster(ctx, ns, "other")
		issueCredentialsOnce(ctx, other)
		id, certKey := uploadCerts(ctx, realClock, c, "1h")
		otherID, otherKey := uploadCerts(ctx, realClock, other, "1h")
		restore := func(args ...string) (string, error) {
			return kubectlCarouselAt(ctx, realClock, append([]string{"certs", "restore", "kept", "-n", ns}, args...)...)
		}

		changed := &corev1.Secret{}
		Expect(k8s.Get(ctx, caSecretKey(c, v1alpha1.CARoleClient), changed)).To(Succeed())
		changed.Data["note"] = []byte("changed after the upload")
		Expect(k8s.Update(ctx, changed)).To(Succeed())
		lost := map[v1alpha1.CARole]*corev1.Secret{}
		for _, role := range []v1alpha1.CARole{v1alpha1.CARoleEtcd, v1alpha1.CARoleKubelet} {
			lost[role] = &corev1.Secret{}
			Expect(k8s.Get(ctx, caSecretKey(c, role), lost[role])).To(Succeed())
			Expect(k8s.Delete(ctx, lost[role])).To(Succeed())
		}

		_, err := restore("--upload-id", id, "--certificate-key", certKey, "--role", "etcd,sa")
		Expect(err).To(MatchError(ContainSubstring(`unknown role "sa" in --role: the CA roles are cluster, client, kubelet, etcd`)))
		_, err = restore("--upload-id", id, "--certificate-key", otherKey)
		Expect(err).To(MatchError(ContainSubstring("the certificate key does not open this upload")))
		_, err = restore("--upload-id", otherID, "--certificate-key", otherKey)
		Expect(err).To(MatchError(ContainSubstring("the certificate key does not open this upload (wrong key, or another cluster's copy)")))
		Expect(k8s.Get(ctx, caSecretKey(c, v1alpha1.CARoleEtcd), &corev1.Secret{})).NotTo(Succeed(), "a refused restore writes nothing")

		out, err := restore("--upload-id", id, "--certificate-key", certKey, "--role", "etcd")
		Expect(err).NotTo(HaveOccurred())
		Expect(out).To(ContainSubstring("restored secret " + ns + "/kept-ca-etcd"))
		Expect(out).To(ContainSubstring("Restored 1 of 1 Secrets"))
		expectRestored(ctx, caSecretKey(c, v1alpha1.CARoleEtcd), lost[v1alpha1.CARoleEtcd])
		Expect(k8s.Get(ctx, caSecretKey(c, v1alpha1.CARoleKubelet), &corev1.Secret{})).NotTo(Succeed(), "--role etcd restores only etcd")

		out, err = restore("--upload-id", id, "--certificate-key", certKey)
		Expect(err).NotTo(HaveOccurred())
		Expect(out).To(ContainSubstring("restored secret " + ns + "/kept-ca-kubelet"))
		Expect(out).To(ContainSubstring("kept secret " + ns + "/kept-ca-etcd: it exists, with the uploaded data"))
		Expect(out).To(ContainSubstring("kept secret " + ns + "/kept-ca-client: it exists and its data differs from the upload"))
		Expect(out).To(ContainSubstring("Restored 1 of 8 Secrets"))
		expectRestored(ctx, caSecretKey(c, v1alpha1.CARoleKubelet), lost[v1alpha1.CARoleKubelet])
		out, err = restore("--upload-id", id, "--certificate-key", certKey, "--role", "client")
		Expect(err).To(MatchError(ContainSubstring("not restored: kept-ca-client of "+ns+"/kept exist already")), "the role asked for was not restored")
		Expect(out).To(ContainSubstring("Restored 0 of 1 Secrets"))
		untouched := &corev1.Secret{}
		Expect(k8s.Get(ctx, caSecretKey(c, v1alpha1.CARoleClient), untouched)).To(Succeed())
		Expect(untouched.ResourceVersion).To(Equal(changed.ResourceVersion), "the changed Secret was not written")
		Expect(untouched.Data).To(HaveKeyWithValue("note", []byte("changed after the upload")))
	})

	It("refuses an expired upload, and the next upload, download or restore deletes expired and orphaned uploads but never a live one", func(ctx SpecContext) {
		ns := newNamespace(ctx)
		c := createCluster(ctx, ns, "swept")
		issueCredentialsOnce(ctx, c)
		clk := clocktesting.NewFakeClock(time.Now())
		run := func(args ...string) (string, error) { return kubectlCarouselAt(ctx, clk, args...) }
		idA, keyA := uploadCerts(ctx, clk, c, "1h")
		idB, keyB := uploadCerts(ctx, clk, c, "3h")
		idC, _ := uploadCerts(ctx, clk, c, "5h")

		clk.Step(2 * time.Hour) // A has expired
		_, err := run("certs", "restore", "swept", "-n", ns, "--upload-id", idA, "--certificate-key", keyA)
		Expect(err).To(MatchError(ContainSubstring("upload " + idA + " expired at")))
		_, err = run("certs", "download", "swept", "-n", ns, "--upload-id", idB, "--certificate-key", keyB, "--dir", GinkgoT().TempDir())
		Expect(err).NotTo(HaveOccurred())
		expectUpload(ctx, idA, false)
		expectUpload(ctx, idB, true)
		expectUpload(ctx, idC, true)
		_, err = run("certs", "restore", "swept", "-n", ns, "--upload-id", idA, "--certificate-key", keyA)
		Expect(err).To(MatchError(ContainSubstring("upload " + idA + " does not exist or has expired")))

		// A copy whose token is gone (deleted without the garbage collector).
		orphan := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceSystem, Name: "carousel-certs-orphan",
			Labels:          map[string]string{v1alpha1.LabelCertsUpload: string(c.UID)},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Secret", Name: "bootstrap-token-orphan", UID: "deleted-token"}}},
			Data: map[string][]byte{"certificates": []byte("sealed")}}
		Expect(k8s.Create(ctx, orphan)).To(Succeed())
		out, err := run("certs", "restore", "swept", "-n", ns, "--upload-id", idB, "--certificate-key", keyB)
		Expect(err).NotTo(HaveOccurred())
		Expect(out).To(ContainSubstring("Restored 0 of 8 Secrets"))
		Expect(uploadSecretExists(ctx, orphan.Name)).To(BeFalse(), "the orphaned copy is deleted")
		expectUpload(ctx, idB, true)
		expectUpload(ctx, idC, true)

		clk.Step(2 * time.Hour) // B has expired, C has not
		idD, _ := uploadCerts(ctx, clk, c, "1h")
		expectUpload(ctx, idB, false)
		expectUpload(ctx, idC, true)
		expectUpload(ctx, idD, true)
	})
})
