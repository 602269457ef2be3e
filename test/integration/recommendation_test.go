package integration

import (
	"bytes"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
	clustercontroller "github.com/carousel-dev/carousel/pkg/controller/cluster"
	"github.com/carousel-dev/carousel/pkg/operator"
	"github.com/carousel-dev/carousel/pkg/scheme"
)

var _ = Describe("Rotation recommendations", func() {
	It("warns on updates and turns CARotationRecommended True when a rotation is due, or Prepared for too long, and False once acted on", func(ctx SpecContext) {
		ns := newNamespace(ctx)
		policy := operator.DefaultOptions().Recommendations
		clk := clocktesting.NewFakeClock(time.Now())
		webhookClock.SetTime(clk.Now())
		DeferCleanup(func() { webhookClock.SetTime(time.Now()) })
		step := func(d time.Duration) { clk.Step(d); webhookClock.Step(d) }
		recorder := events.NewFakeRecorder(100)
		registry := prometheus.NewRegistry()
		r := &clustercontroller.Reconciler{Client: k8s, Clock: clk, Recorder: recorder, CAExpiryWarning: time.Hour,
			ManagedPollInterval: 5 * time.Second, Recommendations: policy, Metrics: clustercontroller.NewMetrics(registry)}
		recommended := func(reason string) float64 {
			families, err := registry.Gather()
			Expect(err).NotTo(HaveOccurred())
			return metricValue(families, "carousel_ca_rotation_recommended", map[string]string{"namespace": ns, "cluster": "aging", "reason": reason})
		}
		var received bytes.Buffer
		warned := rest.CopyConfig(cfg)
		warned.WarningHandler = rest.NewWarningWriter(&received, rest.WarningWriterOptions{})
		// takeWarnings returns the warnings the client got since it was last called.
		takeWarnings := func() []string {
			var text []string
			for line := range strings.Lines(received.String()) {
				text = append(text, strings.TrimPrefix(strings.TrimSuffix(line, "\n"), "Warning: "))
			}
			received.Reset()
			return text
		}
		user, err := client.New(warned, client.Options{Scheme: scheme.New()})
		Expect(err).NotTo(HaveOccurred())

		c := createCluster(ctx, ns, "aging")
		key := client.ObjectKeyFromObject(c)
		driven := handDriven{r: r, key: key, step: step}
		recommendation := func() *metav1.Condition {
			return meta.FindStatusCondition(getCluster(ctx, key).Status.Conditions, v1alpha1.ConditionCARotationRecommended)
		}
		// touch changes a label as a user would, and returns the warnings the update got.
		touch := func(value string) []string {
			GinkgoHelper()
			c := getCluster(ctx, key)
			patch := client.MergeFrom(c.DeepCopy())
			c.Labels = map[string]string{"touched": value}
			Expect(user.Patch(ctx, c, patch)).To(Succeed())
			return takeWarnings()
		}
		annotateAs := func(op string) []string {
			GinkgoHelper()
			c := getCluster(ctx, key)
			patch := client.MergeFrom(c.DeepCopy())
			c.Annotations = map[string]string{v1alpha1.OperationAnnotation: op}
			Expect(user.Patch(ctx, c, patch)).To(Succeed())
			return takeWarnings()
		}
		By("a new Cluster: nothing due until the rotation interval has passed since its creation")
		result := driven.pass(ctx)
		created := getCluster(ctx, key).CreationTimestamp.Time
		Expect(recommendation()).To(And(HaveField("Status", metav1.ConditionFalse), HaveField("Reason", v1alpha1.ReasonNothingDue),
			HaveField("Message", "nothing is due before "+created.Add(policy.RotationInterval).UTC().Format(time.RFC3339))))
		Expect(result.RequeueAfter).To(BeNumerically("<=", created.Add(policy.RotationInterval).Sub(clk.Now())),
			"the Cluster is looked at again when the rotation is due")
		Expect(touch("young")).To(BeEmpty())
		Expect(recommended(v1alpha1.ReasonRotationDue)).To(BeZero())

		By("the rotation interval passed: the condition, an event and a warning on every update")
		step(policy.RotationInterval + time.Hour)
		driven.pass(ctx)
		Expect(recommendation()).To(And(HaveField("Status", metav1.ConditionTrue), HaveField("Reason", v1alpha1.ReasonRotationDue),
			HaveField("Message", ContainSubstring("its CAs were never rotated"))))
		Eventually(recorder.Events).Should(Receive(HavePrefix("Warning " + v1alpha1.EventCARotationRecommended)))
		Expect(recommended(v1alpha1.ReasonRotationDue)).To(Equal(1.0), "the metric the chart's alert reads")
		Expect(recommended(v1alpha1.ReasonCompletionDue)).To(BeZero())
		out, err := kubectlCarousel(ctx, "rotation", "status", "aging", "-n", ns)
		Expect(err).NotTo(HaveOccurred())
		Expect(out).To(MatchRegexp(`Recommended:\s+the Cluster was created at \S+ and its CAs were never rotated`))
		Expect(touch("old")).To(ConsistOf(And(ContainSubstring("cluster "+ns+"/aging: the Cluster was created at"),
			ContainSubstring(v1alpha1.OperationAnnotation+"="+v1alpha1.OperationStartCARotation))))
		Expect(annotateAs(v1alpha1.OperationStartCARotation)).To(BeEmpty(), "the update that follows the advice gets no warning")

		By("a rotation under way is recommended nothing")
		driven.pass(ctx) // records Preparing, and only that
		Expect(getCluster(ctx, key).CARotationPhase()).To(Equal(v1alpha1.RotationPreparing))
		Expect(touch("preparing")).To(BeEmpty())

		By("Prepared for longer than the warning: complete it")
		driven.until(ctx, v1alpha1.RotationPrepared)
		Expect(recommendation()).To(HaveField("Status", metav1.ConditionFalse))
		step(policy.PreparedWarning + time.Hour)
		driven.pass(ctx)
		Expect(recommendation()).To(And(HaveField("Status", metav1.ConditionTrue), HaveField("Reason", v1alpha1.ReasonCompletionDue)))
		Expect(recommended(v1alpha1.ReasonCompletionDue)).To(Equal(1.0))
		Expect(recommended(v1alpha1.ReasonRotationDue)).To(BeZero())
		Expect(touch("prepared")).To(ConsistOf(ContainSubstring(v1alpha1.OperationAnnotation + "=" + v1alpha1.OperationCompleteCARotation)))
		Expect(annotateAs(v1alpha1.OperationCompleteCARotation)).To(BeEmpty())

		By("completed: nothing due until the interval has passed since the completion")
		driven.until(ctx, v1alpha1.RotationCompleted)
		completed := getCluster(ctx, key).CARotation().LastCompletionTime.Time
		Expect(recommendation()).To(And(HaveField("Status", metav1.ConditionFalse),
			HaveField("Message", "nothing is due before "+completed.Add(policy.RotationInterval).UTC().Format(time.RFC3339))))
		Expect(touch("rotated")).To(BeEmpty())
		version := getCluster(ctx, key).ResourceVersion
		driven.pass(ctx)
		Expect(getCluster(ctx, key).ResourceVersion).To(Equal(version), "a pass that finds the recommendation unchanged writes nothing")
	})
})
