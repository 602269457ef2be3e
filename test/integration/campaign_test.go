package integration

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
	"github.com/carousel-dev/carousel/pkg/credentials"
)

// fleetLabel selects the Clusters of a spec's campaign.
var fleetLabel = map[string]string{"fleet": "blue"}

// createFleet creates n Ready Clusters named <prefix>-00.. labelled with labels.
func createFleet(ctx context.Context, ns, prefix string, n int, labels map[string]string) []client.ObjectKey {
	GinkgoHelper()
	keys := make([]client.ObjectKey, n)
	for i := range n {
		c := &v1alpha1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("%s-%02d", prefix, i), Labels: labels},
			Spec: v1alpha1.ClusterSpec{KubernetesVersion: "1.36.3"}}
		Expect(k8s.Create(ctx, c)).To(Succeed())
		keys[i] = client.ObjectKeyFromObject(c)
	}
	for _, key := range keys {
		Eventually(func(g Gomega) {
			g.Expect(meta.IsStatusConditionTrue(getCluster(ctx, key).Status.Conditions, v1alpha1.ConditionReady)).To(BeTrue())
		}).WithTimeout(2 * time.Minute).Should(Succeed())
	}
	return keys
}

func getCampaign(ctx context.Context, key client.ObjectKey) *v1alpha1.RotationCampaign {
	GinkgoHelper()
	rc := &v1alpha1.RotationCampaign{}
	Expect(k8s.Get(ctx, key, rc)).To(Succeed())
	return rc
}

func patchCampaign(ctx context.Context, key client.ObjectKey, mutate func(*v1alpha1.RotationCampaign)) {
	GinkgoHelper()
	rc := getCampaign(ctx, key)
	patch := client.MergeFrom(rc.DeepCopy())
	mutate(rc)
	Expect(k8s.Patch(ctx, rc, patch)).To(Succeed())
}

// waitForCampaign waits until the campaign has looked at its current spec
// and is in phase.
func waitForCampaign(ctx context.Context, key client.ObjectKey, phase v1alpha1.CampaignPhase, timeout time.Duration) *v1alpha1.RotationCampaign {
	GinkgoHelper()
	var rc *v1alpha1.RotationCampaign
	Eventually(func(g Gomega) {
		rc = getCampaign(ctx, key)
		g.Expect(rc.Status.ObservedGeneration).To(Equal(rc.Generation))
		g.Expect(rc.Status.Phase).To(Equal(phase), "progress: %v", meta.FindStatusCondition(rc.Status.Conditions, v1alpha1.ConditionCampaignProgressing))
	}).WithTimeout(timeout).WithPolling(200 * time.Millisecond).Should(Succeed())
	return rc
}

// watchConcurrency lists the selected Clusters every 50 ms until the spec
// ends, and keeps in peak the most it saw rotating at once: with the
// operation requested, or in a phase of the step under way.
func watchConcurrency(ctx context.Context, ns string, peak *atomic.Int64) {
	ctx, cancel := context.WithCancel(ctx)
	DeferCleanup(cancel)
	go wait.UntilWithContext(ctx, func(ctx context.Context) {
		var list v1alpha1.ClusterList
		if err := k8s.List(ctx, &list, client.InNamespace(ns), client.MatchingLabels(fleetLabel)); err != nil {
			return
		}
		rotating := int64(0)
		for _, c := range list.Items {
			_, requested := c.Annotations[v1alpha1.OperationAnnotation]
			if phase := c.CARotationPhase(); requested || (phase.RotationInProgress() && phase != v1alpha1.RotationPrepared) {
				rotating++
			}
		}
		if rotating > peak.Load() {
			peak.Store(rotating)
		}
	}, 50*time.Millisecond)
}

var _ = Describe("RotationCampaign", func() {
	It("refuses a campaign without a selector, out-of-range budgets, and a step that goes back", func(ctx SpecContext) {
		ns := newNamespace(ctx)
		rc := &v1alpha1.RotationCampaign{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "bad"}}
		Expect(k8s.Create(ctx, rc)).To(MatchError(ContainSubstring("spec.selector: Required value: select the campaign's Clusters by label")))
		rc.Spec.Selector.MatchLabels = fleetLabel
		rc.Spec.MaxConcurrent = ptr.To(intstr.FromString("150%"))
		rc.Spec.MaxFailures = ptr.To(intstr.FromInt32(-1))
		rc.Spec.ProgressDeadline = &metav1.Duration{Duration: time.Second}
		err := k8s.Create(ctx, rc)
		Expect(err).To(MatchError(ContainSubstring(`spec.maxConcurrent: Invalid value: "150%": must be a number of Clusters (at least 1) or a percentage between 1% and 100%`)))
		Expect(err).To(MatchError(ContainSubstring("spec.maxFailures: Invalid value: -1: must be at least 0")))
		Expect(err).To(MatchError(ContainSubstring(`spec.progressDeadline: Invalid value: "1s": must be between 1m0s and 168h0m0s`)))
		rc.Spec.MaxConcurrent, rc.Spec.MaxFailures, rc.Spec.ProgressDeadline = nil, nil, nil
		Expect(k8s.Create(ctx, rc)).To(Succeed())
		Expect(getCampaign(ctx, client.ObjectKeyFromObject(rc)).Spec.Step).To(Equal(v1alpha1.CampaignStart), "the schema's default")
		patchCampaign(ctx, client.ObjectKeyFromObject(rc), func(rc *v1alpha1.RotationCampaign) { rc.Spec.Step = v1alpha1.CampaignComplete })
		rc = getCampaign(ctx, client.ObjectKeyFromObject(rc))
		patch := client.MergeFrom(rc.DeepCopy())
		rc.Spec.Step = v1alpha1.CampaignStart
		Expect(k8s.Patch(ctx, rc, patch)).To(MatchError(ContainSubstring("spec.step: Forbidden: the campaign is at the Complete step and does not go back to Start")))
	})

	It("rotates 50 Clusters in waves within its concurrency budget, leaves the unselected alone, and is idempotent once done", func(ctx SpecContext) {
		ns := newNamespace(ctx)
		var writes atomic.Int64
		startControllers(ns, &writes)
		fleet := createFleet(ctx, ns, "blue", 50, fleetLabel)
		others := createFleet(ctx, ns, "green", 2, map[string]string{"fleet": "green"})
		var peak atomic.Int64
		watchConcurrency(ctx, ns, &peak)

		By("the Start step, ten at a time, driven by kubectl carousel campaign start")
		begun := time.Now()
		out, err := kubectlCarousel(ctx, "campaign", "start", "blue-wave", "-n", ns, "-l", "fleet=blue", "--max-concurrent", "10",
			"--wait", "--timeout", "3m")
		Expect(err).NotTo(HaveOccurred(), out)
		Expect(out).To(ContainSubstring("rotationcampaign " + ns + "/blue-wave created: start-ca-rotation on the Clusters selected by fleet=blue"))
		Expect(out).To(MatchRegexp(`Starting: start-ca-rotation: \d+ of 50 Clusters done, \d+ rotating \(at most 10 at once\)`))
		key := client.ObjectKey{Namespace: ns, Name: "blue-wave"}
		rc := waitForCampaign(ctx, key, v1alpha1.CampaignPrepared, time.Minute)
		prepared := time.Since(begun)
		Expect(rc.Status.Clusters).To(Equal(v1alpha1.CampaignClusterCounts{Selected: 50, Done: 50}))
		Expect(rc.Status.RotationPhases).To(Equal([]v1alpha1.RotationPhaseCount{{Phase: string(v1alpha1.RotationPrepared), Count: 50}}))
		Expect(rc.Status.PreparedTime).NotTo(BeNil())
		for _, k := range fleet {
			Expect(getCluster(ctx, k).CARotationPhase()).To(Equal(v1alpha1.RotationPrepared))
		}
		Expect(peak.Load()).To(And(BeNumerically("<=", 10), BeNumerically(">", 1)), "at most ten rotating at once, and more than one")

		By("the Complete step, 30% of them (15) at a time")
		peak.Store(0)
		begun = time.Now()
		patchCampaign(ctx, key, func(rc *v1alpha1.RotationCampaign) { rc.Spec.MaxConcurrent = ptr.To(intstr.FromString("30%")) })
		out, err = kubectlCarousel(ctx, "campaign", "complete", "blue-wave", "-n", ns)
		Expect(err).NotTo(HaveOccurred(), out)
		rc = waitForCampaign(ctx, key, v1alpha1.CampaignCompleted, 2*time.Minute)
		completed := time.Since(begun)
		Expect(rc.Status.Clusters).To(Equal(v1alpha1.CampaignClusterCounts{Selected: 50, Done: 50}))
		Expect(rc.Status.CompleteStepTime).NotTo(BeNil())
		Expect(rc.Status.CompletedTime).NotTo(BeNil())
		for _, k := range fleet {
			Expect(getCluster(ctx, k).CARotationPhase()).To(Equal(v1alpha1.RotationCompleted))
		}
		Expect(peak.Load()).To(And(BeNumerically("<=", 15), BeNumerically(">", 0)), "at most 30% of 50, and the sampler saw the step")
		for _, k := range others {
			Expect(getCluster(ctx, k).CARotationPhase()).To(BeEmpty(), "a Cluster the selector does not pick is never rotated")
		}
		AddReportEntry("campaign of 50 Clusters", fmt.Sprintf("start→Prepared %s (10 at a time), complete→Completed %s (30%% at a time)",
			prepared.Round(time.Millisecond), completed.Round(time.Millisecond)))

		By("done: a reconcile writes nothing, and the status command shows the stages")
		version := getCampaign(ctx, key).ResourceVersion
		before := writes.Load()
		Expect(annotate(ctx, getCluster(ctx, fleet[0]), v1alpha1.OperationReconcile)).To(Succeed()) // a Cluster event brings the campaign back
		Eventually(func() map[string]string { return getCluster(ctx, fleet[0]).Annotations }).ShouldNot(HaveKey(v1alpha1.OperationAnnotation))
		Consistently(func() string { return getCampaign(ctx, key).ResourceVersion }).WithTimeout(2 * time.Second).Should(Equal(version))
		Expect(writes.Load()-before).To(BeNumerically("<=", 1), "the Cluster controller removes the reconcile annotation; the campaign writes nothing")
		out, err = kubectlCarousel(ctx, "campaign", "status", "blue-wave", "-n", ns)
		Expect(err).NotTo(HaveOccurred(), out)
		Expect(out).To(And(MatchRegexp(`Step:\s+Complete`), MatchRegexp(`Phase:\s+Completed`),
			MatchRegexp(`Clusters:\s+50 selected: 0 pending, 0 waiting, 0 in progress, 50 done, 0 skipped, 0 failed`),
			MatchRegexp(`Rotation phases:\s+Completed 50`), MatchRegexp(`Completed:\s+\d{4}-`)))
	})

	It("halts on a failure beyond its budget, stays paused while paused, and goes on once the failed Cluster leaves", func(ctx SpecContext) {
		ns := newNamespace(ctx)
		var writes atomic.Int64
		startControllers(ns, &writes)
		fleet := createFleet(ctx, ns, "blue", 6, fleetLabel)

		By("a Cluster whose client CA Secret was lost is not Ready")
		broken := fleet[2]
		Expect(k8s.Delete(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns,
			Name: credentials.CASecretName(broken.Name, v1alpha1.CARoleClient)}})).To(Succeed())
		Eventually(func() string {
			return ptr.Deref(meta.FindStatusCondition(getCluster(ctx, broken).Status.Conditions, v1alpha1.ConditionReady), metav1.Condition{}).Reason
		}).Should(Equal(v1alpha1.ReasonCALost))

		By("with no failure allowed, the campaign halts before it starts anything")
		rc := &v1alpha1.RotationCampaign{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "careful"},
			Spec: v1alpha1.RotationCampaignSpec{Selector: metav1.LabelSelector{MatchLabels: fleetLabel}, MaxConcurrent: ptr.To(intstr.FromInt32(2))}}
		Expect(k8s.Create(ctx, rc)).To(Succeed())
		key := client.ObjectKeyFromObject(rc)
		rc = waitForCampaign(ctx, key, v1alpha1.CampaignHalted, 30*time.Second)
		Expect(meta.FindStatusCondition(rc.Status.Conditions, v1alpha1.ConditionCampaignProgressing)).To(And(
			HaveField("Status", metav1.ConditionFalse), HaveField("Reason", v1alpha1.ReasonCampaignHalted),
			HaveField("Message", ContainSubstring("failed Clusters: 1, more than maxFailures allows (0 of 6): blue-02"))))
		Expect(rc.Status.Blocking).To(ConsistOf(And(HaveField("Name", "blue-02"), HaveField("State", v1alpha1.CampaignClusterFailed),
			HaveField("Message", HavePrefix("not Ready (CALost): ")))))
		Expect(rc.Status.Clusters).To(Equal(v1alpha1.CampaignClusterCounts{Selected: 6, Pending: 5, Failed: 1}))
		families, err := metrics.Registry.Gather()
		Expect(err).NotTo(HaveOccurred())
		Expect(metricValue(families, "carousel_rotation_campaign_halted", map[string]string{"namespace": ns, "campaign": "careful"})).To(Equal(1.0))
		Expect(metricValue(families, "carousel_rotation_campaign_clusters", map[string]string{"namespace": ns, "campaign": "careful", "state": "Failed"})).To(Equal(1.0))
		Expect(metricValue(families, "carousel_rotation_campaign_clusters", map[string]string{"namespace": ns, "campaign": "careful", "state": "Pending"})).To(Equal(5.0))
		var events corev1.EventList
		Eventually(func() []corev1.Event {
			Expect(k8s.List(ctx, &events, client.InNamespace(ns))).To(Succeed())
			return events.Items
		}).Should(ContainElement(And(HaveField("Reason", v1alpha1.EventCampaignHalted), HaveField("Type", corev1.EventTypeWarning),
			HaveField("InvolvedObject.Name", "careful"))))
		out, err := kubectlCarousel(ctx, "campaign", "status", "careful", "-n", ns)
		Expect(err).NotTo(HaveOccurred(), out)
		Expect(out).To(And(MatchRegexp(`Phase:\s+Halted`), MatchRegexp(`blue-02\s+Failed\s+not Ready \(CALost\)`)))
		AddReportEntry("a halted campaign", out)
		out, err = kubectlCarousel(ctx, "campaign", "start", "careful-wait", "-n", ns, "-l", "fleet=blue", "--wait", "--timeout", "1m")
		Expect(err).To(MatchError(ContainSubstring("rotationcampaign "+ns+"/careful-wait halted: kubectl carousel campaign status careful-wait")), out)
		Expect(k8s.Delete(ctx, &v1alpha1.RotationCampaign{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "careful-wait"}})).To(Succeed())
		Eventually(func() float64 {
			families, err := metrics.Registry.Gather()
			Expect(err).NotTo(HaveOccurred())
			return metricValue(families, "carousel_rotation_campaign_halted", map[string]string{"namespace": ns, "campaign": "careful-wait"})
		}).Should(Equal(-1.0), "a deleted campaign's series are removed")

		By("paused with the budget raised: still nothing starts")
		out, err = kubectlCarousel(ctx, "campaign", "pause", "careful", "-n", ns)
		Expect(err).NotTo(HaveOccurred(), out)
		patchCampaign(ctx, key, func(rc *v1alpha1.RotationCampaign) { rc.Spec.MaxFailures = ptr.To(intstr.FromInt32(1)) })
		rc = waitForCampaign(ctx, key, v1alpha1.CampaignPaused, 30*time.Second)
		Expect(rc.Status.Clusters.InProgress).To(BeZero())
		for _, k := range fleet {
			Expect(getCluster(ctx, k).Annotations).NotTo(HaveKey(v1alpha1.OperationAnnotation))
			Expect(getCluster(ctx, k).CARotationPhase()).To(BeEmpty())
		}

		By("resumed: every healthy Cluster is Prepared; the failed one holds the step")
		out, err = kubectlCarousel(ctx, "campaign", "resume", "careful", "-n", ns)
		Expect(err).NotTo(HaveOccurred(), out)
		Eventually(func() v1alpha1.CampaignClusterCounts { return getCampaign(ctx, key).Status.Clusters }).WithTimeout(time.Minute).
			Should(Equal(v1alpha1.CampaignClusterCounts{Selected: 6, Done: 5, Failed: 1}))
		rc = getCampaign(ctx, key)
		Expect(rc.Status.Phase).To(Equal(v1alpha1.CampaignStarting))
		Expect(meta.FindStatusCondition(rc.Status.Conditions, v1alpha1.ConditionCampaignProgressing)).To(And(
			HaveField("Status", metav1.ConditionFalse), HaveField("Reason", v1alpha1.ReasonCampaignFailedClustersLeft),
			HaveField("Message", ContainSubstring("not rotating: "+broken.Name))), "nothing is left but the failure, and the status says so")
		out, err = kubectlCarousel(ctx, "campaign", "start", "careful-left", "-n", ns, "-l", "fleet=blue", "--max-failures", "1", "--wait", "--timeout", "1m")
		Expect(err).To(MatchError(ContainSubstring("rotationcampaign "+ns+"/careful-left is held (FailedClustersLeft: only failed Clusters within maxFailures are left)")), out)
		Expect(k8s.Delete(ctx, &v1alpha1.RotationCampaign{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "careful-left"}})).To(Succeed())
		Expect(getCluster(ctx, broken).CARotationPhase()).To(BeEmpty(), "a Cluster that is not Ready is never started")

		By("the failed Cluster leaves the selection: the step is done")
		c := getCluster(ctx, broken)
		patch := client.MergeFrom(c.DeepCopy())
		delete(c.Labels, "fleet")
		Expect(k8s.Patch(ctx, c, patch)).To(Succeed())
		rc = waitForCampaign(ctx, key, v1alpha1.CampaignPrepared, 30*time.Second)
		Expect(rc.Status.Clusters).To(Equal(v1alpha1.CampaignClusterCounts{Selected: 5, Done: 5}))
	})
})
