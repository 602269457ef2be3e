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
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
	clustercontroller "github.com/carousel-dev/carousel/pkg/controller/cluster"
)

var _ = Describe("Automatic CA rotation", func() {
	It("refuses a policy without a maintenance window", func(ctx SpecContext) {
		ns := newNamespace(ctx)
		c := &v1alpha1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "unwindowed"},
			Spec: v1alpha1.ClusterSpec{KubernetesVersion: "1.36.3", CARotation: v1alpha1.CARotationSettings{Automatic: &v1alpha1.AutomaticCARotation{}}}}
		Expect(k8s.Create(ctx, c)).To(MatchError(ContainSubstring(
			"spec.maintenance: Required value: spec.caRotation.automatic starts and completes rotations only inside the maintenance window")))
		c.Spec.Maintenance = &v1alpha1.MaintenanceSpec{TimeWindow: v1alpha1.MaintenanceTimeWindow{Begin: "220000+0000", End: "230000+0000"}}
		c.Spec.CARotation.Automatic.ValidityUsedPercent = ptr.To[int32](100)
		Expect(k8s.Create(ctx, c)).To(MatchError(ContainSubstring("spec.caRotation.automatic.validityUsedPercent")), "the schema's bounds")
		c.Spec.CARotation.Automatic.ValidityUsedPercent = nil
		Expect(k8s.Create(ctx, c)).To(Succeed())
		Expect(getCluster(ctx, client.ObjectKeyFromObject(c)).Spec.CARotation.Automatic.ValidityUsedPercent).To(HaveValue(BeEquivalentTo(80)), "the schema's default")
	})

	// automatic creates, at noon on a fake clock, a Cluster name whose CAs
	// are valid four days and rotated at half of it, two days after they
	// were issued, completed completeAfter after Prepared if set, in a window
	// from 22:00 to 23:00 UTC; it returns the Cluster's key, a driver of its
	// passes, the clock, noon and the events.
	automatic := func(ctx context.Context, name string, completeAfter *metav1.Duration) (client.ObjectKey, handDriven, *clocktesting.FakeClock, time.Time, *events.FakeRecorder) {
		GinkgoHelper()
		noon := time.Now().UTC().Truncate(24 * time.Hour).Add(12 * time.Hour)
		clk := clocktesting.NewFakeClock(noon)
		recorder := events.NewFakeRecorder(100)
		r := &clustercontroller.Reconciler{Client: k8s, Clock: clk, Recorder: recorder, CAExpiryWarning: time.Hour, ManagedPollInterval: 5 * time.Second}
		c := &v1alpha1.Cluster{
			ObjectMeta: metav1.ObjectMeta{Namespace: newNamespace(ctx), Name: name},
			Spec: v1alpha1.ClusterSpec{
				KubernetesVersion: "1.36.3",
				Certificates: v1alpha1.CertificateSettings{CAValidity: &metav1.Duration{Duration: 96 * time.Hour},
					LeafValidity: &metav1.Duration{Duration: 12 * time.Hour}},
				Maintenance: &v1alpha1.MaintenanceSpec{TimeWindow: v1alpha1.MaintenanceTimeWindow{Begin: "220000+0000", End: "230000+0000"}},
				CARotation: v1alpha1.CARotationSettings{Automatic: &v1alpha1.AutomaticCARotation{ValidityUsedPercent: ptr.To[int32](50),
					CompleteAfter: completeAfter}},
			},
		}
		Expect(k8s.Create(ctx, c)).To(Succeed())
		key := client.ObjectKeyFromObject(c)
		return key, handDriven{r: r, key: key, step: clk.Step}, clk, noon, recorder
	}

	It("starts when a CA has used its share of validity, completes after the soak, both only inside the window, and schedules the next", func(ctx SpecContext) {
		key, driven, clk, noon, recorder := automatic(ctx, "automatic", &metav1.Duration{Duration: 24 * time.Hour})
		ns := key.Namespace
		scheduled := func() *metav1.Condition {
			return meta.FindStatusCondition(getCluster(ctx, key).Status.Conditions, v1alpha1.ConditionAutomaticCARotationScheduled)
		}

		By("the CAs issued at noon: the start is due two days later, and the Cluster is looked at again then")
		driven.pass(ctx)
		result := driven.pass(ctx)
		issued := getCluster(ctx, key).Status.Credentials.CertificateAuthorities
		Expect(issued).NotTo(BeEmpty())
		due := halfway(issued[0])
		Expect(scheduled()).To(And(HaveField("Status", metav1.ConditionTrue), HaveField("Reason", v1alpha1.ReasonAutomaticOperationScheduled),
			HaveField("Message", ContainSubstring("start-ca-rotation is due at "+due.UTC().Format(time.RFC3339)+", and runs in the first maintenance window from then")),
			HaveField("Message", ContainSubstring("has used 50% of its validity"))))
		Expect(result.RequeueAfter).To(And(BeNumerically(">", 0), BeNumerically("<=", due.Sub(clk.Now()))))
		version := getCluster(ctx, key).ResourceVersion
		driven.pass(ctx)
		Expect(getCluster(ctx, key).ResourceVersion).To(Equal(version), "a scheduled step writes nothing while it is not due")

		By("due at noon: it waits for the window, which opens at 22:00")
		clk.SetTime(due.Add(time.Minute))
		result = driven.pass(ctx)
		opening := noon.Add(58 * time.Hour)
		Expect(scheduled()).To(And(HaveField("Reason", v1alpha1.ReasonWaitingForMaintenanceWindow),
			HaveField("Message", ContainSubstring("opens next at "+opening.Format(time.RFC3339)))))
		Expect(result.RequeueAfter).To(And(BeNumerically(">", 0), BeNumerically("<=", opening.Sub(clk.Now()))))
		Expect(getCluster(ctx, key).Annotations).NotTo(HaveKey(v1alpha1.OperationAnnotation))
		out, err := kubectlCarouselAt(ctx, clk, "rotation", "status", "automatic", "-n", ns)
		Expect(err).NotTo(HaveOccurred())
		Expect(out).To(MatchRegexp(`Automatic:\s+start-ca-rotation is due: the \S+ CA`))

		By("the window opened: the start is carried out as a user's would be")
		clk.SetTime(opening.Add(time.Minute))
		driven.pass(ctx)
		Expect(getCluster(ctx, key).Annotations).To(HaveKeyWithValue(v1alpha1.OperationAnnotation, v1alpha1.OperationStartCARotation))
		Eventually(recorder.Events).Should(Receive(And(HavePrefix("Normal "+v1alpha1.EventAutomaticCARotation+" Maintenance window open: carrying out start-ca-rotation: the "),
			ContainSubstring("has used 50% of its validity"))))
		driven.until(ctx, v1alpha1.RotationPrepared)
		prepared := getCluster(ctx, key).CARotation().LastInitiationFinishedTime.Time
		Expect(scheduled()).To(HaveField("Message", HavePrefix("complete-ca-rotation is due at "+prepared.Add(24*time.Hour).UTC().Format(time.RFC3339))))

		By("the soak not over at the next window's opening: the complete waits; once over, inside the window, it completes")
		clk.SetTime(opening.Add(24 * time.Hour))
		driven.pass(ctx)
		Expect(getCluster(ctx, key).Annotations).NotTo(HaveKey(v1alpha1.OperationAnnotation))
		Expect(getCluster(ctx, key).CARotationPhase()).To(Equal(v1alpha1.RotationPrepared))
		clk.SetTime(prepared.Add(24*time.Hour + time.Minute))
		driven.until(ctx, v1alpha1.RotationCompleted)
		Eventually(recorder.Events).Should(Receive(ContainSubstring("carrying out complete-ca-rotation: the rotation has been Prepared since")))

		By("completed: the next start is scheduled from the new CAs")
		driven.pass(ctx)
		Expect(scheduled()).To(And(HaveField("Status", metav1.ConditionTrue), HaveField("Message", HavePrefix("start-ca-rotation is due at"))))
		next := halfway(getCluster(ctx, key).Status.Credentials.CertificateAuthorities[0])
		Expect(scheduled().Message).To(ContainSubstring(next.UTC().Format(time.RFC3339)))

		By("turning the policy off removes the condition")
		c := getCluster(ctx, key)
		patch := client.MergeFrom(c.DeepCopy())
		c.Spec.CARotation.Automatic = nil
		Expect(k8s.Patch(ctx, c, patch)).To(Succeed())
		driven.pass(ctx)
		Expect(scheduled()).To(BeNil())
	})

	It("starts a rotation that is due although a complete is queued for it, and then carries out the queued complete", func(ctx SpecContext) {
		// No completeAfter: the user completes, here through the window.
		key, driven, clk, noon, recorder := automatic(ctx, "queued-complete", nil)
		driven.pass(ctx)
		driven.pass(ctx)
		due := halfway(getCluster(ctx, key).Status.Credentials.CertificateAuthorities[0])

		By("the next completion queued ahead, as the docs allow: the start it waits for still runs in the window")
		queue(ctx, key, v1alpha1.OperationCompleteCARotation)
		opening := noon.Add(58 * time.Hour)
		Expect(opening.After(due)).To(BeTrue())
		clk.SetTime(opening.Add(time.Minute))
		driven.pass(ctx)
		got := getCluster(ctx, key)
		Expect(got.Annotations).To(HaveKeyWithValue(v1alpha1.OperationAnnotation, v1alpha1.OperationStartCARotation),
			"a complete that cannot run before the start does not hold the start")
		Expect(got.Annotations).To(HaveKeyWithValue(v1alpha1.MaintenanceOperationAnnotation, v1alpha1.OperationCompleteCARotation))
		Eventually(recorder.Events).Should(Receive(HavePrefix("Normal " + v1alpha1.EventAutomaticCARotation + " Maintenance window open: carrying out start-ca-rotation")))

		By("prepared: the queued complete runs in the next window")
		driven.until(ctx, v1alpha1.RotationPrepared)
		clk.SetTime(opening.Add(24*time.Hour + time.Minute))
		driven.until(ctx, v1alpha1.RotationCompleted)
		Eventually(recorder.Events).Should(Receive(Equal("Normal " + v1alpha1.EventMaintenanceOperationStarted + " Maintenance window open: carrying out complete-ca-rotation")))
		Expect(getCluster(ctx, key).Annotations).NotTo(HaveKey(v1alpha1.MaintenanceOperationAnnotation))
	})
})

// halfway is when a CA has used half of its validity.
func halfway(ca v1alpha1.CertificateAuthorityInventory) time.Time {
	return ca.Current.NotBefore.Add(ca.Current.NotAfter.Sub(ca.Current.NotBefore.Time) / 2)
}
