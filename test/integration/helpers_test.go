package integration

import (
	"context"
	"crypto/x509"
	"encoding/hex"
	"fmt"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
	clustercontroller "github.com/carousel-dev/carousel/pkg/controller/cluster"
	"github.com/carousel-dev/carousel/pkg/credentials"
	"github.com/carousel-dev/carousel/pkg/oldca"
	"github.com/carousel-dev/carousel/pkg/pki"
	"github.com/carousel-dev/carousel/test/framework"
	"github.com/carousel-dev/carousel/test/framework/kit"
)

// The suite's bindings of the shared kit (test/framework/kit) to its client.

func annotate(ctx context.Context, c *v1alpha1.Cluster, op string) error {
	return kit.Annotate(ctx, k8s, c, op)
}

func getCluster(ctx context.Context, key client.ObjectKey) *v1alpha1.Cluster {
	GinkgoHelper()
	return kit.GetCluster(ctx, k8s, key)
}

// updateClusterSpec changes a Cluster's spec and waits until the manager's
// cache has it: controllers that read the Cluster from that cache (the CSR
// controller among them) act on the new spec only from then on. The Cluster
// controller reports what the cache has seen in status.observedGeneration.
func updateClusterSpec(ctx context.Context, key client.ObjectKey, change func(*v1alpha1.ClusterSpec)) {
	GinkgoHelper()
	latest := &v1alpha1.Cluster{}
	Expect(retry.RetryOnConflict(retry.DefaultRetry, func() error {
		latest = getCluster(ctx, key)
		change(&latest.Spec)
		return k8s.Update(ctx, latest)
	})).To(Succeed())
	Eventually(func() int64 { return getCluster(ctx, key).Status.ObservedGeneration }).WithContext(ctx).WithTimeout(2 * time.Minute).
		Should(BeNumerically(">=", latest.Generation))
}

func waitForPhase(ctx context.Context, key client.ObjectKey, phase v1alpha1.CARotationPhase) *v1alpha1.Cluster {
	GinkgoHelper()
	return kit.WaitForPhase(ctx, k8s, key, phase, kit.Quick)
}

func waitForReady(ctx context.Context, key client.ObjectKey) *v1alpha1.Cluster {
	GinkgoHelper()
	return kit.WaitForReady(ctx, k8s, key, kit.Quick)
}

func loadCAs(ctx context.Context, c *v1alpha1.Cluster) map[v1alpha1.CARole]*credentials.CAs {
	GinkgoHelper()
	return kit.LoadCAs(ctx, k8s, c)
}

func loadBundle(ctx context.Context, c *v1alpha1.Cluster, role v1alpha1.CARole) pki.Bundle {
	GinkgoHelper()
	return kit.LoadBundle(ctx, k8s, c, role)
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

// runControlPlane starts cp on the credentials of c, a Cluster Carousel has
// issued, with a platform stand-in that carries out the rollouts Carousel
// asks for until the spec ends; it returns once Carousel has rolled the
// control plane, with an admin configuration for the managed API server.
func runControlPlane(ctx context.Context, c *v1alpha1.Cluster, cp *framework.ManagedControlPlane) *rest.Config {
	GinkgoHelper()
	platform := &framework.Platform{Client: k8s, Cluster: c, ControlPlane: cp, Logf: stderrf}
	Expect(platform.CreateWorkloads(ctx)).To(Succeed())
	Expect(cp.WriteCredentials(ctx, k8s, c)).To(Succeed())
	DeferCleanup(cp.Stop) // before the start, which may fail half-way
	Expect(cp.Start(ctx)).To(Succeed())
	DeferCleanup(platform.Start(100 * time.Millisecond))
	Eventually(platform.Settled).WithContext(ctx).WithTimeout(2*time.Minute).Should(BeTrue(), "Carousel rolls the control plane once it sees it")
	Eventually(cp.EtcdGatewayServes).WithContext(ctx).WithTimeout(30*time.Second).Should(Succeed(),
		"etcd's gateway reaches etcd's gRPC server with the serving certificate Carousel issued as its client certificate")
	cfg, err := framework.RESTConfig(ctx, k8s, c, credentials.CertAdmin)
	Expect(err).NotTo(HaveOccurred())
	return cfg
}

// handDriven runs a Reconciler's passes by hand, for the specs that move a
// fake clock themselves.
type handDriven struct {
	r   *clustercontroller.Reconciler
	key client.ObjectKey
	// step moves the fake clock (or clocks) forward.
	step func(time.Duration)
}

// pass runs one pass and fails the spec on an error.
func (h handDriven) pass(ctx context.Context) ctrl.Result {
	GinkgoHelper()
	result, err := h.r.Reconcile(ctx, ctrl.Request{NamespacedName: h.key})
	Expect(err).NotTo(HaveOccurred())
	return result
}

// until runs passes until the rotation is in phase, moving the clock past
// the time pods get to reload kube-root-ca.crt when that is what Preparing
// waits for.
func (h handDriven) until(ctx context.Context, phase v1alpha1.CARotationPhase) {
	GinkgoHelper()
	Eventually(func(g Gomega) {
		h.pass(ctx)
		got := getCluster(ctx, h.key)
		if cond := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionCARotation); cond != nil &&
			cond.Reason == string(v1alpha1.ReasonWaitingForWorkloadTrust) {
			h.step(got.Spec.CARotation.WorkloadTrustReloadOrDefault())
		}
		g.Expect(got.CARotationPhase()).To(Equal(phase))
	}).Should(Succeed())
}

// recordKubeconfig adds to c's record of issued kubeconfigs what kubectl
// carousel kubeconfig records when it issues user a kubeconfig from the CA
// issuer, valid for an hour, for a Cluster without an endpoint (which the
// plugin issues none for). The oldca spec has the plugin itself write it.
func recordKubeconfig(ctx context.Context, c *v1alpha1.Cluster, user string, issuer *pki.KeyPair) {
	GinkgoHelper()
	now := time.Now().UTC().Truncate(time.Second)
	issued := oldca.IssuedCertificate{User: user, Fingerprint: fmt.Sprintf("%x", now.UnixNano()), Issuer: hex.EncodeToString(issuer.Cert.SubjectKeyId),
		IssuedAt: now, NotAfter: now.Add(time.Hour)}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: c.Namespace, Name: credentials.IssuedKubeconfigsConfigMapName(c.Name)}}
	_, err := controllerutil.CreateOrUpdate(ctx, k8s, cm, func() error {
		record, err := oldca.ParseKubeconfigs(cm.Data[oldca.KubeconfigsDataKey])
		if err != nil {
			return err
		}
		record.Add(issued, now)
		cm.Labels = map[string]string{v1alpha1.LabelCluster: c.Name}
		cm.Data = map[string]string{oldca.KubeconfigsDataKey: record.String()}
		return controllerutil.SetControllerReference(c, cm, k8s.Scheme())
	})
	Expect(err).NotTo(HaveOccurred())
}

// denyingPolicy is a ValidatingAdmissionPolicy of a managed cluster, and its
// binding, that refuses, with message, the operations ops on the objects
// named names of resource in group (version v1): an admission webhook or
// policy of the tenant's, as Carousel meets them.
func denyingPolicy(name, group, resource string, names []string, message string, ops ...admissionregistrationv1.OperationType) (
	*admissionregistrationv1.ValidatingAdmissionPolicy, *admissionregistrationv1.ValidatingAdmissionPolicyBinding) {
	policy := &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: ptr.To(admissionregistrationv1.Fail),
			MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
				ResourceNames: names,
				RuleWithOperations: admissionregistrationv1.RuleWithOperations{
					Operations: ops,
					Rule:       admissionregistrationv1.Rule{APIGroups: []string{group}, APIVersions: []string{"v1"}, Resources: []string{resource}},
				},
			}}},
			Validations: []admissionregistrationv1.Validation{{Expression: "false", Message: message}},
		},
	}
	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: name,
			ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny}},
	}
	return policy, binding
}
