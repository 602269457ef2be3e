package integration

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"fmt"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync/atomic"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	bootstrapapi "k8s.io/cluster-bootstrap/token/api"
	"k8s.io/cluster-bootstrap/token/jws"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
	"github.com/carousel-dev/carousel/pkg/bootstrap"
	"github.com/carousel-dev/carousel/pkg/clustercache"
	"github.com/carousel-dev/carousel/pkg/controller/kubeletbootstrap"
	"github.com/carousel-dev/carousel/pkg/controller/kubeletcsr"
	"github.com/carousel-dev/carousel/pkg/credentials"
	"github.com/carousel-dev/carousel/pkg/nodeagent"
	"github.com/carousel-dev/carousel/pkg/oldca"
	"github.com/carousel-dev/carousel/pkg/pki"
	"github.com/carousel-dev/carousel/pkg/scheme"
	"github.com/carousel-dev/carousel/test/framework"
	"github.com/carousel-dev/carousel/test/framework/kit"
)

var _ = Describe("Kubelet bootstrap in a managed cluster running on Carousel's certificates", Ordered, func() {
	var (
		c        *v1alpha1.Cluster
		cp       *framework.ManagedControlPlane
		key      client.ObjectKey
		admin    kubernetes.Interface
		agentDir string
		agent    *nodeagent.Manager
		agentCtx context.Context // the agent's background work runs until the container ends
		writes   atomic.Int64
		// bare is a node whose kubelet no node agent reports for, with its
		// files in bareDir.
		bare    *nodeagent.Node
		bareDir string
	)
	const nodeName = "worker-1"

	BeforeAll(func(ctx SpecContext) {
		ns := newNamespace(ctx)
		startControllers(ns, &writes)
		port, err := framework.FreePort()
		Expect(err).NotTo(HaveOccurred())
		// kube-controller-manager publishes kube-root-ca.crt, which the rotation waits for.
		cp = &framework.ManagedControlPlane{BinDir: os.Getenv("KUBEBUILDER_ASSETS"), Dir: GinkgoT().TempDir(), APIServerPort: port, ControllerManager: true}
		c = &v1alpha1.Cluster{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "managed"},
			Spec: v1alpha1.ClusterSpec{
				KubernetesVersion: "1.36.3",
				ControlPlane:      v1alpha1.ControlPlaneSpec{Endpoint: cp.Endpoint()},
				Workers:           []v1alpha1.WorkerPool{{Name: "pool-a", RolloutStrategy: v1alpha1.RolloutInPlace}},
				// No pod of this cluster calls its API server.
				CARotation: v1alpha1.CARotationSettings{WorkloadTrustReload: &metav1.Duration{}},
			},
		}
		Expect(k8s.Create(ctx, c)).To(Succeed())
		key = client.ObjectKeyFromObject(c)
		c = waitForReady(ctx, key)

		cfg := runControlPlane(ctx, c, cp)
		var stopAgent context.CancelFunc
		agentCtx, stopAgent = context.WithCancel(context.Background())
		DeferCleanup(stopAgent)
		admin = kubernetes.NewForConfigOrDie(cfg)
		agentDir, bareDir = GinkgoT().TempDir(), GinkgoT().TempDir()
	})

	It("publishes the bootstrap RBAC, cluster-info and a bootstrap token", func(ctx SpecContext) {
		Eventually(func(g Gomega) {
			s := &corev1.Secret{}
			g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: c.Namespace, Name: credentials.BootstrapKubeconfigSecretName(c.Name)}, s)).To(Succeed())
			g.Expect(os.WriteFile(filepath.Join(agentDir, "bootstrap-kubeconfig"), s.Data[v1alpha1.DataKeyKubeconfig], 0o600)).To(Succeed())
		}).WithTimeout(time.Minute).Should(Succeed())

		tokens, err := admin.CoreV1().Secrets(metav1.NamespaceSystem).List(ctx, metav1.ListOptions{LabelSelector: v1alpha1.LabelBootstrapToken + "=" + c.Name})
		Expect(err).NotTo(HaveOccurred())
		Expect(tokens.Items).To(HaveLen(1))
		Expect(tokens.Items[0].Type).To(Equal(bootstrapapi.SecretTypeBootstrapToken))
		Expect(string(tokens.Items[0].Data[bootstrapapi.BootstrapTokenExtraGroupsKey])).To(Equal(bootstrap.Group(c.Name)))

		info, err := admin.CoreV1().ConfigMaps(metav1.NamespacePublic).Get(ctx, bootstrapapi.ConfigMapClusterInfo, metav1.GetOptions{})
		Expect(err).NotTo(HaveOccurred())
		kc, err := clientcmd.Load([]byte(info.Data[bootstrapapi.KubeConfigKey]))
		Expect(err).NotTo(HaveOccurred())
		Expect(kc.Clusters[""].CertificateAuthorityData).To(Equal(loadBundle(ctx, c, v1alpha1.CARoleCluster).PEM()))

		for _, name := range []string{bootstrap.BindingNodeBootstrapper, bootstrap.BindingNodeClient, bootstrap.BindingSelfNodeClient} {
			_, err := admin.RbacV1().ClusterRoleBindings().Get(ctx, name, metav1.GetOptions{})
			Expect(err).NotTo(HaveOccurred(), name)
		}
		_, err = admin.RbacV1().RoleBindings(metav1.NamespacePublic).Get(ctx, bootstrap.ClusterInfoRole, metav1.GetOptions{})
		Expect(err).NotTo(HaveOccurred())

		By("signing cluster-info with the token, and publishing both bundles for nodes")
		Eventually(expectPublishedTrust).WithContext(ctx).WithArguments(admin, c).WithTimeout(time.Minute).Should(Succeed())
		jwsKey := bootstrapapi.JWSSignatureKeyPrefix + string(tokens.Items[0].Data[bootstrapapi.BootstrapTokenIDKey])
		Expect(info.Data).To(HaveKey(jwsKey), "the token is signed in the reconcile that issued it")

		By("letting a node read kube-system/carousel-node-trust, and nothing else there")
		cfg, err := framework.RESTConfig(ctx, k8s, c, credentials.CertAdmin)
		Expect(err).NotTo(HaveOccurred())
		cfg.Impersonate = rest.ImpersonationConfig{UserName: "system:node:x", Groups: []string{"system:nodes", "system:authenticated"}}
		asNode := kubernetes.NewForConfigOrDie(cfg)
		trust, err := asNode.CoreV1().ConfigMaps(metav1.NamespaceSystem).Get(ctx, bootstrap.NodeTrustConfigMap, metav1.GetOptions{})
		Expect(err).NotTo(HaveOccurred())
		Expect(trust.Data).To(HaveKeyWithValue(bootstrap.NodeTrustKeyKubeletCA, string(loadBundle(ctx, c, v1alpha1.CARoleKubelet).PEM())))
		listed, err := asNode.CoreV1().ConfigMaps(metav1.NamespaceSystem).List(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + bootstrap.NodeTrustConfigMap})
		Expect(err).NotTo(HaveOccurred())
		Expect(listed.Items).To(HaveLen(1))
		_, err = asNode.CoreV1().ConfigMaps(metav1.NamespaceSystem).List(ctx, metav1.ListOptions{})
		Expect(apierrors.IsForbidden(err)).To(BeTrue(), "listing every ConfigMap of kube-system as a node: %v", err)
		_, err = asNode.CoreV1().ConfigMaps(metav1.NamespaceSystem).Get(ctx, "extension-apiserver-authentication", metav1.GetOptions{})
		Expect(apierrors.IsForbidden(err)).To(BeTrue(), "reading another ConfigMap of kube-system as a node: %v", err)

		By("writing nothing in the managed cluster when a reconcile has nothing to do")
		before := publishedVersions(ctx, admin)
		published := &corev1.Secret{}
		Expect(k8s.Get(ctx, client.ObjectKey{Namespace: c.Namespace, Name: credentials.BootstrapKubeconfigSecretName(c.Name)}, published)).To(Succeed())
		reconciled := reconciles(kubeletbootstrap.ControllerName, "success", "requeue", "requeue_after")
		Expect(k8s.Update(ctx, withLabel(published, "poke", "1"))).To(Succeed(), "a change of a labelled object makes the controller reconcile")
		Eventually(func() float64 {
			return reconciles(kubeletbootstrap.ControllerName, "success", "requeue", "requeue_after")
		}).
			Should(BeNumerically(">", reconciled), "the controller reconciled after the change")
		Consistently(publishedVersions).WithContext(ctx).WithArguments(admin).WithTimeout(3 * time.Second).Should(Equal(before))
	})

	It("lets an agent bootstrap with the token, then work and renew as system:node:<name>", func(ctx SpecContext) {
		agent = nodeagent.NewManager(nodeagent.Config{
			NodeName: nodeName, CertDir: filepath.Join(agentDir, "pki"),
			KubeconfigPath: filepath.Join(agentDir, "kubeconfig"), BootstrapKubeconfigPath: filepath.Join(agentDir, "bootstrap-kubeconfig"),
			Clock: clock.RealClock{}, StartupTimeout: time.Minute,
		})
		Expect(agent.Start(ctx)).To(Succeed())
		first := agent.Current().Cert
		Expect(first.Subject.CommonName).To(Equal("system:node:" + nodeName))
		clientCA := loadCAs(ctx, c)[v1alpha1.CARoleClient].Current.Cert
		Expect(pki.Verify(first, pki.NewBundle(clientCA), x509.ExtKeyUsageClientAuth, time.Now())).To(Succeed())

		By("keeping the pair in kubelet-client-current.pem, a symlink to a timestamped file")
		target, err := os.Readlink(filepath.Join(agentDir, "pki", "kubelet-client-current.pem"))
		Expect(err).NotTo(HaveOccurred())
		Expect(target).To(MatchRegexp(`^kubelet-client-\d{4}-\d{2}-\d{2}-\d{2}-\d{2}-\d{2}\.pem$`))

		By("acting as the node: register, heartbeat")
		node := &nodeagent.Node{Manager: agent, Pool: "pool-a", Address: "127.0.0.1", HeartbeatInterval: 10 * time.Second, Version: "v0.0.0-integration", Logf: stderrf}
		Expect(node.Register(ctx)).To(Succeed())
		Eventually(node.Heartbeat).WithContext(ctx).WithTimeout(2*time.Minute).Should(Succeed(), "the platform may be restarting the API server")
		registered, err := admin.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
		Expect(err).NotTo(HaveOccurred())
		Expect(registered.Labels).To(HaveKeyWithValue(v1alpha1.LabelPool, "pool-a"))
		_, err = admin.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx, nodeName, metav1.GetOptions{})
		Expect(err).NotTo(HaveOccurred())
		go func() { _ = node.WatchRenewals(agentCtx) }()

		By("renewing its own identity")
		Eventually(agent.Renew).WithContext(ctx).WithTimeout(2 * time.Minute).WithArguments([]byte(nil)).Should(Succeed())
		Expect(agent.Current().Cert.SerialNumber).NotTo(Equal(first.SerialNumber))
		csrs, err := admin.CertificatesV1().CertificateSigningRequests().List(ctx, metav1.ListOptions{})
		Expect(err).NotTo(HaveOccurred())
		var reasons []string
		for _, r := range csrs.Items {
			for _, cond := range r.Status.Conditions {
				reasons = append(reasons, cond.Message)
			}
		}
		Expect(reasons).To(ContainElements("first bootstrap with a Carousel bootstrap token", "node renewing its own client certificate"))

		By("restarting on the stored pair without a new CSR")
		restarted := nodeagent.NewManager(nodeagent.Config{NodeName: nodeName, CertDir: filepath.Join(agentDir, "pki"),
			KubeconfigPath: filepath.Join(agentDir, "kubeconfig"), BootstrapKubeconfigPath: filepath.Join(agentDir, "bootstrap-kubeconfig"), Clock: clock.RealClock{}})
		Expect(restarted.Start(ctx)).To(Succeed())
		Expect(restarted.Current().Cert.Equal(agent.Current().Cert)).To(BeTrue())
		after, err := admin.CertificatesV1().CertificateSigningRequests().List(ctx, metav1.ListOptions{})
		Expect(err).NotTo(HaveOccurred())
		Expect(after.Items).To(HaveLen(len(csrs.Items)))
	})

	It("records each kubelet client certificate it signs, with its CA, before the kubelet gets it", func(ctx SpecContext) {
		clientCA := loadCAs(ctx, c)[v1alpha1.CARoleClient].Current.Cert
		Expect(signedKubeletCertificates(ctx, c)).To(ContainElement(And(HaveField("User", "system:node:"+nodeName),
			HaveField("Fingerprint", pki.Fingerprint(agent.Current().Cert)), HaveField("Issuer", hex.EncodeToString(clientCA.SubjectKeyId)))),
			"the agent's renewed certificate is the last one recorded for its node")

		By("bootstrapping a node whose kubelet no node agent reports for: it registers and heartbeats, and never reports its certificate")
		dir := bareDir
		s := &corev1.Secret{}
		Expect(k8s.Get(ctx, client.ObjectKey{Namespace: c.Namespace, Name: credentials.BootstrapKubeconfigSecretName(c.Name)}, s)).To(Succeed())
		Expect(os.WriteFile(filepath.Join(dir, "bootstrap-kubeconfig"), s.Data[v1alpha1.DataKeyKubeconfig], 0o600)).To(Succeed())
		kubelet := nodeagent.NewManager(nodeagent.Config{NodeName: "bare-1", CertDir: filepath.Join(dir, "pki"),
			KubeconfigPath: filepath.Join(dir, "kubeconfig"), BootstrapKubeconfigPath: filepath.Join(dir, "bootstrap-kubeconfig"),
			Clock: clock.RealClock{}, StartupTimeout: time.Minute})
		Expect(kubelet.Start(ctx)).To(Succeed())
		bare = &nodeagent.Node{Manager: kubelet, Pool: "unmanaged", Address: "127.0.0.1", HeartbeatInterval: 10 * time.Second, Logf: stderrf}
		Expect(bare.Register(ctx)).To(Succeed())
		Eventually(bare.Heartbeat).WithContext(ctx).WithTimeout(2 * time.Minute).Should(Succeed())
		Expect(signedKubeletCertificates(ctx, c)).To(ContainElement(And(HaveField("User", "system:node:bare-1"),
			HaveField("Fingerprint", pki.Fingerprint(kubelet.Current().Cert)), HaveField("Issuer", hex.EncodeToString(clientCA.SubjectKeyId)))))
	})

	It("approves a serving certificate for an address the node added later under servingAddresses NodeStatus, not under FirstSeen", func(ctx SpecContext) {
		setServing := func(ctx context.Context, mode v1alpha1.ApprovalMode, addresses v1alpha1.ServingAddressPolicy) {
			updateClusterSpec(ctx, key, func(spec *v1alpha1.ClusterSpec) {
				spec.KubeletBootstrap.CSRApproval.Serving = mode
				spec.KubeletBootstrap.CSRApproval.ServingAddresses = addresses
			})
		}
		requestServing := func(ctx context.Context, name string, ip string) (*x509.Certificate, error) {
			k, err := pki.GenerateKey(pki.ECDSAP256)
			Expect(err).NotTo(HaveOccurred())
			der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
				Subject:  pkix.Name{CommonName: "system:node:" + nodeName, Organization: []string{"system:nodes"}},
				DNSNames: []string{nodeName}, IPAddresses: []net.IP{net.ParseIP(ip)},
			}, k)
			Expect(err).NotTo(HaveOccurred())
			csr := &certificatesv1.CertificateSigningRequest{
				ObjectMeta: metav1.ObjectMeta{Name: name},
				Spec: certificatesv1.CertificateSigningRequestSpec{
					Request:    pki.EncodeCertificateRequest(der),
					SignerName: certificatesv1.KubeletServingSignerName,
					Usages:     []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageServerAuth},
				},
			}
			waitCtx, cancel := context.WithTimeout(ctx, time.Minute)
			defer cancel()
			out, err := nodeagent.RequestCertificate(waitCtx, agent.Client(), csr, k)
			if err != nil {
				return nil, err
			}
			certs, err := pki.ParseCertificates(out)
			Expect(err).NotTo(HaveOccurred())
			return certs[0], nil
		}
		kubeletCA := func(ctx context.Context) *x509.Certificate {
			return loadCAs(ctx, c)[v1alpha1.CARoleKubelet].Current.Cert
		}

		setServing(ctx, v1alpha1.ApprovalAuto, v1alpha1.ServingAddressesFirstSeen)
		DeferCleanup(func(ctx SpecContext) { setServing(ctx, v1alpha1.ApprovalManual, v1alpha1.ServingAddressesNodeStatus) })

		By("approving the addresses the node registered with, and pinning them where the node cannot write")
		cert, err := requestServing(ctx, "serving-first-seen", "127.0.0.1")
		Expect(err).NotTo(HaveOccurred())
		Expect(pki.Verify(cert, pki.NewBundle(kubeletCA(ctx)), x509.ExtKeyUsageServerAuth, time.Now())).To(Succeed())
		registered, err := admin.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
		Expect(err).NotTo(HaveOccurred())
		pin, err := admin.CoreV1().ConfigMaps(metav1.NamespaceSystem).Get(ctx, kubeletcsr.PinConfigMapName(nodeName), metav1.GetOptions{})
		Expect(err).NotTo(HaveOccurred())
		Expect(pin.Data).To(HaveKeyWithValue("uid", string(registered.UID)))
		Expect(pin.Data).To(HaveKeyWithValue("addresses", `["127.0.0.1","worker-1"]`))
		Expect(pin.Labels).To(HaveKeyWithValue(v1alpha1.LabelServingAddresses, c.Name))
		pin.Data["addresses"] = `["127.0.0.1","127.0.0.2","worker-1"]`
		_, err = agent.Client().CoreV1().ConfigMaps(metav1.NamespaceSystem).Update(ctx, pin, metav1.UpdateOptions{})
		Expect(err).To(HaveOccurred(), "the node cannot rewrite its pin")

		By("the node adding an address to its own Node")
		self, err := agent.Client().CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
		Expect(err).NotTo(HaveOccurred())
		original := slices.Clone(self.Status.Addresses)
		self.Status.Addresses = append(self.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeExternalIP, Address: "127.0.0.2"})
		_, err = agent.Client().CoreV1().Nodes().UpdateStatus(ctx, self, metav1.UpdateOptions{})
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(func(ctx SpecContext) {
			self, err := agent.Client().CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
			Expect(err).NotTo(HaveOccurred())
			self.Status.Addresses = original
			_, err = agent.Client().CoreV1().Nodes().UpdateStatus(ctx, self, metav1.UpdateOptions{})
			Expect(err).NotTo(HaveOccurred())
		})

		By("FirstSeen: denied")
		_, err = requestServing(ctx, "serving-added-first-seen", "127.0.0.2")
		Expect(err).To(MatchError(nodeagent.ErrDenied))
		Expect(err).To(MatchError(ContainSubstring(`CarouselUnexpectedSANs: "127.0.0.2" is not an address node "worker-1" had when Carousel first saw it`)))

		By("NodeStatus: approved and signed")
		setServing(ctx, v1alpha1.ApprovalAuto, v1alpha1.ServingAddressesNodeStatus)
		cert, err = requestServing(ctx, "serving-added-node-status", "127.0.0.2")
		Expect(err).NotTo(HaveOccurred())
		Expect(cert.IPAddresses).To(HaveLen(1))
		Expect(cert.IPAddresses[0].String()).To(Equal("127.0.0.2"))
		Expect(pki.Verify(cert, pki.NewBundle(kubeletCA(ctx)), x509.ExtKeyUsageServerAuth, time.Now())).To(Succeed())
	})

	It("denies a clearly bad request with a reason", func(ctx SpecContext) {
		cfg, err := clientcmd.BuildConfigFromFlags("", filepath.Join(agentDir, "bootstrap-kubeconfig"))
		Expect(err).NotTo(HaveOccurred())
		bootstrapper := kubernetes.NewForConfigOrDie(cfg)
		k, err := pki.GenerateKey(pki.ECDSAP256)
		Expect(err).NotTo(HaveOccurred())
		csr, err := nodeagent.ClientCSR("sneaky", "worker-2", k, 0)
		Expect(err).NotTo(HaveOccurred())
		der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
			Subject: pkix.Name{CommonName: "system:node:worker-2", Organization: []string{"system:masters"}}}, k)
		Expect(err).NotTo(HaveOccurred())
		csr.Spec.Request = pki.EncodeCertificateRequest(der)
		_, err = nodeagent.RequestCertificate(ctx, bootstrapper, csr, k)
		Expect(err).To(MatchError(nodeagent.ErrDenied))
		Expect(err).To(MatchError(ContainSubstring(`CarouselInvalidSubject: the organization must be exactly "system:nodes"`)))
	})

	It("with manual approval: a refresh times out with advice, and an approved request it cannot sign fails", func(ctx SpecContext) {
		setApproval := func(ctx context.Context, mode v1alpha1.ApprovalMode) {
			updateClusterSpec(ctx, key, func(spec *v1alpha1.ClusterSpec) { spec.KubeletBootstrap.CSRApproval.Client = mode })
		}
		// The bindings kube-controller-manager's csrapproving controller
		// would approve by are there only while approval is Auto.
		autoApproveBindings := func(ctx context.Context) []string {
			var there []string
			for _, name := range []string{bootstrap.BindingNodeClient, bootstrap.BindingSelfNodeClient} {
				_, err := admin.RbacV1().ClusterRoleBindings().Get(ctx, name, metav1.GetOptions{})
				if !apierrors.IsNotFound(err) {
					Expect(err).NotTo(HaveOccurred())
					there = append(there, name)
				}
			}
			return there
		}
		setApproval(ctx, v1alpha1.ApprovalManual)
		DeferCleanup(func(ctx SpecContext) { setApproval(ctx, v1alpha1.ApprovalAuto) })
		Eventually(autoApproveBindings).WithContext(ctx).Within(30*time.Second).Should(BeEmpty(),
			"manual approval deletes the bindings kube-controller-manager's csrapproving controller approves by")

		err := agent.Refresh(ctx, "seed1", time.Hour, 2*time.Second)
		Expect(err).To(MatchError(ContainSubstring("timed out after 2s waiting for CSR node-csr-refresh-worker-1-seed1 to be approved and signed; " +
			"approve it with: kubectl certificate approve node-csr-refresh-worker-1-seed1")))
		// Approval made Auto again: the request left for an administrator is
		// decided now, not when it is deleted a day later.
		setApproval(ctx, v1alpha1.ApprovalAuto)
		Eventually(func(g Gomega) {
			left, err := admin.CertificatesV1().CertificateSigningRequests().Get(ctx, "node-csr-refresh-worker-1-seed1", metav1.GetOptions{})
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(left.Status.Certificate).NotTo(BeEmpty())
		}).WithContext(ctx).Within(30 * time.Second).Should(Succeed())
		Eventually(autoApproveBindings).WithContext(ctx).Within(30*time.Second).Should(ConsistOf(bootstrap.BindingNodeClient, bootstrap.BindingSelfNodeClient),
			"automatic approval makes them again")
		setApproval(ctx, v1alpha1.ApprovalManual)

		_, edKey, err := ed25519.GenerateKey(rand.Reader)
		Expect(err).NotTo(HaveOccurred())
		csr, err := nodeagent.ClientCSR("unsignable", nodeName, edKey, 0)
		Expect(err).NotTo(HaveOccurred())
		created, err := admin.CertificatesV1().CertificateSigningRequests().Create(ctx, csr, metav1.CreateOptions{})
		Expect(err).NotTo(HaveOccurred())
		created.Status.Conditions = append(created.Status.Conditions, certificatesv1.CertificateSigningRequestCondition{
			Type: certificatesv1.CertificateApproved, Status: corev1.ConditionTrue, Reason: "AdminApproved"})
		_, err = admin.CertificatesV1().CertificateSigningRequests().UpdateApproval(ctx, created.Name, created, metav1.UpdateOptions{})
		Expect(err).NotTo(HaveOccurred())
		_, err = nodeagent.WaitForCertificate(ctx, admin, created)
		Expect(err).To(MatchError(nodeagent.ErrFailed))
		Expect(err).To(MatchError(ContainSubstring("CarouselSigningFailed")))
	})

	It("deletes a request made with a bootstrap token deleted before it was decided, so that the kubelet asks again with a live one", func(ctx SpecContext) {
		setApproval := func(ctx context.Context, mode v1alpha1.ApprovalMode) {
			updateClusterSpec(ctx, key, func(spec *v1alpha1.ClusterSpec) { spec.KubeletBootstrap.CSRApproval.Client = mode })
		}
		By("making a request with a token of the Cluster's while approval is manual")
		setApproval(ctx, v1alpha1.ApprovalManual)
		DeferCleanup(func(ctx SpecContext) { setApproval(ctx, v1alpha1.ApprovalAuto) })
		Eventually(func(g Gomega) {
			_, err := admin.RbacV1().ClusterRoleBindings().Get(ctx, bootstrap.BindingNodeClient, metav1.GetOptions{})
			g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "kube-controller-manager's csrapproving controller approves by this binding")
		}).WithContext(ctx).Within(30 * time.Second).Should(Succeed())
		const id = "gone01"
		token := &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceSystem, Name: bootstrapapi.BootstrapTokenSecretPrefix + id,
				Labels: map[string]string{v1alpha1.LabelBootstrapToken: c.Name}},
			Type: bootstrapapi.SecretTypeBootstrapToken,
			StringData: map[string]string{bootstrapapi.BootstrapTokenIDKey: id, bootstrapapi.BootstrapTokenSecretKey: "0123456789abcdef",
				bootstrapapi.BootstrapTokenUsageAuthentication: "true", bootstrapapi.BootstrapTokenExtraGroupsKey: bootstrap.Group(c.Name),
				bootstrapapi.BootstrapTokenExpirationKey: time.Now().Add(10 * time.Minute).UTC().Format(time.RFC3339)},
		}
		_, err := admin.CoreV1().Secrets(metav1.NamespaceSystem).Create(ctx, token, metav1.CreateOptions{})
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(func(ctx SpecContext) {
			err := admin.CoreV1().Secrets(metav1.NamespaceSystem).Delete(ctx, token.Name, metav1.DeleteOptions{})
			Expect(client.IgnoreNotFound(err)).To(Succeed())
		})
		cfg, err := clientcmd.BuildConfigFromFlags("", filepath.Join(agentDir, "bootstrap-kubeconfig"))
		Expect(err).NotTo(HaveOccurred())
		cfg.BearerToken, cfg.BearerTokenFile = id+".0123456789abcdef", ""
		k, err := pki.GenerateKey(pki.ECDSAP256)
		Expect(err).NotTo(HaveOccurred())
		request, err := nodeagent.ClientCSR("token-gone", "worker-9", k, 0)
		Expect(err).NotTo(HaveOccurred())
		var made *certificatesv1.CertificateSigningRequest
		Eventually(func() (err error) { // until the API server's token cache shows the new token
			made, err = kubernetes.NewForConfigOrDie(cfg).CertificatesV1().CertificateSigningRequests().Create(ctx, request, metav1.CreateOptions{})
			return err
		}).WithContext(ctx).Within(30 * time.Second).Should(Succeed())
		Expect(made.Spec.Username).To(Equal(bootstrapapi.BootstrapUserPrefix + id))

		By("deleting the token, then making approval automatic again: Carousel looks at the pending request at once")
		Expect(admin.CoreV1().Secrets(metav1.NamespaceSystem).Delete(ctx, token.Name, metav1.DeleteOptions{})).To(Succeed())
		setApproval(ctx, v1alpha1.ApprovalAuto)
		Eventually(func() error {
			_, err := admin.CertificatesV1().CertificateSigningRequests().Get(ctx, made.Name, metav1.GetOptions{})
			return err
		}).WithContext(ctx).Within(30*time.Second).Should(Satisfy(apierrors.IsNotFound), "the request is deleted, not left pending for a day")

		By("asking again under the same name, as a kubelet does with its key, with the token of its bootstrap kubeconfig")
		live, err := clientcmd.BuildConfigFromFlags("", filepath.Join(agentDir, "bootstrap-kubeconfig"))
		Expect(err).NotTo(HaveOccurred())
		signed, err := nodeagent.RequestCertificate(ctx, kubernetes.NewForConfigOrDie(live), request, k)
		Expect(err).NotTo(HaveOccurred())
		certs, err := pki.ParseCertificates(signed)
		Expect(err).NotTo(HaveOccurred())
		Expect(certs[0].Subject.CommonName).To(Equal("system:node:worker-9"))
	})

	It("lists the nodes each pool will roll in kubectl carousel rotation plan", func(ctx SpecContext) {
		out, err := kubectlCarousel(ctx, "rotation", "plan", c.Name, "-n", c.Namespace)
		Expect(err).NotTo(HaveOccurred())
		Expect(out).To(ContainSubstring("pool-a (InPlace): 1 node(s): " + nodeName))
		Expect(out).To(ContainSubstring("1 node(s) in no worker pool, which no phase rolls and which hold complete-ca-rotation while online: bare-1"),
			"its carousel.dev/pool label names a pool the Cluster does not have")
	})

	// adminKubeconfig is what kubectl carousel kubeconfig --name test
	// prints, and its certificate.
	adminKubeconfig := func(ctx context.Context) (*rest.Config, *x509.Certificate) {
		GinkgoHelper()
		out, err := kubectlCarousel(ctx, "kubeconfig", c.Name, "-n", c.Namespace, "--ttl", "30m", "--name", "test")
		Expect(err).NotTo(HaveOccurred())
		cfg, err := clientcmd.RESTConfigFromKubeConfig([]byte(out))
		Expect(err).NotTo(HaveOccurred())
		certs, err := pki.ParseCertificates(cfg.CertData)
		Expect(err).NotTo(HaveOccurred())
		return cfg, certs[0]
	}

	It("hands out a short-lived admin kubeconfig with kubectl carousel", func(ctx SpecContext) {
		cfg, cert := adminKubeconfig(ctx)
		Expect(cert.Subject.CommonName).To(Equal("carousel:admin:test"))
		Expect(cert.NotAfter.Sub(cert.NotBefore)).To(Equal(30*time.Minute + pki.Backdate))
		Eventually(func() error {
			_, err := kubernetes.NewForConfigOrDie(cfg).CoreV1().Namespaces().Get(ctx, "kube-system", metav1.GetOptions{})
			return err
		}).Should(Succeed(), "the managed API server accepts it")

		By("writing it into a new file only its owner may read")
		file := filepath.Join(GinkgoT().TempDir(), "test.kubeconfig")
		_, err := kubectlCarousel(ctx, "kubeconfig", c.Name, "-n", c.Namespace, "--ttl", "30m", "--name", "test", "--output-file", file)
		Expect(err).NotTo(HaveOccurred())
		info, err := os.Stat(file)
		Expect(err).NotTo(HaveOccurred())
		Expect(info.Mode().Perm()).To(Equal(os.FileMode(0o600)))
		written, err := clientcmd.BuildConfigFromFlags("", file)
		Expect(err).NotTo(HaveOccurred())
		Expect(written.Host).To(Equal(cfg.Host))
	})

	It("renews every node in place during a rotation, once its pool is released, ending on the new client CA", func(ctx SpecContext) {
		By("keeping a copy of a node's credentials, as a node that is off through the rotation keeps them")
		offline := GinkgoT().TempDir()
		Expect(exec.Command("cp", "-a", filepath.Join(agentDir, "pki"), filepath.Join(agentDir, "kubeconfig"), offline).Run()).To(Succeed())
		before := loadCAs(ctx, c)

		By("preparing the control plane without rolling the pool: the node is not asked to renew")
		heldCert := agent.Current().Cert
		Expect(annotate(ctx, getCluster(ctx, key), v1alpha1.OperationStartCARotationWithoutWorkersRollout)).To(Succeed())
		waitForPhaseSlowly(ctx, key, v1alpha1.RotationWaitingForWorkersRollout)
		Expect(getCluster(ctx, key).Status.Conditions).To(ContainElement(And(HaveField("Type", v1alpha1.ConditionControlPlaneReachable),
			HaveField("Status", metav1.ConditionTrue))), "the API server accepted the new client CA before the pool rolled")
		n, err := admin.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
		Expect(err).NotTo(HaveOccurred())
		Expect(n.Annotations).NotTo(HaveKey(v1alpha1.AnnotationRenewCredentials), "a held pool's nodes are not asked to renew")
		Expect(n.Annotations).To(HaveKeyWithValue(v1alpha1.AnnotationNodeAgent, "v0.0.0-integration"), "its node agent marked it before it renewed")
		Expect(agent.Current().Cert.Equal(heldCert)).To(BeTrue(), "the node keeps its client certificate")
		Expect(pki.Verify(heldCert, pki.NewBundle(before[v1alpha1.CARoleClient].Current.Cert), x509.ExtKeyUsageClientAuth, time.Now())).To(Succeed(),
			"from the old client CA")
		_, err = agent.Client().CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
		Expect(err).NotTo(HaveOccurred(), "the held node still talks to its API server on its old credentials")

		By("releasing the pool with rotate-rollout-workers: it rolls in place")
		Expect(annotate(ctx, getCluster(ctx, key), v1alpha1.OperationRotateRolloutWorkersPrefix+"pool-a")).To(Succeed())
		waitForPhaseSlowly(ctx, key, v1alpha1.RotationPrepared)
		prepared := loadCAs(ctx, c)
		nodeCert := agent.Current().Cert
		okOld, okNew := verifiesAgainst(nodeCert, x509.ExtKeyUsageClientAuth, before[v1alpha1.CARoleClient].Current.Cert, prepared[v1alpha1.CARoleClient].Current.Cert)
		Expect([]bool{okOld, okNew}).To(Equal([]bool{false, true}), "the node's client certificate comes from the new client CA")
		n, err = admin.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
		Expect(err).NotTo(HaveOccurred())
		Expect(n.Annotations[v1alpha1.AnnotationClientCertificateIssuer]).To(Equal(hex.EncodeToString(prepared[v1alpha1.CARoleClient].Current.Cert.SubjectKeyId)))
		reachable := getCluster(ctx, key)
		Expect(reachable.Status.Conditions).To(ContainElement(And(HaveField("Type", v1alpha1.ConditionControlPlaneReachable),
			HaveField("Status", metav1.ConditionTrue))), "Prepared was observed: the API server accepted the new client CA")

		By("the old-CA usage gate names the node without a node agent, by the certificate Carousel signed its kubelet, until the Node goes")
		Expect(bare.Heartbeat(ctx)).To(Succeed(), "a node that is online")
		Eventually(func(g Gomega) {
			u := getCluster(ctx, key).CARotation().OldCAUsage
			g.Expect(u).NotTo(BeNil())
			g.Expect(u.Dependents).To(ContainElement(And(HaveField("Kind", v1alpha1.OldCADependentNode), HaveField("Name", "bare-1"),
				HaveField("Message", ContainSubstring("no node agent reports its kubelet's client certificate, and the last one Carousel signed it (X509SHA256="+
					pki.Fingerprint(bare.Manager.Current().Cert)[:16])))))
		}).Should(Succeed())
		By("renewing that node's client certificate, now from the new client CA: the gate still names it, for nothing moved its trust to the new cluster CA")
		Expect(bare.Manager.Refresh(ctx, "moved", 0, time.Minute)).To(Succeed())
		Expect(pki.Verify(bare.Manager.Current().Cert, pki.NewBundle(prepared[v1alpha1.CARoleClient].Current.Cert), x509.ExtKeyUsageClientAuth, time.Now())).To(Succeed())
		Eventually(func(g Gomega) {
			u := getCluster(ctx, key).CARotation().OldCAUsage
			g.Expect(u).NotTo(BeNil())
			g.Expect(u.Dependents).To(ContainElement(And(HaveField("Kind", v1alpha1.OldCADependentNode), HaveField("Name", "bare-1"),
				HaveField("Message", ContainSubstring(`its carousel.dev/pool label, "unmanaged", names no worker pool of the Cluster`)))))
		}).Should(Succeed())
		By("labelling it into pool-a after Carousel rolled that pool: the gate still names it, for the pool's rollout did not move it")
		labelled := fmt.Sprintf(`{"metadata":{"labels":{%q:"pool-a"}}}`, v1alpha1.LabelPool)
		_, err = admin.CoreV1().Nodes().Patch(ctx, "bare-1", types.MergePatchType, []byte(labelled), metav1.PatchOptions{})
		Expect(err).NotTo(HaveOccurred())
		Expect(annotate(ctx, getCluster(ctx, key), v1alpha1.OperationReconcile)).To(Succeed())
		Eventually(func(g Gomega) {
			u := getCluster(ctx, key).CARotation().OldCAUsage
			g.Expect(u).NotTo(BeNil())
			g.Expect(u.Dependents).To(ContainElement(And(HaveField("Kind", v1alpha1.OldCADependentNode), HaveField("Name", "bare-1"),
				HaveField("Message", ContainSubstring("its worker pool pool-a rolled without it")))))
		}).Should(Succeed())
		// Decommissioned: the gate, which reads Nodes that only a person
		// changes once a minute, reads them at once on a reconcile.
		Expect(admin.CoreV1().Nodes().Delete(ctx, "bare-1", metav1.DeleteOptions{})).To(Succeed())
		Expect(annotate(ctx, getCluster(ctx, key), v1alpha1.OperationReconcile)).To(Succeed())

		By("taking a new admin kubeconfig, from the new client CA: the old-CA usage gate names the one from before until then")
		Eventually(func(g Gomega) {
			u := getCluster(ctx, key).CARotation().OldCAUsage
			g.Expect(u).NotTo(BeNil())
			g.Expect(u.Dependents).To(ConsistOf(And(HaveField("Kind", v1alpha1.OldCADependentKubeconfig), HaveField("Name", "carousel:admin:test"))))
		}).Should(Succeed())
		_, adminCert := adminKubeconfig(ctx)
		Expect(pki.Verify(adminCert, pki.NewBundle(prepared[v1alpha1.CARoleClient].Current.Cert), x509.ExtKeyUsageClientAuth, time.Now())).To(Succeed(),
			"signed by the new client CA")
		Eventually(func(g Gomega) {
			u := getCluster(ctx, key).CARotation().OldCAUsage
			g.Expect(u).NotTo(BeNil())
			g.Expect(u.Total).To(BeZero(), "%+v", u.Dependents)
		}).Should(Succeed(), "the new kubeconfig moved the user test to the new client CA")

		Expect(annotate(ctx, getCluster(ctx, key), v1alpha1.OperationCompleteCARotation)).To(Succeed())
		waitForPhaseSlowly(ctx, key, v1alpha1.RotationCompleted)
		kc, err := clientcmd.LoadFromFile(filepath.Join(agentDir, "kubeconfig"))
		Expect(err).NotTo(HaveOccurred())
		trust, err := pki.ParseBundle(kc.Clusters["default"].CertificateAuthorityData)
		Expect(err).NotTo(HaveOccurred())
		Expect(kit.Fingerprints(trust)).To(Equal([]string{pki.Fingerprint(prepared[v1alpha1.CARoleCluster].Current.Cert)}), "the node dropped the old cluster CA")
		rotatedCfg, err := framework.RESTConfig(ctx, k8s, c, credentials.CertAdmin) // admin trusts the old cluster CA only
		Expect(err).NotTo(HaveOccurred())
		Eventually(expectPublishedTrust).WithContext(ctx).WithArguments(kubernetes.NewForConfigOrDie(rotatedCfg), c).WithTimeout(time.Minute).Should(Succeed(),
			"cluster-info, its signatures and carousel-node-trust follow the bundles")
		_, err = agent.Client().CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
		Expect(err).NotTo(HaveOccurred(), "the node still talks to its API server")

		By("bringing back the node that was off: its old credentials are refused, so it bootstraps again")
		s := &corev1.Secret{}
		Expect(k8s.Get(ctx, client.ObjectKey{Namespace: c.Namespace, Name: credentials.BootstrapKubeconfigSecretName(c.Name)}, s)).To(Succeed())
		Expect(os.WriteFile(filepath.Join(offline, "bootstrap-kubeconfig"), s.Data[v1alpha1.DataKeyKubeconfig], 0o600)).To(Succeed())
		returning := nodeagent.NewManager(nodeagent.Config{NodeName: nodeName, CertDir: filepath.Join(offline, "pki"),
			KubeconfigPath: filepath.Join(offline, "kubeconfig"), BootstrapKubeconfigPath: filepath.Join(offline, "bootstrap-kubeconfig"),
			Clock: clock.RealClock{}, StartupTimeout: time.Minute})
		Expect(returning.Start(ctx)).To(Succeed())
		Expect(pki.Verify(returning.Current().Cert, pki.NewBundle(prepared[v1alpha1.CARoleClient].Current.Cert), x509.ExtKeyUsageClientAuth, time.Now())).To(Succeed())
	})

	It("issues, signs and hands out bootstrap tokens while the managed cluster refuses one of Carousel's bindings, and makes again one bound to another role", func(ctx SpecContext) {
		cfg, err := framework.RESTConfig(ctx, k8s, c, credentials.CertAdmin) // trusts the cluster CA of now
		Expect(err).NotTo(HaveOccurred())
		admin := kubernetes.NewForConfigOrDie(cfg)

		By("refusing every write of the RoleBinding that lets anyone read cluster-info with an admission policy, then deleting it")
		refuse, binding := denyingPolicy("refuse-cluster-info-binding", rbacv1.GroupName, "rolebindings", []string{bootstrap.ClusterInfoRole}, "refused by the test",
			admissionregistrationv1.Create, admissionregistrationv1.Update)
		policies := admin.AdmissionregistrationV1()
		_, err = policies.ValidatingAdmissionPolicies().Create(ctx, refuse, metav1.CreateOptions{})
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(func(ctx context.Context) {
			_ = policies.ValidatingAdmissionPolicyBindings().Delete(ctx, binding.Name, metav1.DeleteOptions{})
			_ = policies.ValidatingAdmissionPolicies().Delete(ctx, refuse.Name, metav1.DeleteOptions{})
		})
		_, err = policies.ValidatingAdmissionPolicyBindings().Create(ctx, binding, metav1.CreateOptions{})
		Expect(err).NotTo(HaveOccurred())
		roleBindings := admin.RbacV1().RoleBindings(metav1.NamespacePublic)
		Eventually(func(ctx context.Context) error {
			rb, err := roleBindings.Get(ctx, bootstrap.ClusterInfoRole, metav1.GetOptions{})
			if err != nil {
				return err
			}
			metav1.SetMetaDataLabel(&rb.ObjectMeta, "refused", "probe")
			_, err = roleBindings.Update(ctx, rb, metav1.UpdateOptions{})
			return err
		}).WithContext(ctx).WithTimeout(30 * time.Second).WithPolling(200 * time.Millisecond).Should(MatchError(ContainSubstring("refused by the test")))
		Expect(roleBindings.Delete(ctx, bootstrap.ClusterInfoRole, metav1.DeleteOptions{})).To(Succeed())

		By("deleting the bootstrap tokens: Carousel issues a new one, signs it in cluster-info and hands it out, though the binding is refused")
		tokens := admin.CoreV1().Secrets(metav1.NamespaceSystem)
		Expect(tokens.DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: v1alpha1.LabelBootstrapToken + "=" + c.Name})).To(Succeed())
		Eventually(expectPublishedTrust).WithContext(ctx).WithArguments(admin, c).WithTimeout(2*time.Minute).WithPolling(time.Second).Should(Succeed(),
			"a new token, signed in cluster-info")
		Eventually(func(g Gomega) {
			live, err := tokens.List(ctx, metav1.ListOptions{LabelSelector: v1alpha1.LabelBootstrapToken + "=" + c.Name})
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(live.Items).To(HaveLen(1))
			s := &corev1.Secret{}
			g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: c.Namespace, Name: credentials.BootstrapKubeconfigSecretName(c.Name)}, s)).To(Succeed())
			kc, err := clientcmd.Load(s.Data[v1alpha1.DataKeyKubeconfig])
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(kc.AuthInfos).To(HaveEach(HaveField("Token", HavePrefix(string(live.Items[0].Data[bootstrapapi.BootstrapTokenIDKey])+"."))))
		}).WithContext(ctx).WithTimeout(time.Minute).WithPolling(time.Second).Should(Succeed(), "the bootstrap kubeconfig hands out the new token")
		_, err = roleBindings.Get(ctx, bootstrap.ClusterInfoRole, metav1.GetOptions{})
		Expect(apierrors.IsNotFound(err)).To(BeTrue(), "the binding is still refused: %v", err)

		By("lifting the policy: Carousel writes the binding again")
		Expect(policies.ValidatingAdmissionPolicyBindings().Delete(ctx, binding.Name, metav1.DeleteOptions{})).To(Succeed())
		Expect(policies.ValidatingAdmissionPolicies().Delete(ctx, refuse.Name, metav1.DeleteOptions{})).To(Succeed())
		Eventually(func(ctx context.Context) error {
			_, err := roleBindings.Get(ctx, bootstrap.ClusterInfoRole, metav1.GetOptions{})
			return err
		}).WithContext(ctx).WithTimeout(2 * time.Minute).WithPolling(time.Second).Should(Succeed())

		By("binding one of Carousel's ClusterRoleBindings to another role, whose roleRef the API server will not change: Carousel makes it again")
		bindings := admin.RbacV1().ClusterRoleBindings()
		ours, err := bindings.Get(ctx, bootstrap.BindingNodeBootstrapper, metav1.GetOptions{})
		Expect(err).NotTo(HaveOccurred())
		Expect(bindings.Delete(ctx, ours.Name, metav1.DeleteOptions{})).To(Succeed())
		taken := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: ours.Name}, Subjects: ours.Subjects,
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "view"}}
		_, err = bindings.Create(ctx, taken, metav1.CreateOptions{})
		Expect(err).NotTo(HaveOccurred())
		Eventually(func(g Gomega) {
			got, err := bindings.Get(ctx, ours.Name, metav1.GetOptions{})
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(got.RoleRef).To(Equal(ours.RoleRef))
		}).WithContext(ctx).WithTimeout(2 * time.Minute).WithPolling(time.Second).Should(Succeed())
	})

	// Last: its etcd stops answering for a while.
	It("asks a managed API server whose storage stopped answering a probe before anything else, and goes on once it answers", func(ctx SpecContext) {
		connections := &clustercache.Cache{Management: k8s, Scheme: scheme.New(), RequestTimeout: 4 * time.Second}
		DeferCleanup(connections.Disconnect, key)
		conn, err := connections.Connect(ctx, getCluster(ctx, key))
		Expect(err).NotTo(HaveOccurred())
		// A read the API server takes from etcd (a list may come from its watch cache).
		readBinding := func(ctx context.Context) error {
			return conn.Client.Get(ctx, client.ObjectKey{Name: bootstrap.BindingNodeBootstrapper}, &rbacv1.ClusterRoleBinding{})
		}
		Expect(readBinding(ctx)).To(Succeed())

		By("pausing etcd: the request that finds it gives up after its timeout")
		resume, err := cp.PauseEtcd()
		DeferCleanup(resume)
		Expect(err).NotTo(HaveOccurred())
		err = readBinding(ctx)
		Expect(err).To(HaveOccurred())
		Expect(err).NotTo(MatchError(clustercache.ErrNotAnswering))

		By("the next request waits for a probe, which is not answered either; the ones after it fail without one")
		Expect(readBinding(ctx)).To(MatchError(clustercache.ErrNotAnswering))
		Expect(readBinding(ctx)).To(And(MatchError(clustercache.ErrNotAnswering), MatchError(ContainSubstring("was not answered either"))))

		By("resuming etcd: once a probe is answered the requests go through again")
		resume()
		Eventually(readBinding).WithContext(ctx).WithTimeout(time.Minute).WithPolling(time.Second).Should(Succeed())
	})
})

// signedKubeletCertificates is the Cluster's record of the kubelet client
// certificates Carousel signed.
func signedKubeletCertificates(ctx context.Context, c *v1alpha1.Cluster) []oldca.IssuedCertificate {
	GinkgoHelper()
	cm := &corev1.ConfigMap{}
	Expect(k8s.Get(ctx, client.ObjectKey{Namespace: c.Namespace, Name: credentials.KubeletCertificatesConfigMapName(c.Name)}, cm)).To(Succeed())
	record, err := oldca.ReadKubeletCertificates(cm.Data, cm.BinaryData)
	Expect(err).NotTo(HaveOccurred())
	return record.Signed
}

// expectPublishedTrust checks what Carousel publishes for nodes in the
// managed cluster against the management cluster's bundles:
// kube-public/cluster-info with the cluster bundle and exactly one valid JWS
// signature per live bootstrap token, and kube-system/carousel-node-trust
// with the cluster and kubelet bundles.
func expectPublishedTrust(g Gomega, ctx context.Context, admin kubernetes.Interface, c *v1alpha1.Cluster) {
	clusterBundle, kubeletBundle := string(loadBundle(ctx, c, v1alpha1.CARoleCluster).PEM()), string(loadBundle(ctx, c, v1alpha1.CARoleKubelet).PEM())
	secrets, err := admin.CoreV1().Secrets(metav1.NamespaceSystem).List(ctx, metav1.ListOptions{LabelSelector: v1alpha1.LabelBootstrapToken + "=" + c.Name})
	g.Expect(err).NotTo(HaveOccurred())
	var tokens []bootstrap.Token
	for i := range secrets.Items {
		t, err := bootstrap.ParseTokenSecret(c.Name, &secrets.Items[i])
		g.Expect(err).NotTo(HaveOccurred())
		tokens = append(tokens, t)
	}
	tokens = bootstrap.Live(tokens, time.Now())
	g.Expect(tokens).NotTo(BeEmpty())

	info, err := admin.CoreV1().ConfigMaps(metav1.NamespacePublic).Get(ctx, bootstrapapi.ConfigMapClusterInfo, metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	kubeconfig := info.Data[bootstrapapi.KubeConfigKey]
	kc, err := clientcmd.Load([]byte(kubeconfig))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(kc.Clusters[""].CertificateAuthorityData)).To(Equal(clusterBundle))
	wantKeys := []string{bootstrapapi.KubeConfigKey}
	for _, t := range tokens {
		key := bootstrapapi.JWSSignatureKeyPrefix + t.ID
		wantKeys = append(wantKeys, key)
		g.Expect(jws.DetachedTokenIsValid(info.Data[key], kubeconfig, t.ID, t.Secret)).To(BeTrue(), "the signature of token %s", t.ID)
	}
	g.Expect(slices.Collect(maps.Keys(info.Data))).To(ConsistOf(wantKeys))

	trust, err := admin.CoreV1().ConfigMaps(metav1.NamespaceSystem).Get(ctx, bootstrap.NodeTrustConfigMap, metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(trust.Data).To(Equal(map[string]string{bootstrap.NodeTrustKeyClusterCA: clusterBundle, bootstrap.NodeTrustKeyKubeletCA: kubeletBundle}))
}

// publishedVersions are the resource versions of cluster-info and
// carousel-node-trust.
func publishedVersions(ctx context.Context, admin kubernetes.Interface) []string {
	GinkgoHelper()
	info, err := admin.CoreV1().ConfigMaps(metav1.NamespacePublic).Get(ctx, bootstrapapi.ConfigMapClusterInfo, metav1.GetOptions{})
	Expect(err).NotTo(HaveOccurred())
	trust, err := admin.CoreV1().ConfigMaps(metav1.NamespaceSystem).Get(ctx, bootstrap.NodeTrustConfigMap, metav1.GetOptions{})
	Expect(err).NotTo(HaveOccurred())
	return []string{info.ResourceVersion, trust.ResourceVersion}
}

// stderrf logs with a timestamp to the test's standard error, which go test
// shows when the package fails.
func stderrf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, time.Now().Format("15:04:05.000 ")+format+"\n", args...)
}

// waitForPhaseSlowly waits for a phase that takes API-server restarts to
// reach, and shows the conditions when it does not come.
func waitForPhaseSlowly(ctx context.Context, key client.ObjectKey, phase v1alpha1.CARotationPhase) {
	GinkgoHelper()
	kit.WaitForPhase(ctx, k8s, key, phase, kit.Wait{Timeout: 3 * time.Minute, Polling: time.Second})
}
