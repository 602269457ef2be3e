package integration

import (
	"context"
	"io"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
	carouselapply "github.com/carousel-dev/carousel/pkg/client/applyconfiguration/carousel/v1alpha1"
	"github.com/carousel-dev/carousel/pkg/client/clientset/versioned"
	"github.com/carousel-dev/carousel/pkg/client/informers/externalversions"
)

func minimalCluster(ns, name string) *v1alpha1.Cluster {
	return &v1alpha1.Cluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       v1alpha1.ClusterSpec{KubernetesVersion: "1.36.3"},
	}
}

// kubectl runs the test control plane's kubectl as a cluster admin and
// returns its standard output.
func kubectl(args ...string) string {
	GinkgoHelper()
	admin, err := testEnv.AddUser(envtest.User{Name: "kubectl-admin", Groups: []string{"system:masters"}}, nil)
	Expect(err).NotTo(HaveOccurred())
	cmd, err := admin.Kubectl()
	Expect(err).NotTo(HaveOccurred())
	stdout, stderr, err := cmd.Run(args...)
	if err != nil {
		errText, _ := io.ReadAll(stderr)
		Fail("kubectl " + strings.Join(args, " ") + ": " + err.Error() + ": " + string(errText))
	}
	out, err := io.ReadAll(stdout)
	Expect(err).NotTo(HaveOccurred())
	return string(out)
}

var _ = Describe("The Cluster API", func() {
	var ns string
	BeforeEach(func(ctx SpecContext) { ns = newNamespace(ctx) })

	It("fills in the documented defaults of a minimal Cluster", func(ctx SpecContext) {
		c := minimalCluster(ns, "minimal")
		c.Spec.Workers = []v1alpha1.WorkerPool{{Name: "pool-a"}}
		Expect(k8s.Create(ctx, c)).To(Succeed())

		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(c), c)).To(Succeed())
		Expect(c.Spec.Certificates.KeyAlgorithm).To(Equal(v1alpha1.DefaultKeyAlgorithm))
		Expect(c.Spec.Certificates.CAValidity.Duration).To(Equal(v1alpha1.DefaultCAValidity))
		Expect(c.Spec.Certificates.LeafValidity.Duration).To(Equal(v1alpha1.DefaultLeafValidity))
		Expect(c.Spec.KubeletBootstrap.TokenTTL.Duration).To(Equal(v1alpha1.DefaultBootstrapTokenTTL))
		Expect(c.Spec.KubeletBootstrap.CSRApproval.Client).To(Equal(v1alpha1.ApprovalAuto))
		Expect(c.Spec.KubeletBootstrap.CSRApproval.Serving).To(Equal(v1alpha1.ApprovalManual))
		Expect(c.Spec.Workers[0].RolloutStrategy).To(Equal(v1alpha1.RolloutInPlace))
		Expect(v1alpha1.ValidateCluster(c)).To(BeEmpty(), "the schema defaults must pass the Go validation")
	})

	DescribeTable("refuses specs its schema forbids",
		func(ctx SpecContext, mutate func(*v1alpha1.Cluster), wantField string) {
			c := minimalCluster(ns, "bad")
			mutate(c)
			err := k8s.Create(ctx, c)
			Expect(apierrors.IsInvalid(err)).To(BeTrue(), "want Invalid, got %v", err)
			Expect(err.Error()).To(ContainSubstring(wantField))
		},
		Entry("no Kubernetes version", func(c *v1alpha1.Cluster) { c.Spec.KubernetesVersion = "" }, "spec.kubernetesVersion"),
		Entry("a version that is not semver", func(c *v1alpha1.Cluster) { c.Spec.KubernetesVersion = "latest" }, "spec.kubernetesVersion"),
		Entry("an http endpoint", func(c *v1alpha1.Cluster) { c.Spec.ControlPlane.Endpoint = "http://10.0.0.1" }, "spec.controlPlane.endpoint"),
		Entry("an unknown key algorithm", func(c *v1alpha1.Cluster) { c.Spec.Certificates.KeyAlgorithm = "DSA-1024" }, "spec.certificates.keyAlgorithm"),
		Entry("an invalid pool name", func(c *v1alpha1.Cluster) {
			c.Spec.Workers = []v1alpha1.WorkerPool{{Name: "Pool_A"}}
		}, "spec.workers[0].name"),
		Entry("an unknown rollout strategy", func(c *v1alpha1.Cluster) {
			c.Spec.Workers = []v1alpha1.WorkerPool{{Name: "a", RolloutStrategy: "Sometimes"}}
		}, "spec.workers[0].rolloutStrategy"),
		Entry("two pools of one name", func(c *v1alpha1.Cluster) {
			c.Spec.Workers = []v1alpha1.WorkerPool{{Name: "a"}, {Name: "a"}}
		}, "Duplicate value"),
		Entry("an unknown approval mode", func(c *v1alpha1.Cluster) {
			c.Spec.KubeletBootstrap.CSRApproval.Serving = "Maybe"
		}, "spec.kubeletBootstrap.csrApproval.serving"),
	)

	It("keeps status behind the status subresource", func(ctx SpecContext) {
		c := minimalCluster(ns, "status")
		Expect(k8s.Create(ctx, c)).To(Succeed())
		generation := c.Generation

		now := metav1.NewTime(time.Now().Truncate(time.Second))
		c.Status = v1alpha1.ClusterStatus{
			ObservedGeneration: generation,
			Conditions: []metav1.Condition{{
				Type: v1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: "Test", Message: "set by the test", LastTransitionTime: now,
			}},
			Credentials: &v1alpha1.ClusterCredentials{
				Rotation: &v1alpha1.CredentialsRotation{CertificateAuthorities: &v1alpha1.CARotation{
					Phase: v1alpha1.RotationPreparing, LastInitiationTime: &now,
					PendingWorkersRollouts: []v1alpha1.PendingWorkersRollout{{Name: "pool-a", LastInitiationTime: &now}},
				}},
				CertificateAuthorities: []v1alpha1.CertificateAuthorityInventory{{
					Role:     v1alpha1.CARoleClient,
					Current:  &v1alpha1.CertificateInfo{Fingerprint: "ab", NotBefore: now, NotAfter: metav1.NewTime(now.Add(time.Hour))},
					Previous: &v1alpha1.CertificateInfo{Fingerprint: "cd", NotBefore: now, NotAfter: metav1.NewTime(now.Add(time.Hour))},
				}},
				EarliestCAExpiry: &now,
			},
		}
		Expect(k8s.Status().Update(ctx, c)).To(Succeed())

		By("ignoring status in a write to the main resource")
		stored := &v1alpha1.Cluster{}
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(c), stored)).To(Succeed())
		Expect(stored.CARotationPhase()).To(Equal(v1alpha1.RotationPreparing))
		Expect(stored.Generation).To(Equal(generation), "a status write must not bump the generation")
		stored.Spec.KubernetesVersion = "1.36.4"
		stored.Status.Credentials.Rotation.CertificateAuthorities.Phase = v1alpha1.RotationCompleted
		Expect(k8s.Update(ctx, stored)).To(Succeed())
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(c), stored)).To(Succeed())
		Expect(stored.Spec.KubernetesVersion).To(Equal("1.36.4"))
		Expect(stored.Generation).To(Equal(generation + 1))
		Expect(stored.CARotationPhase()).To(Equal(v1alpha1.RotationPreparing))
		Expect(meta.IsStatusConditionTrue(stored.Status.Conditions, v1alpha1.ConditionReady)).To(BeTrue())
		Expect(stored.IsPendingWorkerPool("pool-a")).To(BeTrue())

		By("ignoring spec in a write to the status subresource")
		stored.Spec.KubernetesVersion = "1.36.5"
		Expect(k8s.Status().Update(ctx, stored)).To(Succeed())
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(c), stored)).To(Succeed())
		Expect(stored.Spec.KubernetesVersion).To(Equal("1.36.4"))

		By("refusing an unknown phase")
		stored.Status.Credentials.Rotation.CertificateAuthorities.Phase = "Rotating"
		err := k8s.Status().Update(ctx, stored)
		Expect(apierrors.IsInvalid(err)).To(BeTrue(), "want Invalid, got %v", err)
		Expect(err.Error()).To(ContainSubstring("status.credentials.rotation.certificateAuthorities.phase"))
	})

	It("prints the rotation phase, readiness, recommendation, CA expiry and age in kubectl get", func(ctx SpecContext) {
		c := minimalCluster(ns, "printed")
		Expect(k8s.Create(ctx, c)).To(Succeed())
		expiry := metav1.NewTime(time.Now().Add(90 * 24 * time.Hour).Truncate(time.Second))
		c.Status.Conditions = []metav1.Condition{{Type: v1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: "Test", LastTransitionTime: metav1.Now()},
			{Type: v1alpha1.ConditionCARotationRecommended, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonCompletionDue, LastTransitionTime: metav1.Now()}}
		c.Status.Credentials = &v1alpha1.ClusterCredentials{
			Rotation:         &v1alpha1.CredentialsRotation{CertificateAuthorities: &v1alpha1.CARotation{Phase: v1alpha1.RotationPrepared}},
			EarliestCAExpiry: &expiry,
		}
		Expect(k8s.Status().Update(ctx, c)).To(Succeed())

		out := kubectl("get", "clusters.carousel.dev", "-n", ns)
		lines := strings.Split(strings.TrimSpace(out), "\n")
		Expect(lines).To(HaveLen(2), out)
		Expect(strings.Fields(lines[0])).To(Equal([]string{"NAME", "ROTATION", "READY", "RECOMMENDED", "CA", "EXPIRY", "AGE"}))
		Expect(strings.Fields(lines[1])[:4]).To(Equal([]string{"printed", "Prepared", "True", v1alpha1.ReasonCompletionDue}))
		// A date column would render a future time as "<invalid>": the expiry is printed as a timestamp.
		Expect(strings.Fields(lines[1])[4]).To(Equal(expiry.UTC().Format(time.RFC3339)), out)

		wide := kubectl("get", "clusters.carousel.dev", "-n", ns, "-o", "wide")
		Expect(wide).To(ContainSubstring("VERSION"))
		Expect(wide).To(ContainSubstring("1.36.3"))

		Expect(kubectl("get", "carousel", "-n", ns)).To(ContainSubstring("printed"), "the carousel category lists Clusters")
	})

	It("serves the generated clientset, informers, listers and apply configurations", func(ctx SpecContext) {
		cs, err := versioned.NewForConfig(cfg)
		Expect(err).NotTo(HaveOccurred())

		apply := carouselapply.Cluster("applied", ns).
			WithLabels(map[string]string{v1alpha1.LabelCluster: "applied"}).
			WithSpec(carouselapply.ClusterSpec().
				WithKubernetesVersion("1.35.0").
				WithWorkers(carouselapply.WorkerPool().WithName("pool-a").WithRolloutStrategy(v1alpha1.RolloutManual)))
		applied, err := cs.CarouselV1alpha1().Clusters(ns).Apply(ctx, apply, metav1.ApplyOptions{FieldManager: "integration-test", Force: true})
		Expect(err).NotTo(HaveOccurred())
		Expect(applied.Spec.Workers).To(HaveLen(1))

		factory := externalversions.NewSharedInformerFactoryWithOptions(cs, 0, externalversions.WithNamespace(ns))
		lister := factory.Carousel().V1alpha1().Clusters().Lister()
		informerCtx, cancel := context.WithCancel(ctx)
		DeferCleanup(cancel)
		factory.Start(informerCtx.Done())
		factory.WaitForCacheSync(informerCtx.Done())

		Eventually(func() ([]*v1alpha1.Cluster, error) {
			return lister.Clusters(ns).List(labels.SelectorFromSet(labels.Set{v1alpha1.LabelCluster: "applied"}))
		}).Should(ConsistOf(HaveField("Spec.KubernetesVersion", "1.35.0")))

		Expect(kubectl("get", "clusters.carousel.dev", "applied", "-n", ns, "-o", "jsonpath={.spec.workers[0].rolloutStrategy}")).
			To(Equal(string(v1alpha1.RolloutManual)))
	})
})
