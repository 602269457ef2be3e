package integration

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/client-go/tools/events"
	bootstrapapi "k8s.io/cluster-bootstrap/token/api"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
	"github.com/carousel-dev/carousel/pkg/bootstrap"
	clustercontroller "github.com/carousel-dev/carousel/pkg/controller/cluster"
	"github.com/carousel-dev/carousel/pkg/credentials"
	"github.com/carousel-dev/carousel/test/framework"
)

// attacker is a TCP listener standing in for a server a tenant controls: it
// counts every connection it is offered and answers none.
type attacker struct {
	listener net.Listener
	accepted atomic.Int64
}

func listenAsAttacker() *attacker {
	GinkgoHelper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	Expect(err).NotTo(HaveOccurred())
	a := &attacker{listener: l}
	go func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			a.accepted.Add(1)
			_ = conn.Close()
		}
	}()
	DeferCleanup(l.Close)
	return a
}

// tenantKubeconfig is what a tenant with write access to the Cluster's
// namespace puts into the operator's Secret: a server of theirs, the operator
// Pod's own service-account token by file, an exec plugin that would run on
// the operator's machine and no TLS checks. File-path fields are left out on
// purpose: client-go refuses a root-CA file beside the insecure flag and fails
// on a missing file, so they would make the old code fail to connect and the
// spec pass for the wrong reason. The operator never parses this kubeconfig
// (credentials.RESTConfig takes data only; TestRESTConfigCarriesOnlyTheGivenData).
func tenantKubeconfig(server, tokenFile, marker string) []byte {
	GinkgoHelper()
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["evil"] = &clientcmdapi.Cluster{Server: server, InsecureSkipTLSVerify: true}
	cfg.AuthInfos["evil"] = &clientcmdapi.AuthInfo{
		TokenFile: tokenFile,
		Exec: &clientcmdapi.ExecConfig{
			APIVersion: "client.authentication.k8s.io/v1", Command: "/bin/sh",
			Args:            []string{"-c", "touch " + marker + "; echo '{\"apiVersion\":\"client.authentication.k8s.io/v1\",\"kind\":\"ExecCredential\",\"status\":{\"token\":\"x\"}}'"},
			InteractiveMode: clientcmdapi.NeverExecInteractiveMode,
		},
	}
	cfg.Contexts["evil"] = &clientcmdapi.Context{Cluster: "evil", AuthInfo: "evil"}
	cfg.CurrentContext = "evil"
	data, err := clientcmd.Write(*cfg)
	Expect(err).NotTo(HaveOccurred())
	return data
}

var _ = Describe("The tenant boundary with a managed cluster", Ordered, func() {
	var (
		c     *v1alpha1.Cluster
		admin kubernetes.Interface
	)

	BeforeAll(func(ctx SpecContext) {
		ns := newNamespace(ctx)
		var writes atomic.Int64
		startControllers(ns, &writes)
		port, err := framework.FreePort()
		Expect(err).NotTo(HaveOccurred())
		cp := &framework.ManagedControlPlane{BinDir: os.Getenv("KUBEBUILDER_ASSETS"), Dir: GinkgoT().TempDir(), APIServerPort: port}
		c = &v1alpha1.Cluster{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "tenant"},
			Spec:       v1alpha1.ClusterSpec{KubernetesVersion: "1.36.3", ControlPlane: v1alpha1.ControlPlaneSpec{Endpoint: cp.Endpoint()}},
		}
		Expect(k8s.Create(ctx, c)).To(Succeed())
		c = waitForReady(ctx, client.ObjectKeyFromObject(c))
		Expect(cp.WriteCredentials(ctx, k8s, c)).To(Succeed())
		DeferCleanup(cp.Stop) // before the start, which may fail half-way
		Expect(cp.Start(ctx)).To(Succeed())
		cfg, err := framework.RESTConfig(ctx, k8s, c, credentials.CertAdmin)
		Expect(err).NotTo(HaveOccurred())
		admin = kubernetes.NewForConfigOrDie(cfg)
		Eventually(func(g Gomega) {
			tokens, err := admin.CoreV1().Secrets(metav1.NamespaceSystem).List(ctx, metav1.ListOptions{LabelSelector: v1alpha1.LabelBootstrapToken + "=" + c.Name})
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(tokens.Items).To(HaveLen(1))
		}).WithTimeout(time.Minute).Should(Succeed(), "Carousel connects to the managed cluster and issues a bootstrap token")
	})

	It("never connects with a kubeconfig a tenant wrote beside the Cluster", func(ctx SpecContext) {
		evil := listenAsAttacker()
		dir := GinkgoT().TempDir()
		tokenFile, marker := filepath.Join(dir, "token"), filepath.Join(dir, "exec-ran")
		Expect(os.WriteFile(tokenFile, []byte("the-operator-service-account-token"), 0o600)).To(Succeed())

		// The tenant corrupts the cluster CA Secret first, so that the
		// Cluster controller stops at it and does not rewrite the operator
		// Secret, then plants the kubeconfig.
		caSecret := &corev1.Secret{}
		Expect(k8s.Get(ctx, client.ObjectKey{Namespace: c.Namespace, Name: credentials.CASecretName(c.Name, v1alpha1.CARoleCluster)}, caSecret)).To(Succeed())
		original := caSecret.DeepCopy()
		caSecret.Data[v1alpha1.DataKeyCertificate] = []byte("corrupt")
		Expect(k8s.Update(ctx, caSecret)).To(Succeed())
		operatorSecret := &corev1.Secret{}
		Expect(k8s.Get(ctx, client.ObjectKey{Namespace: c.Namespace, Name: credentials.CertificateSecretName(c.Name, credentials.CertOperator)}, operatorSecret)).To(Succeed())
		operatorSecret.Data[v1alpha1.DataKeyKubeconfig] = tenantKubeconfig("https://"+evil.listener.Addr().String(), tokenFile, marker)
		Expect(k8s.Update(ctx, operatorSecret)).To(Succeed())

		// The Secret's change makes the managed-cluster controller reconcile.
		// It keeps using its own connection: a token deleted in the managed
		// cluster is issued again there.
		Expect(admin.CoreV1().Secrets(metav1.NamespaceSystem).DeleteCollection(ctx, metav1.DeleteOptions{},
			metav1.ListOptions{LabelSelector: v1alpha1.LabelBootstrapToken + "=" + c.Name})).To(Succeed())
		Expect(k8s.Update(ctx, withLabel(operatorSecret, "tenant-edit", "2"))).To(Succeed())
		Eventually(func(g Gomega) {
			tokens, err := admin.CoreV1().Secrets(metav1.NamespaceSystem).List(ctx, metav1.ListOptions{LabelSelector: v1alpha1.LabelBootstrapToken + "=" + c.Name})
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(tokens.Items).To(HaveLen(1))
		}).WithTimeout(time.Minute).Should(Succeed())
		Consistently(evil.accepted.Load).WithTimeout(3*time.Second).Should(BeZero(), "the tenant's server was offered a connection")
		Expect(marker).NotTo(BeAnExistingFile(), "the tenant's exec plugin ran on the operator's machine")

		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(caSecret), caSecret)).To(Succeed())
		caSecret.Data = original.Data
		Expect(k8s.Update(ctx, caSecret)).To(Succeed())
		waitForReady(ctx, client.ObjectKeyFromObject(c))
	})

	It("removes its tokens, RBAC, cluster-info and node trust ConfigMap from the managed cluster when the Cluster is deleted", func(ctx SpecContext) {
		Expect(getCluster(ctx, client.ObjectKeyFromObject(c)).Finalizers).To(ContainElement(v1alpha1.FinalizerManagedCleanup))
		Eventually(func() error {
			_, err := admin.CoreV1().ConfigMaps(metav1.NamespaceSystem).Get(ctx, bootstrap.NodeTrustConfigMap, metav1.GetOptions{})
			return err
		}).WithContext(ctx).WithTimeout(time.Minute).Should(Succeed(), "%s is there before the deletion", bootstrap.NodeTrustConfigMap)
		Expect(k8s.Delete(ctx, c)).To(Succeed())
		Eventually(func() bool {
			return apierrors.IsNotFound(k8s.Get(ctx, client.ObjectKeyFromObject(c), &v1alpha1.Cluster{}))
		}).WithTimeout(time.Minute).Should(BeTrue(), "the Cluster is released once its managed cluster is clean")

		tokens, err := admin.CoreV1().Secrets(metav1.NamespaceSystem).List(ctx, metav1.ListOptions{LabelSelector: v1alpha1.LabelBootstrapToken + "=" + c.Name})
		Expect(err).NotTo(HaveOccurred())
		Expect(tokens.Items).To(BeEmpty())
		for _, name := range []string{bootstrap.BindingNodeBootstrapper, bootstrap.BindingNodeClient, bootstrap.BindingSelfNodeClient} {
			_, err := admin.RbacV1().ClusterRoleBindings().Get(ctx, name, metav1.GetOptions{})
			Expect(apierrors.IsNotFound(err)).To(BeTrue(), "ClusterRoleBinding %s: %v", name, err)
		}
		_, err = admin.CoreV1().ConfigMaps(metav1.NamespacePublic).Get(ctx, "cluster-info", metav1.GetOptions{})
		Expect(apierrors.IsNotFound(err)).To(BeTrue(), "cluster-info: %v", err)
		_, err = admin.CoreV1().ConfigMaps(metav1.NamespaceSystem).Get(ctx, bootstrap.NodeTrustConfigMap, metav1.GetOptions{})
		Expect(apierrors.IsNotFound(err)).To(BeTrue(), "%s: %v", bootstrap.NodeTrustConfigMap, err)
		_, err = admin.RbacV1().Roles(metav1.NamespaceSystem).Get(ctx, bootstrap.NodeTrustRole, metav1.GetOptions{})
		Expect(apierrors.IsNotFound(err)).To(BeTrue(), "Role %s: %v", bootstrap.NodeTrustRole, err)
		_, err = admin.RbacV1().RoleBindings(metav1.NamespaceSystem).Get(ctx, bootstrap.NodeTrustRole, metav1.GetOptions{})
		Expect(apierrors.IsNotFound(err)).To(BeTrue(), "RoleBinding %s: %v", bootstrap.NodeTrustRole, err)
	})
})

var _ = Describe("Deleting a Cluster whose managed cluster cannot be reached", func() {
	It("is released after the cleanup timeout, with an event that says what was left, once the managed cluster was reached", func(ctx SpecContext) {
		ns := newNamespace(ctx)
		var writes atomic.Int64
		startControllers(ns, &writes)
		port, err := framework.FreePort()
		Expect(err).NotTo(HaveOccurred())
		cp := &framework.ManagedControlPlane{BinDir: os.Getenv("KUBEBUILDER_ASSETS"), Dir: GinkgoT().TempDir(), APIServerPort: port}
		c := &v1alpha1.Cluster{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "gone"},
			Spec: v1alpha1.ClusterSpec{KubernetesVersion: "1.36.3",
				ControlPlane: v1alpha1.ControlPlaneSpec{Endpoint: cp.Endpoint()}},
		}
		Expect(k8s.Create(ctx, c)).To(Succeed())
		key := client.ObjectKeyFromObject(c)
		Consistently(func() []string { return getCluster(ctx, key).Finalizers }).WithTimeout(3*time.Second).ShouldNot(ContainElement(v1alpha1.FinalizerManagedCleanup),
			"no finalizer before the managed cluster was reached: nothing can have been written there")

		By("reaching the managed cluster, then losing it")
		Expect(cp.WriteCredentials(ctx, k8s, waitForReady(ctx, key))).To(Succeed())
		DeferCleanup(cp.Stop)
		Expect(cp.Start(ctx)).To(Succeed())
		Eventually(func() []string { return getCluster(ctx, key).Finalizers }).WithTimeout(time.Minute).Should(ContainElement(v1alpha1.FinalizerManagedCleanup))
		cp.Stop()
		Expect(k8s.Delete(ctx, c)).To(Succeed())
		Eventually(func() bool { return apierrors.IsNotFound(k8s.Get(ctx, key, &v1alpha1.Cluster{})) }).
			WithTimeout(time.Minute).Should(BeTrue())
		Eventually(func(g Gomega) {
			var events eventsv1.EventList
			g.Expect(k8s.List(ctx, &events, client.InNamespace(ns))).To(Succeed())
			g.Expect(events.Items).To(ContainElement(And(
				HaveField("Reason", v1alpha1.EventManagedCleanupAbandoned),
				HaveField("Note", ContainSubstring("delete the Secrets labelled carousel.dev/bootstrap-token=gone")))))
		}).Should(Succeed())
	})
})

// issueCredentialsOnce runs one reconcile of c, which issues every CA,
// certificate and kubeconfig, and no controller after it.
func issueCredentialsOnce(ctx context.Context, c *v1alpha1.Cluster) {
	GinkgoHelper()
	r := &clustercontroller.Reconciler{Client: k8s, Clock: clock.RealClock{}, Recorder: events.NewFakeRecorder(100), CAExpiryWarning: time.Hour}
	_, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(c)})
	Expect(err).NotTo(HaveOccurred())
}

func withLabel(s *corev1.Secret, key, value string) *corev1.Secret {
	if s.Labels == nil {
		s.Labels = map[string]string{}
	}
	s.Labels[key] = value
	return s
}

var _ = Describe("kubectl carousel rotation plan", func() {
	It("never runs an exec plugin or contacts a server a tenant planted in the admin kubeconfig", func(ctx SpecContext) {
		ns := newNamespace(ctx)
		port, err := framework.FreePort() // nothing listens there
		Expect(err).NotTo(HaveOccurred())
		c := &v1alpha1.Cluster{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "planted"},
			Spec: v1alpha1.ClusterSpec{KubernetesVersion: "1.36.3",
				ControlPlane: v1alpha1.ControlPlaneSpec{Endpoint: (&framework.ManagedControlPlane{APIServerPort: port}).Endpoint()},
				Workers:      []v1alpha1.WorkerPool{{Name: "manual", RolloutStrategy: v1alpha1.RolloutManual}}},
		}
		Expect(k8s.Create(ctx, c)).To(Succeed())
		// No controller runs afterwards to write the planted kubeconfig back.
		issueCredentialsOnce(ctx, c)

		evil := listenAsAttacker()
		dir := GinkgoT().TempDir()
		marker, tokenFile := filepath.Join(dir, "exec-ran"), filepath.Join(dir, "token")
		Expect(os.WriteFile(tokenFile, []byte("a-token-of-the-user"), 0o600)).To(Succeed())
		admin := &corev1.Secret{}
		Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: credentials.CertificateSecretName(c.Name, credentials.CertAdmin)}, admin)).To(Succeed())
		admin.Data[v1alpha1.DataKeyKubeconfig] = tenantKubeconfig("https://"+evil.listener.Addr().String(), tokenFile, marker)
		Expect(k8s.Update(ctx, admin)).To(Succeed())

		out, err := kubectlCarousel(ctx, "rotation", "plan", c.Name, "-n", ns)
		Expect(err).NotTo(HaveOccurred())
		Expect(out).To(ContainSubstring("manual (Manual): nodes unknown:"), "the nodes are asked of the Cluster's own endpoint, which is down")
		Expect(marker).NotTo(BeAnExistingFile(), "the tenant's exec plugin ran on the user's machine")
		Expect(evil.accepted.Load()).To(BeZero(), "the tenant's server was contacted")
	})
})

var _ = Describe("kubectl carousel certs upload", func() {
	It("works for the longest Cluster name and deletes expired uploads itself", func(ctx SpecContext) {
		ns := newNamespace(ctx)
		c := createCluster(ctx, ns, strings.Repeat("c", 63))
		issueCredentialsOnce(ctx, c)

		// An upload whose token expired, as an earlier upload leaves it when
		// no tokencleaner runs.
		expiredToken := &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceSystem, Name: "bootstrap-token-exp123",
				Labels: map[string]string{v1alpha1.LabelCertsUpload: "some-cluster-uid"}},
			Type: bootstrapapi.SecretTypeBootstrapToken,
			StringData: map[string]string{bootstrapapi.BootstrapTokenIDKey: "exp123", bootstrapapi.BootstrapTokenSecretKey: "0123456789abcdef",
				bootstrapapi.BootstrapTokenExpirationKey: time.Now().Add(-time.Minute).UTC().Format(time.RFC3339)},
		}
		Expect(k8s.Create(ctx, expiredToken)).To(Succeed())
		expiredCopy := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceSystem, Name: "carousel-certs-exp123",
			Labels: map[string]string{v1alpha1.LabelCertsUpload: "some-cluster-uid"}}, Data: map[string][]byte{"certificates": []byte("sealed")}}
		Expect(k8s.Create(ctx, expiredCopy)).To(Succeed())

		out, err := kubectlCarousel(ctx, "certs", "upload", c.Name, "-n", ns, "--ttl", "1h")
		Expect(err).NotTo(HaveOccurred())
		Expect(out).To(ContainSubstring("Uploaded"))
		for _, s := range []*corev1.Secret{expiredToken, expiredCopy} {
			Expect(apierrors.IsNotFound(k8s.Get(ctx, client.ObjectKeyFromObject(s), &corev1.Secret{}))).To(BeTrue(), "expired upload Secret %s is still there", s.Name)
		}
		var uploads corev1.SecretList
		Expect(k8s.List(ctx, &uploads, client.InNamespace(metav1.NamespaceSystem), client.MatchingLabels{v1alpha1.LabelCertsUpload: string(c.UID)})).To(Succeed())
		Expect(uploads.Items).To(HaveLen(2), "the new upload's token and copy, labelled with the Cluster's UID")
	})

	It("deletes the bootstrap token it created when the encrypted copy cannot be stored", func(ctx SpecContext) {
		ns := newNamespace(ctx)
		c := createCluster(ctx, ns, "refused-copy")
		issueCredentialsOnce(ctx, c)

		By("refusing the creation of this Cluster's encrypted copies with an admission policy")
		policy, binding := denyingPolicy("refuse-certs-copy", corev1.GroupName, "secrets", nil, "refused by the test", admissionregistrationv1.Create)
		upload := map[string]string{v1alpha1.LabelCertsUpload: string(c.UID)}
		policy.Spec.MatchConstraints.ObjectSelector = &metav1.LabelSelector{MatchLabels: upload}
		policy.Spec.Validations[0].Expression = "!object.metadata.name.startsWith('carousel-certs-')"
		for _, o := range []client.Object{policy, binding} {
			Expect(k8s.Create(ctx, o)).To(Succeed())
			DeferCleanup(func(ctx context.Context) { Expect(client.IgnoreNotFound(k8s.Delete(ctx, o))).To(Succeed()) })
		}
		Eventually(func(ctx context.Context) error {
			probe := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceSystem, Name: "carousel-certs-probe", Labels: upload}}
			return k8s.Create(ctx, probe, client.DryRunAll)
		}).WithContext(ctx).WithTimeout(30*time.Second).WithPolling(200*time.Millisecond).Should(MatchError(ContainSubstring("refused by the test")),
			"the policy in force")

		_, err := kubectlCarousel(ctx, "certs", "upload", c.Name, "-n", ns, "--ttl", "1h")
		Expect(err).To(MatchError(And(ContainSubstring("storing the encrypted copy"), ContainSubstring("refused by the test"),
			MatchRegexp(`its bootstrap token bootstrap-token-[a-z0-9]{6} is deleted`))))
		var uploads corev1.SecretList
		Expect(k8s.List(ctx, &uploads, client.InNamespace(metav1.NamespaceSystem), client.MatchingLabels(upload))).To(Succeed())
		Expect(uploads.Items).To(BeEmpty(), "no token is left owning a copy that was never stored")
	})
})
