package integration

import (
	"context"
	"os"
	"sync/atomic"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
	"github.com/carousel-dev/carousel/pkg/credentials"
	"github.com/carousel-dev/carousel/pkg/evidence"
	"github.com/carousel-dev/carousel/pkg/pki"
	"github.com/carousel-dev/carousel/test/framework"
	"github.com/carousel-dev/carousel/test/framework/kit"
)

// The managed control plane here has no kube-controller-manager in the
// platform: the spec starts and restarts it itself, to hold each phase on
// what the root-CA publisher has (not) written.
var _ = Describe("The kube-root-ca.crt gate", Ordered, func() {
	var (
		c      *v1alpha1.Cluster
		key    client.ObjectKey
		cp     *framework.ManagedControlPlane
		admin  kubernetes.Interface
		writes atomic.Int64
	)

	BeforeAll(func(ctx SpecContext) {
		ns := newNamespace(ctx)
		startControllers(ns, &writes)
		port, err := framework.FreePort()
		Expect(err).NotTo(HaveOccurred())
		cp = &framework.ManagedControlPlane{BinDir: os.Getenv("KUBEBUILDER_ASSETS"), Dir: GinkgoT().TempDir(), APIServerPort: port}
		c = &v1alpha1.Cluster{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "root-ca"},
			Spec:       v1alpha1.ClusterSpec{KubernetesVersion: "1.36.3", ControlPlane: v1alpha1.ControlPlaneSpec{Endpoint: cp.Endpoint()}},
		}
		Expect(k8s.Create(ctx, c)).To(Succeed())
		key = client.ObjectKeyFromObject(c)
		c = waitForReady(ctx, key)
		platform := &framework.Platform{Client: k8s, Cluster: c, ControlPlane: cp, Logf: stderrf}
		Expect(platform.CreateWorkloads(ctx)).To(Succeed())
		Expect(cp.WriteCredentials(ctx, k8s, c)).To(Succeed())
		Expect(cp.Start(ctx)).To(Succeed())
		DeferCleanup(cp.Stop)
		platformCtx, stopPlatform := context.WithCancel(context.Background())
		DeferCleanup(stopPlatform)
		go platform.Run(platformCtx, 100*time.Millisecond)
		Eventually(platform.Settled).WithContext(ctx).WithTimeout(2*time.Minute).Should(BeTrue())
		cfg, err := framework.RESTConfig(ctx, k8s, c, credentials.CertAdmin)
		Expect(err).NotTo(HaveOccurred())
		admin = kubernetes.NewForConfigOrDie(cfg)
	})

	// expectWaitingForKubeRootCA waits until the rotation, still in phase,
	// names kube-root-ca.crt and the managed cluster's namespaces as what it
	// waits for.
	expectWaitingForKubeRootCA := func(ctx context.Context, phase v1alpha1.CARotationPhase, carries string) {
		GinkgoHelper()
		Eventually(func(g Gomega) {
			got := getCluster(ctx, key)
			g.Expect(got.CARotationPhase()).To(Equal(phase))
			g.Expect(got.Status.Conditions).To(ContainElement(And(
				HaveField("Type", v1alpha1.ConditionCARotation),
				HaveField("Reason", string(v1alpha1.ReasonWaitingForKubeRootCA)),
				HaveField("Message", And(ContainSubstring("kube-root-ca.crt to carry "+carries), ContainSubstring("4 namespace(s) behind: default, kube-node-lease, kube-public, kube-system"))),
			)))
		}).WithContext(ctx).WithTimeout(3 * time.Minute).WithPolling(time.Second).Should(Succeed(), "Finalizing restarts etcd and the API server twice")
	}

	// expectPublished checks kube-root-ca.crt in every namespace.
	expectPublished := func(ctx context.Context, want pki.Bundle) {
		GinkgoHelper()
		cms, err := admin.CoreV1().ConfigMaps(metav1.NamespaceAll).List(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + evidence.KubeRootCAConfigMap})
		Expect(err).NotTo(HaveOccurred())
		Expect(cms.Items).To(HaveLen(4))
		for _, cm := range cms.Items {
			got, err := pki.ParseBundle([]byte(cm.Data[evidence.KubeRootCAKey]))
			Expect(err).NotTo(HaveOccurred())
			Expect(kit.Fingerprints(got)).To(Equal(kit.Fingerprints(want)), cm.Namespace)
		}
	}

	It("holds Preparing until kube-root-ca.crt carries both cluster CAs in every namespace", func(ctx SpecContext) {
		Expect(annotate(ctx, getCluster(ctx, key), v1alpha1.OperationStartCARotation)).To(Succeed())
		expectWaitingForKubeRootCA(ctx, v1alpha1.RotationPreparing, "both cluster CAs")

		By("starting the root-CA publisher on the bundle the platform mounted")
		Expect(cp.WriteCredentials(ctx, k8s, c)).To(Succeed())
		Expect(cp.StartControllerManager()).To(Succeed())
		waitForPhase(ctx, key, v1alpha1.RotationPrepared)
		cas := loadCAs(ctx, c)[v1alpha1.CARoleCluster]
		expectPublished(ctx, pki.NewBundle(cas.Previous.Cert, cas.Current.Cert))
	})

	It("holds Finalizing until kube-root-ca.crt carries only the new cluster CA", func(ctx SpecContext) {
		Expect(annotate(ctx, getCluster(ctx, key), v1alpha1.OperationCompleteCARotation)).To(Succeed())
		expectWaitingForKubeRootCA(ctx, v1alpha1.RotationFinalizing, "only the new cluster CA")

		By("restarting kube-controller-manager on the new bundle")
		Expect(cp.WriteCredentials(ctx, k8s, c)).To(Succeed())
		cp.StopControllerManager()
		Expect(cp.StartControllerManager()).To(Succeed())
		waitForPhase(ctx, key, v1alpha1.RotationCompleted)
		cfg, err := framework.RESTConfig(ctx, k8s, c, credentials.CertAdmin) // trusts the new cluster CA only
		Expect(err).NotTo(HaveOccurred())
		admin = kubernetes.NewForConfigOrDie(cfg)
		expectPublished(ctx, loadBundle(ctx, c, v1alpha1.CARoleCluster))
		Expect(loadBundle(ctx, c, v1alpha1.CARoleCluster)).To(HaveLen(1))
	})
})
