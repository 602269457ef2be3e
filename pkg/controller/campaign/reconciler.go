package campaign

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
	"github.com/carousel-dev/carousel/pkg/campaign"
)

// Reconciler carries out what package campaign decides for a
// RotationCampaign: it sets the step's operation annotation on the Clusters
// Plan starts, as a user would (the Cluster webhook judges it), and writes
// the campaign's status.
type Reconciler struct {
	Client client.Client
	// Clusters reads the selected Clusters; nil means Client. A shard, whose
	// cache holds only its own Clusters, reads them from the API server.
	Clusters client.Reader
	// Resync, when set, is how soon a campaign with Clusters left is looked
	// at again even if none of them changed: a shard hears only of its own
	// Clusters' changes.
	Resync   time.Duration
	Clock    clock.PassiveClock
	Recorder events.EventRecorder
	Metrics  *Metrics
}

// Reconcile looks at one campaign and its Clusters.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	rc := &v1alpha1.RotationCampaign{}
	if err := r.Client.Get(ctx, req.NamespacedName, rc); err != nil {
		if apierrors.IsNotFound(err) {
			r.Metrics.forget(req.Namespace, req.Name)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !rc.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil
	}
	now := r.Clock.Now()
	step := rc.Spec.StepOrDefault()
	// The times the step's decisions count from are stored before any
	// Cluster is started, so that a restart counts from the same ones.
	if rc.Status.StartTime == nil || (step == v1alpha1.CampaignComplete && rc.Status.CompleteStepTime == nil) {
		before := rc.DeepCopy()
		stamp := metav1.NewTime(now)
		if rc.Status.StartTime == nil {
			rc.Status.StartTime = &stamp
		}
		if step == v1alpha1.CampaignComplete && rc.Status.CompleteStepTime == nil {
			rc.Status.CompleteStepTime = &stamp
		}
		if err := r.Client.Status().Patch(ctx, rc, client.MergeFrom(before)); err != nil {
			return ctrl.Result{}, fmt.Errorf("recording when the %s step began: %w", step, err)
		}
	}

	clusters, err := r.selected(ctx, rc)
	if err != nil {
		return ctrl.Result{}, err
	}
	standings := make([]campaign.Standing, 0, len(clusters))
	for _, c := range clusters {
		standings = append(standings, campaign.Classify(step, rc.Status.StartTime.Time, rc.Spec.ProgressDeadlineOrDefault(), c, now))
	}
	d := campaign.Plan(&rc.Spec, standings)

	byName := make(map[string]*v1alpha1.Cluster, len(clusters))
	for _, c := range clusters {
		byName[c.Name] = c
	}
	for i, name := range d.Start {
		if err := r.start(ctx, rc, byName[name], step); err != nil {
			return ctrl.Result{}, err
		}
		r.Recorder.Eventf(rc, byName[name], corev1.EventTypeNormal, v1alpha1.EventCampaignOperationStarted, "Rotate",
			"%s on Cluster %s (%d of %d started in this wave)", campaign.Operation(step), name, i+1, len(d.Start))
	}
	if err := r.writeStatus(ctx, rc, d, now); err != nil {
		return ctrl.Result{}, err
	}
	r.Metrics.record(rc)
	var result ctrl.Result
	if !d.RecheckAt.IsZero() {
		result.RequeueAfter = d.RecheckAt.Sub(now)
	}
	if r.Resync > 0 && d.Progressing.Reason != v1alpha1.ReasonCampaignStepDone && (result.RequeueAfter == 0 || r.Resync < result.RequeueAfter) {
		result.RequeueAfter = r.Resync
	}
	return result, nil
}

// selected lists the campaign's Clusters that are not being deleted.
func (r *Reconciler) selected(ctx context.Context, rc *v1alpha1.RotationCampaign) ([]*v1alpha1.Cluster, error) {
	selector, err := metav1.LabelSelectorAsSelector(&rc.Spec.Selector)
	if err != nil {
		return nil, fmt.Errorf("spec.selector: %w", err) // the webhook refuses such a selector
	}
	reader := r.Clusters
	if reader == nil {
		reader = r.Client
	}
	var list v1alpha1.ClusterList
	if err := reader.List(ctx, &list, client.InNamespace(rc.Namespace), client.MatchingLabelsSelector{Selector: selector}); err != nil {
		return nil, fmt.Errorf("listing the selected Clusters: %w", err)
	}
	out := make([]*v1alpha1.Cluster, 0, len(list.Items))
	for i := range list.Items {
		if list.Items[i].DeletionTimestamp.IsZero() {
			out = append(out, &list.Items[i])
		}
	}
	return out, nil
}

// start sets the step's operation on c. The patch carries the
// resourceVersion the decision was made on: if the cache was behind, it
// fails with a conflict and the campaign looks again, so that a stale view
// never starts more Clusters than the budget. A refusal by the Cluster
// webhook is recorded on the campaign and retried with backoff.
func (r *Reconciler) start(ctx context.Context, rc *v1alpha1.RotationCampaign, c *v1alpha1.Cluster, step v1alpha1.CampaignStep) error {
	patch := client.MergeFromWithOptions(c.DeepCopy(), client.MergeFromWithOptimisticLock{})
	if c.Annotations == nil {
		c.Annotations = map[string]string{}
	}
	c.Annotations[v1alpha1.OperationAnnotation] = campaign.Operation(step)
	err := r.Client.Patch(ctx, c, patch)
	switch {
	case err == nil:
		log.FromContext(ctx).Info("Started the step's operation on a Cluster", "cluster", c.Name, "operation", campaign.Operation(step))
		return nil
	case apierrors.IsConflict(err):
		return fmt.Errorf("cluster %s changed since it was looked at: looking again: %w", c.Name, err)
	case apierrors.IsForbidden(err) || apierrors.IsInvalid(err):
		r.Recorder.Eventf(rc, c, corev1.EventTypeWarning, v1alpha1.EventOperationRefused, "Rotate", "cluster %s refused %s: %v", c.Name, campaign.Operation(step), err)
	}
	return fmt.Errorf("starting %s on cluster %s: %w", campaign.Operation(step), c.Name, err)
}

// writeStatus writes d into the campaign's status, and the time a step
// finished, when they changed; it records an event when the campaign halts
// or finishes a step.
func (r *Reconciler) writeStatus(ctx context.Context, rc *v1alpha1.RotationCampaign, d campaign.Decision, now time.Time) error {
	before := rc.DeepCopy()
	st := &rc.Status
	st.ObservedGeneration = rc.Generation
	st.Phase, st.Clusters, st.RotationPhases, st.Blocking = d.Phase, d.Counts, d.RotationPhases, d.Blocking
	stamp := metav1.NewTime(now)
	cond := d.Progressing
	cond.ObservedGeneration, cond.LastTransitionTime = rc.Generation, stamp
	meta.SetStatusCondition(&st.Conditions, cond)
	switch {
	case d.Phase == v1alpha1.CampaignPrepared && st.PreparedTime == nil:
		st.PreparedTime = &stamp
	case d.Phase == v1alpha1.CampaignCompleted && st.CompletedTime == nil:
		st.CompletedTime = &stamp
	}
	if equality.Semantic.DeepEqual(before.Status, rc.Status) {
		return nil
	}
	if err := r.Client.Status().Patch(ctx, rc, client.MergeFrom(before)); err != nil {
		return fmt.Errorf("writing the campaign's status: %w", err)
	}
	if d.Phase != before.Status.Phase {
		switch d.Phase {
		case v1alpha1.CampaignHalted:
			r.Recorder.Eventf(rc, nil, corev1.EventTypeWarning, v1alpha1.EventCampaignHalted, "Rotate", "%s", cond.Message)
		case v1alpha1.CampaignPrepared, v1alpha1.CampaignCompleted:
			r.Recorder.Eventf(rc, nil, corev1.EventTypeNormal, v1alpha1.EventCampaignStepDone, "Rotate", "%s", cond.Message)
		}
	}
	return nil
}
