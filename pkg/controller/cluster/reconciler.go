// Package cluster is the Cluster controller: it issues a managed cluster's
// CAs, trust bundles, certificates and kubeconfigs, rolls the workloads that
// consume them, and drives the two phases of a CA rotation.
package cluster

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
	"github.com/carousel-dev/carousel/pkg/clip"
	"github.com/carousel-dev/carousel/pkg/controller/workerrollout"
	"github.com/carousel-dev/carousel/pkg/maintenance"
	"github.com/carousel-dev/carousel/pkg/metapatch"
	"github.com/carousel-dev/carousel/pkg/rotation"
)

// EvidenceChecker observes the managed cluster; see package evidence.
type EvidenceChecker interface {
	ClientAccepted(ctx context.Context, endpoint string, serverTrust, certPEM, keyPEM []byte) error
	ClientRejected(ctx context.Context, endpoint string, serverTrust, certPEM, keyPEM []byte) error
	ServesChainTo(ctx context.Context, endpoint string, roots []byte) error
	KubeRootCABehind(ctx context.Context, endpoint string, serverTrust, certPEM, keyPEM, want []byte) ([]string, error)
	APIServicesBehind(ctx context.Context, endpoint string, serverTrust, certPEM, keyPEM, want []byte) ([]string, error)
	TokenSecretsBehind(ctx context.Context, endpoint string, serverTrust, certPEM, keyPEM []byte, keyID string) ([]string, error)
}

// Reconciler reconciles Clusters.
type Reconciler struct {
	Client client.Client
	// APIReader reads the API server directly, past the cache; nil means
	// Client. It is used only on rare paths (a CA Secret the cache lacks).
	APIReader client.Reader
	Clock     clock.PassiveClock
	Recorder  events.EventRecorder
	Evidence  EvidenceChecker
	// WorkerRollouts carries out each rollout strategy; a pool whose strategy
	// has none waits for a rollout-workers operation.
	WorkerRollouts map[v1alpha1.WorkerRolloutStrategy]WorkerRollout
	// CAExpiryWarning is how long before a CA expires the CAExpiringSoon
	// condition turns True.
	CAExpiryWarning time.Duration
	// Recommendations is when the CARotationRecommended condition turns True.
	Recommendations rotation.RecommendationPolicy
	// ManagedPollInterval is how soon a phase that waits on the managed
	// cluster (its API server's evidence, its nodes) looks again: changes
	// there raise no event in the management cluster. While a check keeps
	// failing the interval grows, up to MaxManagedPollInterval.
	ManagedPollInterval time.Duration
	// MaxManagedPollInterval caps that backoff; zero means
	// DefaultMaxManagedPollInterval.
	MaxManagedPollInterval time.Duration
	Metrics                *Metrics
	// AuditWebhook, when set, gives every Cluster a Secret with the
	// kubeconfig with which its API server sends Carousel its audit events.
	AuditWebhook *AuditWebhook
	// ManagedNodes lists a managed cluster's Nodes and node Leases for the
	// old-CA usage gate; nil leaves Nodes out of it.
	ManagedNodes func(ctx context.Context, c *v1alpha1.Cluster) ([]corev1.Node, []coordinationv1.Lease, error)
	// OldCAUsageWindow is how recent a client certificate's use must be for
	// the old-CA usage gate to count it; zero means DefaultOldCAUsageWindow.
	OldCAUsageWindow time.Duration
	// OfflineNodes confirms, for the old-CA usage gate, that a Node is
	// offline (shared with the InPlace rollout); nil takes one for offline
	// at the first look.
	OfflineNodes *workerrollout.OfflineNodes

	// OnForget, when set, is called with each Cluster Forget drops, so that
	// the controllers beside this one drop what they hold for it.
	OnForget func(types.NamespacedName)

	// indexedByCluster says that Client reads from a cache indexed by
	// clusterIndex (set by SetupWithManager).
	indexedByCluster bool
	// staleReads bounds the one-second retries of passes that read a cache
	// behind the API server.
	staleReads staleReads
	// unreadNodes: since when reading a Cluster's Nodes for the old-CA
	// usage gate has failed.
	unreadNodes runs
	// verdicts: the old-CA usage gate's verdicts this process reached.
	verdicts verdicts
	// failingChecks: since when the checks of a Cluster's managed API
	// server have failed (ControlPlaneReachable EndpointUnreachable).
	failingChecks runs
	// auditBundleUnreadable is since when the audit webhook's CA bundle has
	// been unreadable (auditBundleRun).
	auditBundleUnreadable runs
}

// DefaultMaxManagedPollInterval caps the backoff of the managed-cluster polls.
const DefaultMaxManagedPollInterval = 5 * time.Minute

// Forget drops the metrics' series of a Cluster that is gone, or no longer
// this shard's.
func (r *Reconciler) Forget(req ctrl.Request) {
	r.Metrics.forget(req.Namespace, req.Name)
	r.staleReads.forget(req.NamespacedName)
	r.unreadNodes.forget(req.NamespacedName)
	r.verdicts.forget(req.NamespacedName)
	r.failingChecks.forget(req.NamespacedName)
	r.OfflineNodes.Forget(req.NamespacedName)
	if r.OnForget != nil {
		r.OnForget(req.NamespacedName)
	}
}

// Reconcile brings one Cluster's credentials to the state its phase requires.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (result ctrl.Result, retErr error) {
	c := &v1alpha1.Cluster{}
	if err := r.Client.Get(ctx, req.NamespacedName, c); err != nil {
		if apierrors.IsNotFound(err) {
			r.Forget(req)
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, err
	}
	if !c.DeletionTimestamp.IsZero() {
		// Every object Carousel wrote is owned by the Cluster and garbage-collected with it.
		return ctrl.Result{}, nil
	}
	now := r.Clock.Now()
	if value, queued := c.Annotations[v1alpha1.MaintenanceOperationAnnotation]; queued {
		if _, pending := c.Annotations[v1alpha1.OperationAnnotation]; !pending &&
			maintenance.Decide(value, c.Spec.Maintenance, rotation.PhasesOf(c), now).Run && r.gateOpen(value, c) {
			return r.written(req.NamespacedName, now,
				r.startOperation(ctx, c, value, v1alpha1.EventMaintenanceOperationStarted, "Maintenance window open: carrying out "+value))
		}
	}
	if step := rotation.AutomaticOf(c); step.DueAt(now) && !operationPending(c) && r.gateOpen(step.Operation, c) &&
		maintenance.Decide(step.Operation, c.Spec.Maintenance, rotation.PhasesOf(c), now).Run {
		return r.written(req.NamespacedName, now, r.startOperation(ctx, c, step.Operation, v1alpha1.EventAutomaticCARotation,
			fmt.Sprintf("Maintenance window open: carrying out %s: %s", step.Operation, step.Why)))
	}
	// A rotation starts from issued credentials: a start on a Cluster that
	// has none yet waits (annotation kept) until this pass has issued them.
	// A completion waits likewise for this pass to judge the old-CA usage gate.
	requested, err := v1alpha1.ParseOperation(c.Annotations[v1alpha1.OperationAnnotation])
	deferred := err == nil && (requested.Verb.StartsCARotation() && !c.CredentialsIssued() || r.completionWaitsForGate(requested, c))
	if _, ok := c.Annotations[v1alpha1.OperationAnnotation]; ok && !deferred {
		return r.written(req.NamespacedName, now, r.handleOperation(ctx, c))
	}

	before := c.DeepCopy()
	s := &scope{cluster: c}
	// How the pass ended, for the status: unlike retErr, errStaleCache too,
	// and errPanicked while a panic unwinds the pass.
	passErr := errPanicked
	// Whether the pass ended on a stale read, within StaleReadLimit or past it.
	stale := false
	defer func() {
		if deferred && retErr == nil && result.RequeueAfter > time.Second && !r.completionAwaitsNodes(requested, c) {
			result.RequeueAfter = time.Second
		}
		r.updateStatus(s, passErr)
		if retErr == nil {
			result = lookAgainBy(result, s.wakeUp, r.Clock.Now())
		}
		if !equality.Semantic.DeepEqual(before.Status, c.Status) {
			err := r.Client.Status().Patch(ctx, c, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{}))
			switch {
			case apierrors.IsConflict(err):
				// Decided on a stale read; the newer Cluster is reconciled again.
				stale = true
				result, retErr = r.staleReads.retry(req.NamespacedName, now, err)
			case err != nil:
				result, retErr = ctrl.Result{}, errors.Join(retErr, fmt.Errorf("patching status: %w", err))
			default:
				r.statusWritten(c, before)
			}
		}
		if !stale {
			r.staleReads.forget(req.NamespacedName)
		}
	}()
	result, passErr = r.reconcileCredentials(ctx, s)
	if staleRead(passErr) {
		stale = true
		log.FromContext(ctx).V(1).Info("cache behind the API server; retrying", "error", passErr.Error())
		result, retErr = r.staleReads.retry(req.NamespacedName, now, passErr)
		if retErr != nil {
			// Past StaleReadLimit: the pass failed, and the status says so.
			passErr = retErr
		}
		return result, retErr
	}
	return result, passErr
}

// staleRead says whether a pass ended because what it read was behind the
// API server: errStaleCache, or a write that carried a resourceVersion the
// object has moved on from (a Secret or a consumer's Deployment the cache
// had not caught up with, routine while a rotation rolls them). Such a pass
// is retried in a second and says nothing of the Cluster's health.
func staleRead(err error) bool {
	return errors.Is(err, errStaleCache) || apierrors.IsConflict(err)
}

// handleOperation records an operation in the status first and removes the
// annotation second, so a crash in between is recognised by
// rotation.AlreadyApplied and the operation is not applied twice. Both writes
// carry the resourceVersion that was read: a decision taken on a stale read
// fails instead of being persisted. An operation is refused (a Warning event,
// and the annotation removed) only for what it asks; one whose write failed
// keeps its annotation and is tried again.
func (r *Reconciler) handleOperation(ctx context.Context, c *v1alpha1.Cluster) error {
	value := c.Annotations[v1alpha1.OperationAnnotation]
	op, err := v1alpha1.ParseOperation(value)
	if err == nil && !rotation.AlreadyApplied(c.CARotation(), op) {
		// The webhook refuses such a completion; this catches one that met
		// dependents found after it was admitted.
		if err = rotation.OldCAsUnused(op, c); err == nil {
			err = r.applyOperation(ctx, c, op)
			if err != nil && !errors.As(err, new(refusal)) {
				// A write failed: the annotation stays, and the
				// operation is tried again.
				if !apierrors.IsConflict(err) {
					r.event(c, corev1.EventTypeWarning, v1alpha1.EventOperationNotRecorded, "Operation %q not recorded yet, retrying: %v", value, err)
				}
				return err
			}
		}
	}
	if err != nil {
		r.event(c, corev1.EventTypeWarning, v1alpha1.EventOperationRefused, "Operation %q refused in phase %q: %v", value, c.CARotationPhase(), err)
	}
	before := maps.Clone(c.Annotations)
	delete(c.Annotations, v1alpha1.OperationAnnotation)
	var announce func()
	if err == nil {
		announce = r.dequeue(c, op, value)
	}
	if err := r.Client.Patch(ctx, c, metapatch.AnnotationsFrom(before)); err != nil {
		return fmt.Errorf("removing the operation annotation: %w", err)
	}
	if announce != nil {
		announce()
	}
	return nil
}

// dequeue takes from the operation queued for the maintenance window, in c's
// annotations, what op (set as value) did or made moot (maintenance.Left),
// which would otherwise start or complete the next rotation. It returns what
// announces it (a MaintenanceOperationDropped event), for the caller to call
// once its write of the annotations succeeded; nil when nothing went.
func (r *Reconciler) dequeue(c *v1alpha1.Cluster, op v1alpha1.Operation, value string) (announce func()) {
	queued, ok := c.Annotations[v1alpha1.MaintenanceOperationAnnotation]
	if !ok {
		return nil
	}
	dropped, rest := maintenance.Left(op, queued)
	switch {
	case !dropped:
		return nil
	case rest != "":
		c.Annotations[v1alpha1.MaintenanceOperationAnnotation] = rest
		return func() {
			r.event(c, corev1.EventTypeNormal, v1alpha1.EventMaintenanceOperationDropped,
				"Replaced %s=%s by %s: %s=%s did, or made moot, the rest of it",
				v1alpha1.MaintenanceOperationAnnotation, queued, rest, v1alpha1.OperationAnnotation, value)
		}
	}
	delete(c.Annotations, v1alpha1.MaintenanceOperationAnnotation)
	return func() {
		r.event(c, corev1.EventTypeNormal, v1alpha1.EventMaintenanceOperationDropped,
			"Dropped %s=%s: %s=%s did it, or ended the rotation it was for", v1alpha1.MaintenanceOperationAnnotation, queued, v1alpha1.OperationAnnotation, value)
	}
}

// errPanicked is how a pass ended that a panic unwound: the status it writes
// on the way out says so, not that the credentials are issued.
var errPanicked = errors.New("the pass stopped in a panic")

// refusal is an operation's refusal by applyOperation: the rotations' phases
// do not allow what it asks.
type refusal struct{ error }

func (r refusal) Unwrap() error { return r.error }

// applyOperation records what op changes in the status of both rotations, in
// one write, and carries out what it does besides. It returns a refusal when
// the phases do not allow op, and any other error when a write failed.
func (r *Reconciler) applyOperation(ctx context.Context, c *v1alpha1.Cluster, op v1alpha1.Operation) error {
	value := op.String()
	next, err := rotation.ApplyOperation(c.CARotation(), op, c.Spec.Workers, r.now())
	if err != nil {
		return refusal{err}
	}
	switch op.Verb.CAVerb() {
	case v1alpha1.VerbStartCARotation, v1alpha1.VerbStartCARotationWithoutWorkersRollout:
		// The old-CA usage gate judges by these records' history alone.
		if err := r.recordRecordUIDs(ctx, c, next); err != nil {
			return err
		}
	}
	nextKey := c.ServiceAccountKeyRotation()
	if !rotation.ServiceAccountKeyAlreadyApplied(nextKey, op.Verb) {
		if nextKey, err = rotation.ApplyServiceAccountKeyOperation(nextKey, op.Verb, r.now()); err != nil {
			return refusal{err}
		}
	}
	before := c.DeepCopy()
	if !equality.Semantic.DeepEqual(next, c.CARotation()) {
		setCARotation(c, next)
	}
	if !equality.Semantic.DeepEqual(nextKey, c.ServiceAccountKeyRotation()) {
		setServiceAccountKeyRotation(c, nextKey)
	}
	switch op.Verb {
	case v1alpha1.VerbReissueCA:
		// The next reconcile may then generate these roles' CAs.
		forgetCAs(c, op.Roles)
	case v1alpha1.VerbReissueServiceAccountKey:
		if err := r.reissueServiceAccountKey(ctx, c); err != nil {
			return fmt.Errorf("operation %s: %w", value, err)
		}
	}
	if equality.Semantic.DeepEqual(before.Status, c.Status) {
		return nil
	}
	// With the phase it enters, the recommendation the next pass would make
	// of it (it follows from the rotation's status and the clock alone): that
	// pass then has no status write of its own when it changes nothing else,
	// as the one that drops the old CAs in Finalizing. The pass after the
	// annotation's removal looks again, and schedules the next change.
	r.setRecommendationCondition(c)
	if err := r.Client.Status().Patch(ctx, c, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})); err != nil {
		return fmt.Errorf("recording operation %s: %w", value, err)
	}
	if op.Verb == v1alpha1.VerbReissueCA {
		r.event(c, corev1.EventTypeWarning, v1alpha1.EventCAReissueAccepted,
			"Operation %q accepted: a lost CA Secret of these roles is replaced by a new CA, and one put back from an older copy keeps the CA it holds", value)
	}
	r.statusWritten(c, before)
	return nil
}

// written ends a pass that wrote the Cluster's operation, with the write's
// error: a conflict means the pass decided on a stale read, and the newer
// Cluster is reconciled again in a second (staleReads); anything else ends
// the run of stale reads.
func (r *Reconciler) written(key types.NamespacedName, now time.Time, err error) (ctrl.Result, error) {
	if apierrors.IsConflict(err) {
		return r.staleReads.retry(key, now, err)
	}
	r.staleReads.forget(key)
	return ctrl.Result{}, err
}

// startOperation carries out, in its maintenance window, an operation queued
// for it or made due by spec.caRotation.automatic: one write sets it as the
// operation annotation, which the next pass handles as if a user had set it,
// and dequeues it, or, for an automatic one, what it does of the queued
// operation (dequeue: a queued start goes, a complete queued for the rotation
// it begins stays); an event with reason and note says why.
func (r *Reconciler) startOperation(ctx context.Context, c *v1alpha1.Cluster, value, reason, note string) error {
	before := maps.Clone(c.Annotations)
	if c.Annotations == nil {
		c.Annotations = map[string]string{}
	}
	c.Annotations[v1alpha1.OperationAnnotation] = value
	var announce func()
	if c.Annotations[v1alpha1.MaintenanceOperationAnnotation] == value {
		delete(c.Annotations, v1alpha1.MaintenanceOperationAnnotation) // carried out as queued
	} else if op, err := v1alpha1.ParseOperation(value); err == nil {
		announce = r.dequeue(c, op, value)
	}
	if err := r.Client.Patch(ctx, c, metapatch.AnnotationsFrom(before)); err != nil {
		return fmt.Errorf("carrying out %s: %w", value, err)
	}
	r.event(c, corev1.EventTypeNormal, reason, "%s", note)
	if announce != nil {
		announce()
	}
	return nil
}

// gateClosed is why the old-CA usage gate holds an operation Carousel would
// set for the Cluster (queued for the maintenance window); nil when it does
// not, or when the value does not parse, which the webhook refuses.
func gateClosed(value string, c *v1alpha1.Cluster) error {
	op, err := v1alpha1.ParseOperation(value)
	if err != nil {
		return nil
	}
	return rotation.OldCAsUnused(op, c)
}

// gateOpen says whether the old-CA usage gate lets through an operation
// Carousel would set for the Cluster (queued for the maintenance window, or
// automatic): a completion only on a verdict this process reached.
func (r *Reconciler) gateOpen(value string, c *v1alpha1.Cluster) bool {
	op, err := v1alpha1.ParseOperation(value)
	return gateClosed(value, c) == nil && (err != nil || !r.completionWaitsForGate(op, c))
}

// operationPending: a user's operation, now or for the maintenance window,
// comes before an automatic one. A queued one comes first only when the
// rotation's phases allow it: one queued for a later phase (a complete
// queued before the start of the rotation it is for), or one the window
// never runs, would otherwise hold the automatic step for good, and with it
// the phase that lets the queued one run.
func operationPending(c *v1alpha1.Cluster) bool {
	if _, now := c.Annotations[v1alpha1.OperationAnnotation]; now {
		return true
	}
	value, queued := c.Annotations[v1alpha1.MaintenanceOperationAnnotation]
	if !queued {
		return false
	}
	op, err := maintenance.Queueable(value)
	return err == nil && rotation.Allowed(op.Verb, rotation.PhasesOf(c)) == nil
}

func setCARotation(c *v1alpha1.Cluster, rot *v1alpha1.CARotation) {
	credentialsRotation(c).CertificateAuthorities = rot
}

func setServiceAccountKeyRotation(c *v1alpha1.Cluster, rot *v1alpha1.ServiceAccountKeyRotation) {
	credentialsRotation(c).ServiceAccountKey = rot
}

// credentialsRotation returns the Cluster's rotation status, created empty
// when it has none.
func credentialsRotation(c *v1alpha1.Cluster) *v1alpha1.CredentialsRotation {
	if c.Status.Credentials == nil {
		c.Status.Credentials = &v1alpha1.ClusterCredentials{}
	}
	if c.Status.Credentials.Rotation == nil {
		c.Status.Credentials.Rotation = &v1alpha1.CredentialsRotation{}
	}
	return c.Status.Credentials.Rotation
}

// statusWritten announces, once the status write that records them has
// succeeded, what changed from before to c: the phases of both rotations, and
// the conditions that newly call on the user (newConditionWarnings). A write
// that fails announces nothing, so the pass that retries it after a conflict
// does not announce the same change twice.
func (r *Reconciler) statusWritten(c, before *v1alpha1.Cluster) {
	for _, w := range newConditionWarnings(before.Status.Conditions, c.Status.Conditions) {
		r.event(c, corev1.EventTypeWarning, w.reason, "%s", w.message)
	}
	if from, to := before.CARotationPhase(), c.CARotationPhase(); from != to {
		r.phaseChanged(c, from, to)
	}
	if from, to := before.ServiceAccountKeyRotationPhase(), c.ServiceAccountKeyRotationPhase(); from != to {
		r.event(c, corev1.EventTypeNormal, v1alpha1.EventServiceAccountKeyRotationPhaseChanged, "service-account key rotation phase %s → %s",
			rotation.ServiceAccountKeyPhaseName(from), to)
	}
}

// phaseChanged records a persisted CA phase change: an event and, at the end
// of a phase Carousel works through, its duration.
func (r *Reconciler) phaseChanged(c *v1alpha1.Cluster, from, to v1alpha1.CARotationPhase) {
	r.event(c, corev1.EventTypeNormal, v1alpha1.EventRotationPhaseChanged, "CA rotation phase %s → %s", rotation.PhaseName(from), to)
	rot := c.CARotation()
	switch to {
	case v1alpha1.RotationPrepared:
		r.Metrics.phaseDuration(v1alpha1.RotationPreparing, rot.LastInitiationTime, rot.LastInitiationFinishedTime)
	case v1alpha1.RotationCompleted:
		r.Metrics.phaseDuration(v1alpha1.RotationFinalizing, rot.LastCompletionTriggeredTime, rot.LastCompletionTime)
	case v1alpha1.RotationAborted:
		r.Metrics.phaseDuration(v1alpha1.RotationAborting, rot.LastAbortTriggeredTime, rot.LastAbortTime)
	}
}

// now is the clock's time at the precision the API stores.
func (r *Reconciler) now() metav1.Time {
	return metav1.NewTime(r.Clock.Now().UTC().Truncate(time.Second))
}

func (r *Reconciler) event(c *v1alpha1.Cluster, eventType, reason, format string, args ...any) {
	if r.Recorder != nil {
		r.Recorder.Eventf(c, nil, eventType, reason, "Reconcile", "%s", eventNote(fmt.Sprintf(format, args...)))
	}
}

// maxEventNote is the longest note the API server takes in an
// events.k8s.io/v1 Event; a longer one is refused and the event lost.
const maxEventNote = 1024

// eventNote is note, cut to maxEventNote bytes at a character boundary and
// ending in "…" when it was longer.
func eventNote(note string) string {
	return clip.Bytes(note, maxEventNote)
}

func (r *Reconciler) setReadyCondition(c *v1alpha1.Cluster, err error) {
	cond := metav1.Condition{Type: v1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonCredentialsIssued,
		Message: "every CA, trust bundle, certificate and kubeconfig is issued"}
	var b *blockedError
	switch {
	case errors.As(err, &b):
		cond.Status, cond.Reason, cond.Message = metav1.ConditionFalse, b.reason, b.message
	case err != nil:
		cond.Status, cond.Reason, cond.Message = metav1.ConditionFalse, v1alpha1.ReasonReconcileFailed, err.Error()
	}
	r.setCondition(c, cond)
}
