package integration

import (
	"context"
	"crypto/x509"
	"slices"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
	"github.com/carousel-dev/carousel/pkg/credentials"
	"github.com/carousel-dev/carousel/pkg/pki"
)

// annotate sets the operation annotation through the API server, and so
// through the admission webhook.
func annotate(ctx context.Context, c *v1alpha1.Cluster, op string) error {
	patch := client.MergeFrom(c.DeepCopy())
	latest := c.DeepCopy()
	if latest.Annotations == nil {
		latest.Annotations = map[string]string{}
	}
	latest.Annotations[v1alpha1.OperationAnnotation] = op
	return k8s.Patch(ctx, latest, patch)
}

// getCluster reads the Cluster as the API server has it now.
func getCluster(ctx context.Context, key client.ObjectKey) *v1alpha1.Cluster {
	GinkgoHelper()
	c := &v1alpha1.Cluster{}
	Expect(k8s.Get(ctx, key, c)).To(Succeed())
	return c
}

// waitForPhase waits until the Cluster reaches phase with its operation
// annotation removed, and returns it.
func waitForPhase(ctx context.Context, key client.ObjectKey, phase v1alpha1.CARotationPhase) *v1alpha1.Cluster {
	GinkgoHelper()
	c := &v1alpha1.Cluster{}
	Eventually(func(g Gomega) {
		g.Expect(k8s.Get(ctx, key, c)).To(Succeed())
		g.Expect(c.CARotationPhase()).To(Equal(phase), "conditions: %v", c.Status.Conditions)
		g.Expect(c.Annotations).NotTo(HaveKey(v1alpha1.OperationAnnotation))
	}).WithTimeout(time.Minute).Should(Succeed())
	return c
}

func waitForReady(ctx context.Context, key client.ObjectKey) *v1alpha1.Cluster {
	GinkgoHelper()
	c := &v1alpha1.Cluster{}
	Eventually(func(g Gomega) {
		g.Expect(k8s.Get(ctx, key, c)).To(Succeed())
		g.Expect(meta.IsStatusConditionTrue(c.Status.Conditions, v1alpha1.ConditionReady)).To(BeTrue(), "conditions: %v", c.Status.Conditions)
		g.Expect(c.Status.ObservedGeneration).To(Equal(c.Generation))
	}).WithTimeout(time.Minute).Should(Succeed())
	return c
}

// loadCAs reads every role's CAs from their Secrets.
func loadCAs(ctx context.Context, c *v1alpha1.Cluster) map[v1alpha1.CARole]*credentials.CAs {
	GinkgoHelper()
	out := map[v1alpha1.CARole]*credentials.CAs{}
	for _, role := range v1alpha1.CARoles() {
		s := &corev1.Secret{}
		Expect(k8s.Get(ctx, client.ObjectKey{Namespace: c.Namespace, Name: credentials.CASecretName(c.Name, role)}, s)).To(Succeed())
		Expect(s.Labels).To(HaveKeyWithValue(v1alpha1.LabelCluster, c.Name))
		Expect(s.Labels).To(HaveKeyWithValue(v1alpha1.LabelCA, string(role)))
		cas, err := credentials.DecodeCASecret(s)
		Expect(err).NotTo(HaveOccurred())
		out[role] = cas
	}
	return out
}

// loadBundle reads a role's trust-bundle ConfigMap.
func loadBundle(ctx context.Context, c *v1alpha1.Cluster, role v1alpha1.CARole) pki.Bundle {
	GinkgoHelper()
	cm := &corev1.ConfigMap{}
	Expect(k8s.Get(ctx, client.ObjectKey{Namespace: c.Namespace, Name: credentials.BundleConfigMapName(c.Name, role)}, cm)).To(Succeed())
	Expect(cm.Labels).To(HaveKeyWithValue(v1alpha1.LabelCABundle, string(role)))
	b, err := pki.ParseBundle([]byte(cm.Data[v1alpha1.DataKeyCABundle]))
	Expect(err).NotTo(HaveOccurred())
	return b
}

// loadCertificate reads a leaf certificate and checks its Secret's labels.
func loadCertificate(ctx context.Context, c *v1alpha1.Cluster, cert credentials.Certificate) (*x509.Certificate, *corev1.Secret) {
	GinkgoHelper()
	s := &corev1.Secret{}
	Expect(k8s.Get(ctx, client.ObjectKey{Namespace: c.Namespace, Name: credentials.CertificateSecretName(c.Name, cert.Name)}, s)).To(Succeed())
	Expect(s.Labels).To(Equal(credentials.CertificateLabels(c.Name, cert)))
	kp, err := pki.ParseKeyPair(s.Data[v1alpha1.DataKeyCertificate], s.Data[v1alpha1.DataKeyPrivateKey])
	Expect(err).NotTo(HaveOccurred())
	return kp.Cert, s
}

// verifiesAgainst reports, for a certificate, whether it verifies against
// the old and the new CA of its role (each alone).
func verifiesAgainst(cert *x509.Certificate, usage x509.ExtKeyUsage, old, current *x509.Certificate) (bool, bool) {
	var okOld bool
	if old != nil {
		okOld = pki.Verify(cert, pki.NewBundle(old), usage, cert.NotBefore.Add(pki.Backdate)) == nil
	}
	okNew := pki.Verify(cert, pki.NewBundle(current), usage, cert.NotBefore.Add(pki.Backdate)) == nil
	return okOld, okNew
}

// anyUsage returns the first usage of a catalogue entry, for verification.
func anyUsage(cert credentials.Certificate) x509.ExtKeyUsage {
	return cert.Usages[0]
}

func fingerprints(b pki.Bundle) []string {
	var out []string
	for _, c := range b {
		out = append(out, pki.Fingerprint(c))
	}
	slices.Sort(out)
	return out
}

// markRolledOut plays the workload controller: it reports every labelled
// Deployment of the Cluster as rolled out at its current generation.
func markRolledOut(ctx context.Context, c *v1alpha1.Cluster) {
	GinkgoHelper()
	var list appsv1.DeploymentList
	Expect(k8s.List(ctx, &list, client.InNamespace(c.Namespace), client.MatchingLabels{v1alpha1.LabelCluster: c.Name})).To(Succeed())
	for i := range list.Items {
		d := &list.Items[i]
		if d.Status.ObservedGeneration == d.Generation {
			continue
		}
		replicas := ptr.Deref(d.Spec.Replicas, 1)
		d.Status.ObservedGeneration = d.Generation
		d.Status.Replicas, d.Status.UpdatedReplicas, d.Status.AvailableReplicas, d.Status.ReadyReplicas = replicas, replicas, replicas, replicas
		Expect(k8s.Status().Update(ctx, d)).To(Succeed())
	}
}
