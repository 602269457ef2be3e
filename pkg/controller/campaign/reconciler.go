package campaign

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
	"github.com/carousel-dev/carousel/pkg/campaign"
	"github.com/carousel-dev/carousel/pkg/clip"
	"github.com/carousel-dev/carousel/pkg/metapatch"
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
	// at again even if none of them changed (and a finished one six times
	// as late): a shard hears only of its own Clusters' changes.
	Resync   time.Duration
	Clock    clock.PassiveClock
	Recorder events.EventRecorder
	Metrics  *Metrics

	// memory is what this process did that its cache may not show yet.
	memory memory
}

// memory holds, per campaign, the Clusters it set the operation on whose
// annotation its cache does not show yet, so that a stale view never counts
// them as pending and starts more than the budget; and the Clusters that
// refused the operation, until they change. A campaign's memory goes with
// it, and a Cluster's when the campaign no longer selects it; so does a
// campaign's that was deleted and created again under its name. The refusals
// are also written into the campaign's status.refused, from which a pass
// takes back those its process does not hold (after a restart, or a shard
// handover): a Cluster that refused counts as failed until it changes,
// whichever process looks.
type memory struct {
	mu sync.Mutex
	// campaigns is what is held for each campaign, by its key.
	campaigns map[types.NamespacedName]*held
}

// held is what the process holds for one campaign: the one with uid.
type held struct {
	uid types.UID
	// started are the Clusters this process started, by UID (one deleted
	// and created again under its name is another): each with the
	// resourceVersion the start was patched onto, and the step.
	started map[types.UID]request
	// refused are the Clusters that refused, by UID.
	refused map[types.UID]refusal
}

type request struct {
	startedOn string
	step      v1alpha1.CampaignStep
}

type refusal struct {
	name, resourceVersion, message string
}

// Reconcile looks at one campaign and its Clusters.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	rc := &v1alpha1.RotationCampaign{}
	if err := r.Client.Get(ctx, req.NamespacedName, rc); err != nil {
		if apierrors.IsNotFound(err) {
			r.Forget(req)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	r.memory.own(req.NamespacedName, rc.UID)
	if !rc.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil
	}
	now := r.Clock.Now()
	// The webhook refuses such a spec, but it may be off or fail open: an
	// empty selector would select every Cluster of the namespace.
	if errs := v1alpha1.ValidateRotationCampaign(rc); len(errs) > 0 {
		return lookAgainIfStale(r.writeInvalid(ctx, rc, errs.ToAggregate().Error(), now))
	}
	step := rc.Spec.StepOrDefault()
	if step == v1alpha1.CampaignStart && rc.Status.CompleteStepTime != nil {
		// The webhook refuses the step going back too: the Clusters skipped
		// at the Complete step would be started again.
		return lookAgainIfStale(r.writeInvalid(ctx, rc, fmt.Sprintf("spec.step: the campaign's Complete step began at %s, and it does not go back to Start; "+
			"set it to Complete again, or create a new campaign to start another rotation", rc.Status.CompleteStepTime.UTC().Format(time.RFC3339)), now))
	}
	clusters, err := r.selected(ctx, rc)
	if err != nil {
		return ctrl.Result{}, err
	}
	// The times the step's decisions count from are stored before any
	// Cluster is started, so that a restart counts from the same ones. The
	// Complete step's, after which a rotation started is not the campaign's
	// (campaign.Classify), waits until none of the selected Clusters has a
	// start pending, the campaign's own included: one taken up late is the
	// campaign's all the same.
	stampComplete := step == v1alpha1.CampaignComplete && rc.Status.CompleteStepTime == nil &&
		!r.memory.starting(req.NamespacedName) && !slices.ContainsFunc(clusters, campaign.StartRequested)
	if rc.Status.StartTime == nil || stampComplete {
		before := rc.DeepCopy()
		stamp := metav1.NewTime(now)
		if rc.Status.StartTime == nil {
			rc.Status.StartTime = &stamp
		}
		if stampComplete {
			rc.Status.CompleteStepTime = &metav1.Time{Time: campaign.CompleteStepTime(now, clusters)}
		}
		// Only onto what was read: a stale read without a start time must
		// not move the first one.
		err := r.Client.Status().Patch(ctx, rc, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{}))
		switch {
		case apierrors.IsConflict(err):
			// Read before a change: the newer campaign is looked at again.
			return ctrl.Result{RequeueAfter: time.Second}, nil
		case err != nil:
			return ctrl.Result{}, fmt.Errorf("recording when the %s step began: %w", step, err)
		}
	}

	var completeStep time.Time
	if rc.Status.CompleteStepTime != nil {
		completeStep = rc.Status.CompleteStepTime.Time
	}
	classify := func() []campaign.Standing {
		standings := make([]campaign.Standing, 0, len(clusters))
		for _, c := range clusters {
			standings = append(standings, campaign.Classify(step, rc.Status.StartTime.Time, completeStep, rc.Spec.ProgressDeadlineOrDefault(), c, now))
		}
		return r.memory.amend(req.NamespacedName, step, clusters, standings, rc.Status.Refused)
	}
	byName := make(map[string]*v1alpha1.Cluster, len(clusters))
	for _, c := range clusters {
		byName[c.Name] = c
	}
	// A refused Cluster counts as failed from then on, so the wave is
	// planned again at once: that fills its place with the next Cluster,
	// or halts when the refusal used up the failure budget, before any
	// more of the wave starts. It ends because each refusal fails one more
	// Cluster.
	var d campaign.Decision
	var started []string
	for refusals := true; refusals; {
		d, refusals = campaign.Plan(&rc.Spec, classify()), false
		for _, name := range d.Start {
			refused, err := r.start(ctx, rc, byName[name], step)
			if err != nil {
				r.recordWave(rc, step, started)
				return lookAgainIfStale(err)
			}
			if refused {
				refusals = true
				break
			}
			started = append(started, name)
		}
	}
	r.recordWave(rc, step, started)
	if err := r.writeStatus(ctx, rc, d, r.memory.refusals(req.NamespacedName), now); err != nil {
		return lookAgainIfStale(err)
	}
	r.Metrics.record(rc)
	return r.next(d, now), nil
}

// Forget drops what the controller holds for a campaign that is gone, or
// no longer this shard's.
func (r *Reconciler) Forget(req ctrl.Request) {
	r.Metrics.forget(req.Namespace, req.Name)
	r.memory.forget(req.NamespacedName)
}

// next is when the campaign is looked at again without a change: when a
// rotating Cluster would fail its deadline, and every Resync in a shard.
func (r *Reconciler) next(d campaign.Decision, now time.Time) ctrl.Result {
	var after []time.Duration
	if !d.RecheckAt.IsZero() {
		after = append(after, d.RecheckAt.Sub(now))
	}
	if r.Resync > 0 {
		resync := r.Resync
		if d.Progressing.Reason == v1alpha1.ReasonCampaignStepDone {
			resync *= 6
		}
		after = append(after, resync)
	}
	if len(after) == 0 {
		return ctrl.Result{}
	}
	return ctrl.Result{RequeueAfter: slices.Min(after)}
}

// recordWave records one event for the Clusters a pass started.
func (r *Reconciler) recordWave(rc *v1alpha1.RotationCampaign, step v1alpha1.CampaignStep, started []string) {
	if len(started) == 0 {
		return
	}
	r.Recorder.Eventf(rc, nil, corev1.EventTypeNormal, v1alpha1.EventCampaignOperationStarted, "Rotate",
		"%s on %d Clusters: %s", campaign.Operation(step), len(started), campaign.NameList(started))
}

// amend corrects what the cache shows of campaign's Clusters with what this
// process did: a Cluster it started that the cache still shows as it was
// before the start is in progress, not pending (at the Complete step, a
// start made at the Start step holds its place as one not taken up yet);
// one the cache shows pending in a later version dropped the operation (the
// Cluster controller refused it after the webhook let it in) and has
// failed, as one the webhook refused has, until it changes again. A started
// Cluster is remembered while its annotation is there or the cache shows
// it before the start, and forgotten once the cache shows it taken up;
// changed refused ones are forgotten. recorded are the refusals the
// campaign's status holds: one this process does not hold is taken back (a
// refusal of a Cluster that changed since is forgotten again at once).
func (m *memory) amend(campaignKey types.NamespacedName, step v1alpha1.CampaignStep, clusters []*v1alpha1.Cluster, standings []campaign.Standing,
	recorded []v1alpha1.CampaignRefusal) []campaign.Standing {
	m.mu.Lock()
	defer m.mu.Unlock()
	h := m.heldLocked(campaignKey)
	started, refused := h.started, h.refused
	for _, r := range recorded {
		if _, ok := refused[r.UID]; !ok {
			refused[r.UID] = refusal{name: r.Name, resourceVersion: r.ResourceVersion, message: r.Message}
		}
	}
	selected := sets.New[types.UID]()
	for i, c := range clusters {
		s := &standings[i]
		selected.Insert(c.UID)
		if req, ok := started[c.UID]; ok {
			startedOn := req.startedOn
			_, requested := c.Annotations[v1alpha1.OperationAnnotation]
			switch {
			case s.State == v1alpha1.CampaignClusterPending && c.ResourceVersion == startedOn:
				s.State, s.Rotating, s.Message = v1alpha1.CampaignClusterInProgress, true, "requested"
			case c.ResourceVersion == startedOn && req.step == v1alpha1.CampaignStart && step == v1alpha1.CampaignComplete:
				*s = campaign.StartNotTakenUp(*s)
			case s.State == v1alpha1.CampaignClusterPending:
				delete(started, c.UID)
				h.refuse(c, "the Cluster dropped the operation the campaign set (its OperationRefused event says why)")
			case !requested:
				// Taken up: the rotation shows it from now on.
				delete(started, c.UID)
			}
		}
		if r, ok := refused[c.UID]; ok {
			if r.resourceVersion != c.ResourceVersion {
				delete(refused, c.UID)
			} else if s.State == v1alpha1.CampaignClusterPending {
				s.State, s.Message = v1alpha1.CampaignClusterFailed, "refused: "+r.message
			}
		}
	}
	for uid := range started {
		if !selected.Has(uid) {
			delete(started, uid)
		}
	}
	for uid := range refused {
		if !selected.Has(uid) {
			delete(refused, uid)
		}
	}
	return standings
}

// starting reports whether a Cluster this process started at the
// campaign's Start step has not been seen to take the start up yet.
func (m *memory) starting(campaignKey types.NamespacedName) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, req := range m.heldLocked(campaignKey).started {
		if req.step == v1alpha1.CampaignStart {
			return true
		}
	}
	return false
}

// remember records that this process started cluster at step, patching the
// operation onto its resourceVersion startedOn.
func (m *memory) remember(campaignKey types.NamespacedName, cluster types.UID, startedOn string, step v1alpha1.CampaignStep) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.heldLocked(campaignKey).started[cluster] = request{startedOn: startedOn, step: step}
}

func (m *memory) refuse(campaignKey types.NamespacedName, c *v1alpha1.Cluster, message string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.heldLocked(campaignKey).refuse(c, message)
}

// maxRefusalMessage bounds the message of a refusal kept in the status,
// which holds one for every Cluster that refused (an admission webhook's
// message can be long).
const maxRefusalMessage = 256

// refuse records that c refused the campaign's operation.
func (h *held) refuse(c *v1alpha1.Cluster, message string) {
	h.refused[c.UID] = refusal{name: c.Name, resourceVersion: c.ResourceVersion, message: clip.Bytes(message, maxRefusalMessage)}
}

// refusals are the campaign's refusals for its status, by name; nil when
// there are none.
func (m *memory) refusals(campaignKey types.NamespacedName) []v1alpha1.CampaignRefusal {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []v1alpha1.CampaignRefusal
	for uid, r := range m.heldLocked(campaignKey).refused {
		out = append(out, v1alpha1.CampaignRefusal{Name: r.name, UID: uid, ResourceVersion: r.resourceVersion, Message: r.message})
	}
	slices.SortFunc(out, func(a, b v1alpha1.CampaignRefusal) int {
		return cmp.Or(strings.Compare(a.Name, b.Name), strings.Compare(string(a.UID), string(b.UID)))
	})
	return out
}

func (m *memory) forget(campaignKey types.NamespacedName) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.campaigns, campaignKey)
}

// heldLocked is what is held for campaignKey, empty at first.
func (m *memory) heldLocked(campaignKey types.NamespacedName) *held {
	h := m.campaigns[campaignKey]
	if h == nil {
		if m.campaigns == nil {
			m.campaigns = map[types.NamespacedName]*held{}
		}
		h = &held{started: map[types.UID]request{}, refused: map[types.UID]refusal{}}
		m.campaigns[campaignKey] = h
	}
	return h
}

// own makes what is held under campaignKey the campaign uid's, forgetting
// what another campaign of that name left. A campaign deleted and created
// again under its name (kubectl replace --force, a GitOps Replace) may reach
// the controller as one pass on the new campaign, the workqueue having
// merged the two events, so the pass that finds it gone and forgets it
// never comes: the new one would count the old one's refused Clusters as
// failed (halted at once with maxFailures 0) and its starts as its own.
func (m *memory) own(campaignKey types.NamespacedName, uid types.UID) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if h := m.campaigns[campaignKey]; h != nil && h.uid == uid {
		return
	}
	delete(m.campaigns, campaignKey)
	m.heldLocked(campaignKey).uid = uid
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
	// A pass reads every selected Cluster and changes none in place (start
	// patches a copy), so the cache hands out its own objects instead of
	// copying a whole fleet's on every pass.
	var list v1alpha1.ClusterList
	if err := reader.List(ctx, &list, client.InNamespace(rc.Namespace), client.MatchingLabelsSelector{Selector: selector},
		client.UnsafeDisableDeepCopy); err != nil {
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
// resourceVersion the decision was made on, so that an operation is never
// set on a Cluster that changed since (a conflict: the campaign looks
// again). A refusal by the Cluster webhook is recorded as an event and
// remembered until the Cluster changes; it reports refused, not an error.
// c becomes what the API server returned, or stays as it was.
func (r *Reconciler) start(ctx context.Context, rc *v1alpha1.RotationCampaign, c *v1alpha1.Cluster, step v1alpha1.CampaignStep) (refused bool, err error) {
	startedOn := c.ResourceVersion
	patched := c.DeepCopy()
	if patched.Annotations == nil {
		patched.Annotations = map[string]string{}
	}
	patched.Annotations[v1alpha1.OperationAnnotation] = string(campaign.Operation(step))
	err = r.Client.Patch(ctx, patched, metapatch.AnnotationsFrom(c.Annotations))
	switch {
	case err == nil:
		*c = *patched
		r.memory.remember(client.ObjectKeyFromObject(rc), c.UID, startedOn, step)
		log.FromContext(ctx).Info("Started the step's operation on a Cluster", "cluster", c.Name, "operation", campaign.Operation(step))
		return false, nil
	case apierrors.IsConflict(err) || apierrors.IsNotFound(err):
		// Deleted since the cache showed it, or being deleted: the next
		// pass's selection leaves it out.
		log.FromContext(ctx).V(1).Info("The Cluster changed, or was deleted, since it was looked at: looking again in a second", "cluster", c.Name)
		return false, fmt.Errorf("cluster %s changed, or was deleted, since it was looked at: %w", c.Name, errors.Join(errStaleCluster, err))
	case apierrors.IsForbidden(err) || apierrors.IsInvalid(err):
		r.memory.refuse(client.ObjectKeyFromObject(rc), c, err.Error())
		r.Recorder.Eventf(rc, c, corev1.EventTypeWarning, v1alpha1.EventOperationRefused, "Rotate",
			"cluster %s refused %s: %v", c.Name, campaign.Operation(step), err)
		return true, nil
	}
	return false, fmt.Errorf("starting %s on cluster %s: %w", campaign.Operation(step), c.Name, err)
}

// writeInvalid records that the campaign's spec is invalid, and why, in its
// Progressing condition; it starts nothing until the spec is mended.
func (r *Reconciler) writeInvalid(ctx context.Context, rc *v1alpha1.RotationCampaign, why string, now time.Time) error {
	before := rc.DeepCopy()
	rc.Status.ObservedGeneration = rc.Generation
	meta.SetStatusCondition(&rc.Status.Conditions, metav1.Condition{Type: v1alpha1.ConditionCampaignProgressing,
		Status: metav1.ConditionFalse, Reason: v1alpha1.ReasonCampaignInvalidSpec, ObservedGeneration: rc.Generation,
		LastTransitionTime: metav1.NewTime(now), Message: "the campaign starts nothing until its spec is mended: " + why})
	if written, err := r.patchStatus(ctx, rc, before); !written || err != nil {
		return err
	}
	r.Recorder.Eventf(rc, nil, corev1.EventTypeWarning, v1alpha1.ReasonCampaignInvalidSpec, "Rotate", "%s", why)
	return nil
}

// errStaleCampaign means that the campaign was read before a change: its
// status is not written from that read.
var errStaleCampaign = errors.New("the campaign changed since it was read")

// errStaleCluster means that a Cluster was read before a change or its
// deletion: it is looked at again.
var errStaleCluster = errors.New("the Cluster changed since it was read")

// lookAgainIfStale is the result of a pass that ended with err: a second
// later, to look at the newer campaign or Cluster, when the one written was
// read before a change.
func lookAgainIfStale(err error) (ctrl.Result, error) {
	if errors.Is(err, errStaleCampaign) || errors.Is(err, errStaleCluster) || apierrors.IsConflict(err) {
		return ctrl.Result{RequeueAfter: time.Second}, nil
	}
	return ctrl.Result{}, err
}

// patchStatus writes rc's status when it differs from before's, and says
// whether it did. It writes only onto the campaign that was read
// (errStaleCampaign otherwise): a pass on a stale read, one that does not
// show the last pass's write yet, would stamp the time a step was done again,
// later, and announce it a second time.
func (r *Reconciler) patchStatus(ctx context.Context, rc, before *v1alpha1.RotationCampaign) (bool, error) {
	if equality.Semantic.DeepEqual(before.Status, rc.Status) {
		return false, nil
	}
	err := r.Client.Status().Patch(ctx, rc, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{}))
	switch {
	case apierrors.IsConflict(err):
		return false, errStaleCampaign
	case err != nil:
		return false, fmt.Errorf("writing the campaign's status: %w", err)
	}
	return true, nil
}

// writeStatus writes d and refused into the campaign's status, and the time
// a step finished, when they changed; it records an event when the campaign
// halts or finishes a step.
func (r *Reconciler) writeStatus(ctx context.Context, rc *v1alpha1.RotationCampaign, d campaign.Decision, refused []v1alpha1.CampaignRefusal, now time.Time) error {
	before := rc.DeepCopy()
	st := &rc.Status
	st.ObservedGeneration = rc.Generation
	st.Phase, st.Clusters, st.RotationPhases, st.Blocking, st.Refused = d.Phase, d.Counts, d.RotationPhases, d.Blocking, refused
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
	if written, err := r.patchStatus(ctx, rc, before); !written || err != nil {
		return err
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
