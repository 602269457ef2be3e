package integration

import (
	"context"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
	clustercontroller "github.com/carousel-dev/carousel/pkg/controller/cluster"
)

var _ = Describe("Maintenance windows", func() {
	window := v1alpha1.MaintenanceTimeWindow{Begin: "220000+0000", End: "230000+0000"}

	It("refuses a maintenance operation without a window, one that does not wait, and a window out of bounds", func(ctx SpecContext) {
		ns := newNamespace(ctx)
		c := createCluster(ctx, ns, "unscheduled")
		tryQueue := func(op string) error {
			c := getCluster(ctx, client.ObjectKeyFromObject(c))
			patch := client.MergeFrom(c.DeepCopy())
			c.Annotations = map[string]string{v1alpha1.MaintenanceOperationAnnotation: op}
			return k8s.Patch(ctx, c, patch)
		}
		Expect(tryQueue(v1alpha1.OperationStartCARotation)).To(MatchError(ContainSubstring(
			"spec.maintenance.timeWindow: Required value: carousel.dev/maintenance-operation=start-ca-rotation waits for the maintenance window: " +
				"set one, or set carousel.dev/operation=start-ca-rotation to have it done now")))

		c = getCluster(ctx, client.ObjectKeyFromObject(c))
		patch := client.MergeFrom(c.DeepCopy())
		c.Spec.Maintenance = &v1alpha1.MaintenanceSpec{TimeWindow: v1alpha1.MaintenanceTimeWindow{Begin: "120000+0000", End: "230000+0000"}}
		Expect(k8s.Patch(ctx, c, patch)).To(MatchError(ContainSubstring("the window from 120000+0000 to 230000+0000 lasts 11h0m0s: it must last between 30m0s and 6h0m0s")))
		c.Spec.Maintenance.TimeWindow.Begin = "2200"
		Expect(k8s.Patch(ctx, c, patch)).To(MatchError(ContainSubstring("spec.maintenance.timeWindow.begin")), "the schema's pattern")
		c.Spec.Maintenance.TimeWindow = window
		Expect(k8s.Patch(ctx, c, patch)).To(Succeed())

		Expect(tryQueue(v1alpha1.OperationReissueServiceAccountKey)).To(MatchError(ContainSubstring(
			"only start-ca-rotation, complete-ca-rotation, rotate-serviceaccount-key-start, rotate-serviceaccount-key-complete, rotate-credentials-start and rotate-credentials-complete wait for the maintenance window: set carousel.dev/operation=reissue-service-account-key to have it done now")))
		Expect(tryQueue(v1alpha1.OperationStartCARotation)).To(Succeed())
	})

	It("carries out a queued start and a queued complete only inside the window, and a complete only once Prepared", func(ctx SpecContext) {
		ns := newNamespace(ctx)
		noon := time.Now().UTC().Truncate(24 * time.Hour).Add(12 * time.Hour)
		clk := clocktesting.NewFakeClock(noon)
		recorder := events.NewFakeRecorder(100)
		r := &clustercontroller.Reconciler{Client: k8s, Clock: clk, Recorder: recorder, CAExpiryWarning: time.Hour, ManagedPollInterval: 5 * time.Second}
		c := createCluster(ctx, ns, "scheduled")
		key := client.ObjectKeyFromObject(c)
		patch := client.MergeFrom(c.DeepCopy())
		c.Spec.Maintenance = &v1alpha1.MaintenanceSpec{TimeWindow: window}
		Expect(k8s.Patch(ctx, c, patch)).To(Succeed())
		driven := handDriven{r: r, key: key, step: clk.Step}
		queued := func() *metav1.Condition {
			return meta.FindStatusCondition(getCluster(ctx, key).Status.Conditions, v1alpha1.ConditionMaintenanceOperationQueued)
		}
		driven.pass(ctx)
		Expect(queued()).To(And(HaveField("Status", metav1.ConditionFalse), HaveField("Reason", v1alpha1.ReasonNothingQueued)))

		By("start queued at noon: it waits for the window, and the Cluster is looked at again when it opens")
		out, err := kubectlCarouselAt(ctx, clk, "rotation", "start", "scheduled", "-n", ns, "--in-maintenance-window")
		Expect(err).NotTo(HaveOccurred())
		Expect(out).To(ContainSubstring("cluster " + ns + "/scheduled: start-ca-rotation queued for the maintenance window"))
		result := driven.pass(ctx)
		opening := noon.Add(10 * time.Hour)
		Expect(queued()).To(And(HaveField("Status", metav1.ConditionTrue), HaveField("Reason", v1alpha1.ReasonWaitingForMaintenanceWindow),
			HaveField("Message", "start-ca-rotation waits for the maintenance window, which opens next at "+opening.Format(time.RFC3339))))
		Expect(result.RequeueAfter).To(Equal(10 * time.Hour))
		Expect(getCluster(ctx, key).CARotationPhase()).To(BeEmpty())
		version := getCluster(ctx, key).ResourceVersion
		driven.pass(ctx)
		Expect(getCluster(ctx, key).ResourceVersion).To(Equal(version), "waiting writes nothing")
		out, err = kubectlCarouselAt(ctx, clk, "rotation", "status", "scheduled", "-n", ns)
		Expect(err).NotTo(HaveOccurred())
		Expect(out).To(MatchRegexp(`Queued:\s+start-ca-rotation waits for the maintenance window`))

		By("the window opened: the start is carried out")
		clk.SetTime(opening.Add(5 * time.Minute))
		driven.pass(ctx)
		got := getCluster(ctx, key)
		Expect(got.Annotations).NotTo(HaveKey(v1alpha1.MaintenanceOperationAnnotation))
		Expect(got.Annotations).To(HaveKeyWithValue(v1alpha1.OperationAnnotation, v1alpha1.OperationStartCARotation))
		Eventually(recorder.Events).Should(Receive(Equal("Normal " + v1alpha1.EventMaintenanceOperationStarted + " Maintenance window open: carrying out start-ca-rotation")))
		driven.until(ctx, v1alpha1.RotationPrepared)

		By("complete queued after the window closed: it waits for tomorrow's")
		clk.SetTime(opening.Add(90 * time.Minute))
		_, err = kubectlCarouselAt(ctx, clk, "rotation", "complete", "scheduled", "-n", ns, "--in-maintenance-window")
		Expect(err).NotTo(HaveOccurred())
		driven.pass(ctx)
		Expect(queued()).To(HaveField("Message", ContainSubstring("opens next at "+opening.Add(24*time.Hour).Format(time.RFC3339))))
		clk.SetTime(opening.Add(24*time.Hour + time.Minute))
		driven.until(ctx, v1alpha1.RotationCompleted)
		Expect(queued()).To(HaveField("Status", metav1.ConditionFalse))

		By("complete queued while nothing is Prepared: inside the window it waits for the phase, and is kept")
		queue(ctx, key, v1alpha1.OperationCompleteCARotation)
		driven.pass(ctx)
		Expect(queued()).To(And(HaveField("Status", metav1.ConditionTrue), HaveField("Reason", v1alpha1.ReasonMaintenanceOperationNotAllowed),
			HaveField("Message", ContainSubstring("complete-ca-rotation waits until the rotation's phase allows it: cannot complete the CA rotation in phase Completed"))))
		Expect(getCluster(ctx, key).Annotations).To(HaveKeyWithValue(v1alpha1.MaintenanceOperationAnnotation, v1alpha1.OperationCompleteCARotation))

		By("a rotation started and completed by hand outside the window: the queued complete goes with it, or it would complete the next one")
		clk.SetTime(opening.Add(26 * time.Hour))
		Expect(annotate(ctx, getCluster(ctx, key), v1alpha1.OperationStartCARotation)).To(Succeed())
		driven.until(ctx, v1alpha1.RotationPrepared)
		Expect(getCluster(ctx, key).Annotations).To(HaveKeyWithValue(v1alpha1.MaintenanceOperationAnnotation, v1alpha1.OperationCompleteCARotation),
			"a start leaves the completion queued for the rotation it starts")
		Expect(queued()).To(HaveField("Reason", v1alpha1.ReasonWaitingForMaintenanceWindow))
		for len(recorder.Events) > 0 {
			<-recorder.Events
		}
		Expect(annotate(ctx, getCluster(ctx, key), v1alpha1.OperationCompleteCARotation)).To(Succeed())
		driven.pass(ctx)
		Expect(getCluster(ctx, key).Annotations).NotTo(HaveKey(v1alpha1.MaintenanceOperationAnnotation))
		Eventually(recorder.Events).Should(Receive(Equal("Normal " + v1alpha1.EventMaintenanceOperationDropped +
			" Dropped carousel.dev/maintenance-operation=complete-ca-rotation: carousel.dev/operation=complete-ca-rotation did it, or ended the rotation it was for")))
		driven.until(ctx, v1alpha1.RotationCompleted)
		Expect(queued()).To(HaveField("Reason", v1alpha1.ReasonNothingQueued))
	})
})

// queue sets the maintenance-operation annotation of a Cluster.
func queue(ctx context.Context, key client.ObjectKey, op string) {
	GinkgoHelper()
	c := getCluster(ctx, key)
	patch := client.MergeFrom(c.DeepCopy())
	c.Annotations = map[string]string{v1alpha1.MaintenanceOperationAnnotation: op}
	Expect(k8s.Patch(ctx, c, patch)).To(Succeed())
}
