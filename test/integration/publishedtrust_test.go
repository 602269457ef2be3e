package integration

import (
	"context"
	"os"
	"sync/atomic"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	apiregistrationv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
	"github.com/carousel-dev/carousel/pkg/credentials"
	"github.com/carousel-dev/carousel/pkg/evidence"
	"github.com/carousel-dev/carousel/pkg/pki"
	"github.com/carousel-dev/carousel/pkg/scheme"
	"github.com/carousel-dev/carousel/test/framework"
	"github.com/carousel-dev/carousel/test/framework/kit"
)

// The managed control plane here has no kube-controller-manager in the
// platform: the spec starts and restarts it itself, to hold each phase on
// what the root-CA publisher has (not) written.
var _ = Describe("The trust published in the managed cluster: kube-root-ca.crt and APIService caBundles", Ordered, func() {
	var (
		c      *v1alpha1.Cluster
		key    client.ObjectKey
		cp     *framework.ManagedControlPlane
		admin  kubernetes.Interface
		writes atomic.Int64
		// managed reads and writes APIServices in the managed cluster.
		managed client.Client
	)
	// apiService is the APIService the specs follow; otherAPIService is
	// there while the setup checks the events of both.
	const apiService, otherAPIService = "v1alpha1.wardle.example.com", "v1beta1.wardle.example.com"

	// apiServiceBundleOf returns the fingerprints of the named APIService's
	// caBundle, nil while it skips verification.
	apiServiceBundleOf := func(ctx context.Context, name string) []string {
		s := &apiregistrationv1.APIService{}
		Expect(managed.Get(ctx, client.ObjectKey{Name: name}, s)).To(Succeed())
		if s.Spec.InsecureSkipTLSVerify {
			return nil
		}
		b, err := pki.ParseBundle(s.Spec.CABundle)
		if err != nil {
			return nil
		}
		return kit.Fingerprints(b)
	}
	apiServiceBundle := func(ctx context.Context) []string { return apiServiceBundleOf(ctx, apiService) }

	BeforeAll(func(ctx SpecContext) {
		ns := newNamespace(ctx)
		startControllers(ns, &writes)
		port, err := framework.FreePort()
		Expect(err).NotTo(HaveOccurred())
		cp = &framework.ManagedControlPlane{BinDir: os.Getenv("KUBEBUILDER_ASSETS"), Dir: GinkgoT().TempDir(), APIServerPort: port}
		c = &v1alpha1.Cluster{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "root-ca"},
			Spec: v1alpha1.ClusterSpec{KubernetesVersion: "1.36.3", ControlPlane: v1alpha1.ControlPlaneSpec{Endpoint: cp.Endpoint()},
				// Long enough to be seen waiting; the spec shortens it.
				CARotation: v1alpha1.CARotationSettings{WorkloadTrustReload: &metav1.Duration{Duration: time.Hour}}},
		}
		Expect(k8s.Create(ctx, c)).To(Succeed())
		key = client.ObjectKeyFromObject(c)
		c = waitForReady(ctx, key)
		cfg := runControlPlane(ctx, c, cp)
		admin = kubernetes.NewForConfigOrDie(cfg)

		By("registering an aggregated API whose server certificate the metrics-server CA signs")
		managed, err = client.New(cfg, client.Options{Scheme: scheme.New()})
		Expect(err).NotTo(HaveOccurred())
		for _, version := range []string{"v1alpha1", "v1beta1"} {
			Expect(managed.Create(ctx, &apiregistrationv1.APIService{
				ObjectMeta: metav1.ObjectMeta{Name: version + ".wardle.example.com", Labels: map[string]string{v1alpha1.LabelCABundle: string(v1alpha1.CARoleMetricsServer)}},
				Spec: apiregistrationv1.APIServiceSpec{Group: "wardle.example.com", Version: version, GroupPriorityMinimum: 1000, VersionPriority: 15,
					Service: &apiregistrationv1.ServiceReference{Namespace: metav1.NamespaceSystem, Name: "metrics-server"}, InsecureSkipTLSVerify: true},
			})).To(Succeed())
		}
		for _, name := range []string{apiService, otherAPIService} {
			// A second resync (a minute) writes an APIService a pass missed.
			Eventually(apiServiceBundleOf).WithContext(ctx).WithArguments(name).WithTimeout(2*time.Minute).WithPolling(time.Second).
				Should(Equal(kit.Fingerprints(loadBundle(ctx, c, v1alpha1.CARoleMetricsServer))), "Carousel writes the metrics-server bundle into %s, and verification back on", name)
		}

		By("recording an event for each APIService written, related to it")
		Eventually(func(g Gomega) {
			var list eventsv1.EventList
			g.Expect(k8s.List(ctx, &list, client.InNamespace(c.Namespace))).To(Succeed())
			var notes, related []string
			for _, e := range list.Items {
				if e.Regarding.Name == c.Name && e.Reason == v1alpha1.EventAPIServiceCABundleUpdated {
					notes = append(notes, e.Note)
					if e.Related != nil {
						related = append(related, e.Related.Name)
					}
				}
			}
			g.Expect(notes).To(ConsistOf(ContainSubstring("APIService "+apiService+" "), ContainSubstring("APIService "+otherAPIService+" ")))
			g.Expect(related).To(ConsistOf(apiService, otherAPIService))
		}).WithContext(ctx).WithTimeout(30*time.Second).WithPolling(time.Second).Should(Succeed(),
			"the second event is not folded into the first one's series")
		By("unlabelling the other APIService: it keeps the metrics-server CA Carousel wrote, which nothing writes any more")
		Expect(setAPIServiceLabel(ctx, managed, otherAPIService, "")).To(Succeed())
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
		}).WithContext(ctx).WithTimeout(3*time.Minute).WithPolling(time.Second).Should(Succeed(), "Finalizing restarts etcd and the API server twice")
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

	It("holds Preparing until kube-root-ca.crt carries both cluster CAs in every namespace, then until the APIService trusts both metrics-server CAs, "+
		"then for as long as pods are given to reload kube-root-ca.crt", func(ctx SpecContext) {
		By("freezing the APIService with an admission policy of the managed cluster, which refuses every update of it")
		freeze, freezeBinding := denyingPolicy("freeze-"+apiService, apiregistrationv1.GroupName, "apiservices", []string{apiService}, "frozen by the test",
			admissionregistrationv1.Update)
		Expect(managed.Create(ctx, freeze)).To(Succeed())
		Expect(managed.Create(ctx, freezeBinding)).To(Succeed())
		Eventually(func(ctx context.Context) error {
			s := &apiregistrationv1.APIService{}
			if err := managed.Get(ctx, client.ObjectKey{Name: apiService}, s); err != nil {
				return err
			}
			s.Labels["frozen"] = "probe"
			return managed.Update(ctx, s)
		}).WithContext(ctx).WithTimeout(30 * time.Second).WithPolling(200 * time.Millisecond).Should(MatchError(ContainSubstring("frozen by the test")))

		Expect(annotate(ctx, getCluster(ctx, key), v1alpha1.OperationStartCARotation)).To(Succeed())
		expectWaitingForKubeRootCA(ctx, v1alpha1.RotationPreparing, "both cluster CAs")

		By("starting the root-CA publisher on the bundle the platform mounted")
		Expect(cp.WriteCredentials(ctx, k8s, c)).To(Succeed())
		Expect(cp.StartControllerManager()).To(Succeed())
		Eventually(func(g Gomega) {
			got := getCluster(ctx, key)
			g.Expect(got.CARotationPhase()).To(Equal(v1alpha1.RotationPreparing))
			g.Expect(got.Status.Conditions).To(ContainElement(And(
				HaveField("Type", v1alpha1.ConditionCARotation),
				HaveField("Reason", string(v1alpha1.ReasonWaitingForAPIServices)),
				HaveField("Message", ContainSubstring("2 APIService(s) behind: "+apiService+", "+otherAPIService+evidence.NotLabelled)),
			)))
		}).WithContext(ctx).WithTimeout(2*time.Minute).WithPolling(time.Second).Should(Succeed(),
			"the rotation waits for the APIService the tenant froze, and for the one that pins the old metrics-server CA unlabelled, and names them")
		Consistently(func(ctx context.Context) v1alpha1.CARotationPhase { return getCluster(ctx, key).CARotationPhase() }).
			WithContext(ctx).WithTimeout(5 * time.Second).WithPolling(time.Second).Should(Equal(v1alpha1.RotationPreparing))

		By("thawing the APIService: Carousel writes both metrics-server CAs and gives pods an hour to reload kube-root-ca.crt")
		Expect(managed.Delete(ctx, freezeBinding)).To(Succeed())
		Expect(managed.Delete(ctx, freeze)).To(Succeed())
		Expect(setAPIServiceLabel(ctx, managed, otherAPIService, string(v1alpha1.CARoleMetricsServer))).To(Succeed())
		var published time.Time
		Eventually(func(g Gomega) {
			got := getCluster(ctx, key)
			g.Expect(got.CARotationPhase()).To(Equal(v1alpha1.RotationPreparing))
			g.Expect(got.CARotation().KubeRootCAPublishedTime).NotTo(BeNil())
			published = got.CARotation().KubeRootCAPublishedTime.Time
			g.Expect(got.Status.Conditions).To(ContainElement(And(
				HaveField("Type", v1alpha1.ConditionCARotation),
				HaveField("Reason", string(v1alpha1.ReasonWaitingForWorkloadTrust)),
				HaveField("Message", ContainSubstring("giving pods until "+published.Add(time.Hour).UTC().Format(time.RFC3339)+" to reload kube-root-ca.crt")),
			)))
		}).WithContext(ctx).WithTimeout(2 * time.Minute).WithPolling(time.Second).Should(Succeed())
		before := writes.Load()
		Consistently(func(ctx context.Context) v1alpha1.CARotationPhase { return getCluster(ctx, key).CARotationPhase() }).
			WithContext(ctx).WithTimeout(5 * time.Second).WithPolling(time.Second).Should(Equal(v1alpha1.RotationPreparing))
		Expect(writes.Load()).To(Equal(before), "waiting writes nothing")

		By("giving pods no time at all: Prepared")
		got := getCluster(ctx, key)
		patch := client.MergeFrom(got.DeepCopy())
		got.Spec.CARotation.WorkloadTrustReload = &metav1.Duration{}
		Expect(k8s.Patch(ctx, got, patch)).To(Succeed())
		waitForPhase(ctx, key, v1alpha1.RotationPrepared)
		Expect(getCluster(ctx, key).CARotation().KubeRootCAPublishedTime.Time).To(Equal(published), "recorded once")
		cas := loadCAs(ctx, c)[v1alpha1.CARoleCluster]
		expectPublished(ctx, pki.NewBundle(cas.Previous.Cert, cas.Current.Cert))
		metrics := loadCAs(ctx, c)[v1alpha1.CARoleMetricsServer]
		for _, name := range []string{apiService, otherAPIService} {
			Expect(apiServiceBundleOf(ctx, name)).To(Equal(kit.Fingerprints(pki.NewBundle(metrics.Previous.Cert, metrics.Current.Cert))),
				"the aggregator trusts both metrics-server CAs before Finalizing moves the server certificate")
		}
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
		managed, err = client.New(cfg, client.Options{Scheme: scheme.New()})
		Expect(err).NotTo(HaveOccurred())
		Expect(apiServiceBundle(ctx)).To(Equal([]string{pki.Fingerprint(loadCAs(ctx, c)[v1alpha1.CARoleMetricsServer].Current.Cert)}),
			"the aggregator trusts the new metrics-server CA alone")
	})

	It("starts the time pods get to reload kube-root-ca.crt while a worker pool still rolls", func(ctx SpecContext) {
		got := getCluster(ctx, key)
		patch := client.MergeFrom(got.DeepCopy())
		got.Spec.CARotation.WorkloadTrustReload = &metav1.Duration{Duration: time.Hour}
		got.Spec.Workers = []v1alpha1.WorkerPool{{Name: "by-hand", RolloutStrategy: v1alpha1.RolloutManual}}
		Expect(k8s.Patch(ctx, got, patch)).To(Succeed())
		Expect(annotate(ctx, getCluster(ctx, key), v1alpha1.OperationStartCARotation)).To(Succeed())
		waitingForThePool := func(g Gomega, got *v1alpha1.Cluster) {
			g.Expect(got.CARotationPhase()).To(Equal(v1alpha1.RotationPreparing))
			g.Expect(got.Status.Conditions).To(ContainElement(And(HaveField("Type", v1alpha1.ConditionCARotation),
				HaveField("Reason", string(v1alpha1.ReasonWaitingForWorkers)))))
		}
		Eventually(func(g Gomega) { waitingForThePool(g, getCluster(ctx, key)) }).WithContext(ctx).WithTimeout(3 * time.Minute).WithPolling(time.Second).Should(Succeed())
		Consistently(func(g Gomega) {
			got := getCluster(ctx, key)
			waitingForThePool(g, got)
			g.Expect(got.CARotation().KubeRootCAPublishedTime).To(BeNil())
		}).WithContext(ctx).WithTimeout(5*time.Second).WithPolling(time.Second).Should(Succeed(),
			"kube-controller-manager still publishes the new cluster CA alone: nothing to record")

		By("restarting kube-controller-manager on both cluster CAs while the pool is still to roll")
		Expect(cp.WriteCredentials(ctx, k8s, c)).To(Succeed())
		cp.StopControllerManager()
		Expect(cp.StartControllerManager()).To(Succeed())
		var published time.Time
		Eventually(func(g Gomega) {
			got := getCluster(ctx, key)
			waitingForThePool(g, got)
			g.Expect(got.CARotation().KubeRootCAPublishedTime).NotTo(BeNil())
			published = got.CARotation().KubeRootCAPublishedTime.Time
		}).WithContext(ctx).WithTimeout(2*time.Minute).WithPolling(time.Second).Should(Succeed(), "recorded while the pool rolls")

		By("reporting the pool: the pods' time counts from the publication, not from now")
		Expect(annotate(ctx, getCluster(ctx, key), v1alpha1.OperationRolloutWorkersPrefix+"by-hand")).To(Succeed())
		Eventually(func(g Gomega) {
			g.Expect(getCluster(ctx, key).Status.Conditions).To(ContainElement(And(HaveField("Type", v1alpha1.ConditionCARotation),
				HaveField("Reason", string(v1alpha1.ReasonWaitingForWorkloadTrust)),
				HaveField("Message", ContainSubstring("giving pods until "+published.Add(time.Hour).UTC().Format(time.RFC3339))))))
		}).WithContext(ctx).WithTimeout(time.Minute).WithPolling(time.Second).Should(Succeed())
	})
})

// setAPIServiceLabel sets, or with value "" removes, the label
// carousel.dev/ca-bundle of the managed cluster's APIService name.
func setAPIServiceLabel(ctx context.Context, managed client.Client, name, value string) error {
	s := &apiregistrationv1.APIService{}
	if err := managed.Get(ctx, client.ObjectKey{Name: name}, s); err != nil {
		return err
	}
	patch := client.MergeFrom(s.DeepCopy())
	if value == "" {
		delete(s.Labels, v1alpha1.LabelCABundle)
	} else {
		metav1.SetMetaDataLabel(&s.ObjectMeta, v1alpha1.LabelCABundle, value)
	}
	return managed.Patch(ctx, s, patch)
}
