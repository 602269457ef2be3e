// Package cluster is the Cluster controller: it issues a managed cluster's
// CAs, trust bundles, certificates and kubeconfigs, rolls the workloads that
// consume them, and drives the two phases of a CA rotation.
package cluster

import (
	"context"
	"errors"
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
	"github.com/carousel-dev/carousel/pkg/credentials"
	"github.com/carousel-dev/carousel/pkg/rotation"
)

// EvidenceChecker observes the managed cluster's API server; see package evidence.
type EvidenceChecker interface {
	ClientAccepted(ctx context.Context, endpoint string, serverTrust, certPEM, keyPEM []byte) error
	ClientRejected(ctx context.Context, endpoint string, serverTrust, certPEM, keyPEM []byte) error
	ServesChainTo(ctx context.Context, endpoint string, roots []byte) error
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
	// ManagedPollInterval is how soon a phase that waits on the managed
	// cluster (its API server's evidence, its nodes) looks again: changes
	// there raise no event in the management cluster. While a check keeps
	// failing the interval grows, up to MaxManagedPollInterval.
	ManagedPollInterval time.Duration
	// MaxManagedPollInterval caps that backoff; zero means
	// DefaultMaxManagedPollInterval.
	MaxManagedPollInterval time.Duration
	Metrics                *Metrics
}

// DefaultMaxManagedPollInterval caps the backoff of the managed-cluster polls.
const DefaultMaxManagedPollInterval = 5 * time.Minute

// Reconcile brings one Cluster's credentials to the state its phase requires.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (result ctrl.Result, retErr error) {
	c := &v1alpha1.Cluster{}
	if err := r.Client.Get(ctx, req.NamespacedName, c); err != nil {
		if apierrors.IsNotFound(err) {
			r.Metrics.forget(req.Namespace, req.Name)
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, err
	}
	if !c.DeletionTimestamp.IsZero() {
		// Every object Carousel wrote is owned by the Cluster and garbage-collected with it.
		return ctrl.Result{}, nil
	}
	deferredStart := c.Annotations[v1alpha1.OperationAnnotation] == v1alpha1.OperationStartCARotation && !credentialsIssued(c)
	if _, ok := c.Annotations[v1alpha1.OperationAnnotation]; ok && !deferredStart {
		return ctrl.Result{}, r.handleOperation(ctx, c)
	}
	// A rotation starts from issued credentials: a start on a Cluster that
	// has none yet waits (annotation kept) until this pass has issued them.

	before := c.DeepCopy()
	defer func() {
		if deferredStart && retErr == nil && result.RequeueAfter > time.Second {
			result.RequeueAfter = time.Second
		}
		r.setReadyCondition(c, retErr)
		r.reportBlocked(c, before, retErr)
		c.Status.ObservedGeneration = c.Generation
		if equality.Semantic.DeepEqual(before.Status, c.Status) {
			return
		}
		err := r.Client.Status().Patch(ctx, c, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{}))
		switch {
		case apierrors.IsConflict(err):
			// Decided on a stale read; the newer Cluster is reconciled again.
			result, retErr = ctrl.Result{RequeueAfter: time.Second}, nil
		case err != nil:
			result, retErr = ctrl.Result{}, errors.Join(retErr, fmt.Errorf("patching status: %w", err))
		case before.CARotationPhase() != c.CARotationPhase():
			r.phaseChanged(c, before.CARotationPhase(), c.CARotationPhase())
		}
	}()
	result, err := r.reconcileCredentials(ctx, c)
	if errors.Is(err, errStaleCache) {
		log.FromContext(ctx).V(1).Info("cache behind the API server; retrying", "error", err.Error())
		return ctrl.Result{RequeueAfter: time.Second}, nil
	}
	return result, err
}

// reconcileCredentials runs the steps of the current phase in order. Each
// step is idempotent and writes only what differs; a reconcile that finds
// everything in place writes nothing and generates no key.
func (r *Reconciler) reconcileCredentials(ctx context.Context, c *v1alpha1.Cluster) (ctrl.Result, error) {
	objs, err := r.loadObjects(ctx, c)
	if err != nil {
		return ctrl.Result{}, err
	}
	cas, err := r.ensureCAs(ctx, c, objs)
	if err != nil {
		return ctrl.Result{}, err
	}
	if err := r.ensureServiceAccountKey(ctx, c, objs); err != nil {
		return ctrl.Result{}, err
	}
	trust, err := r.ensureBundles(ctx, c, objs, cas)
	if err != nil {
		return ctrl.Result{}, err
	}
	rot, endpointRemoved := rotation.TrackEndpoint(c.CARotation(), c.Spec.ControlPlane.Endpoint)
	if rot != c.CARotation() {
		setCARotation(c, rot)
	}
	if c.CARotationPhase() != v1alpha1.RotationPreparing {
		if err := r.deleteSecret(ctx, objs, trustProbeSecret(c)); err != nil {
			return ctrl.Result{}, err
		}
	}
	// A check of the managed cluster that fails is reported in its condition
	// and polled with backoff; it does not fail the reconcile.
	var managedFailure error
	consumers, trustSum := consumersOf(objs), trustChecksum(trust)
	trusted := trustEstablished(consumers, trustSum)
	if trusted {
		trusted, err = r.apiServerTrustsNewClientCA(ctx, c, objs, cas, trust, endpointRemoved)
		if errors.Is(err, errManagedCheckFailed) {
			managedFailure, err = err, nil
		}
		if err != nil {
			return ctrl.Result{}, err
		}
	}
	certFacts, err := r.ensureCertificates(ctx, c, objs, cas, trust, trusted)
	if err != nil {
		return ctrl.Result{}, err
	}
	rolledOut, err := r.rollConsumers(ctx, objs, consumers, trustSum)
	if err != nil {
		return ctrl.Result{}, err
	}
	waitingPools, err := r.rollWorkers(ctx, c)
	if err != nil {
		return ctrl.Result{}, err
	}

	facts := rotation.Facts{
		Phase:              c.CARotationPhase(),
		NewCAsPersisted:    allCAs(cas, func(x *credentials.CAs) bool { return x.Rotation == rotationID(c) }),
		OldCAsRemoved:      allCAs(cas, func(x *credentials.CAs) bool { return x.Previous == nil }),
		ClientsOnNewCA:     certFacts.clientsOnNewCA,
		AllOnNewCA:         certFacts.allOnNewCA,
		ConsumersRolledOut: rolledOut,
		PendingWorkerPools: len(pendingPools(c)),
		Evidence:           rotation.EvidencePending,
	}
	if rotation.CanDropOldCAs(facts) && !facts.OldCAsRemoved {
		if err := r.ensureOldClientProbe(ctx, c, objs, cas); err != nil {
			return ctrl.Result{}, err
		}
		// The CA Secrets' update events start the next pass, which writes
		// the single-CA bundles and rolls the consumers again.
		return ctrl.Result{}, r.dropOldCAs(ctx, c, objs, cas)
	}
	var evidenceFailure error
	facts.Evidence, evidenceFailure = r.gatherEvidence(ctx, c, objs, trust, facts, endpointRemoved)
	managedFailure = errors.Join(managedFailure, evidenceFailure)

	next, wait := rotation.Next(facts)
	if next != facts.Phase {
		r.enterPhase(c, next)
		facts.Phase = next
		_, wait = rotation.Next(facts) // what the new phase waits for
	}
	if next == v1alpha1.RotationCompleted {
		if err := r.deleteSecret(ctx, objs, oldClientProbeSecret(c)); err != nil {
			return ctrl.Result{}, err
		}
	}
	r.updateInventory(c, cas)
	r.setRotationCondition(c, next, wait, waitingPools)
	r.Metrics.observe(c, cas, certFacts.notAfter)

	result := ctrl.Result{RequeueAfter: certFacts.nextRenewal.Sub(r.Clock.Now())}
	if wait != nil && wait.PollManaged {
		result.RequeueAfter = r.managedPollDelay(c, managedFailure != nil)
	}
	return result, nil
}

// managedPollDelay is when a phase waiting on the managed cluster looks
// again: ManagedPollInterval, backing off while a check of the managed
// cluster keeps failing, counted from when ControlPlaneReachable turned False.
func (r *Reconciler) managedPollDelay(c *v1alpha1.Cluster, checkFailed bool) time.Duration {
	var failingSince time.Time
	if cond := meta.FindStatusCondition(c.Status.Conditions, v1alpha1.ConditionControlPlaneReachable); checkFailed && cond != nil &&
		cond.Status == metav1.ConditionFalse {
		failingSince = cond.LastTransitionTime.Time
	}
	maximum := r.MaxManagedPollInterval
	if maximum == 0 {
		maximum = DefaultMaxManagedPollInterval
	}
	return rotation.PollDelay(failingSince, r.Clock.Now(), r.ManagedPollInterval, maximum)
}

func allCAs(cas map[v1alpha1.CARole]*credentials.CAs, pred func(*credentials.CAs) bool) bool {
	for _, x := range cas {
		if !pred(x) {
			return false
		}
	}
	return true
}

// handleOperation records an operation in the status first and removes the
// annotation second, so a crash in between is recognised by
// rotation.AlreadyApplied and the operation is not applied twice. Both writes
// carry the resourceVersion that was read: a decision taken on a stale read
// fails instead of being persisted.
func (r *Reconciler) handleOperation(ctx context.Context, c *v1alpha1.Cluster) error {
	value := c.Annotations[v1alpha1.OperationAnnotation]
	op, err := v1alpha1.ParseOperation(value)
	if err == nil && !rotation.AlreadyApplied(c.CARotation(), op) {
		var next *v1alpha1.CARotation
		next, err = rotation.ApplyOperation(c.CARotation(), op, c.Spec.Workers, r.now())
		if err == nil {
			before := c.DeepCopy()
			oldPhase := c.CARotationPhase()
			if !equality.Semantic.DeepEqual(next, c.CARotation()) {
				setCARotation(c, next)
			}
			if op.Verb == v1alpha1.OperationReissueCA {
				// The next reconcile may then generate these roles' CAs.
				forgetCAs(c, op.Roles)
			}
			if !equality.Semantic.DeepEqual(before.Status, c.Status) {
				if err := r.Client.Status().Patch(ctx, c, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})); err != nil {
					return fmt.Errorf("recording operation %s: %w", value, err)
				}
				if op.Verb == v1alpha1.OperationReissueCA {
					r.event(c, corev1.EventTypeWarning, v1alpha1.EventCAReissueAccepted,
						"Operation %q accepted: a lost CA Secret of these roles is replaced by a new CA", value)
				}
				if phase := c.CARotationPhase(); phase != oldPhase {
					r.phaseChanged(c, oldPhase, phase)
				}
			}
		}
	}
	if err != nil {
		r.event(c, "Warning", v1alpha1.EventOperationRefused, "Operation %q refused in phase %q: %v", value, c.CARotationPhase(), err)
	}
	before := c.DeepCopy()
	delete(c.Annotations, v1alpha1.OperationAnnotation)
	if err := r.Client.Patch(ctx, c, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})); err != nil {
		return fmt.Errorf("removing the operation annotation: %w", err)
	}
	return nil
}

func setCARotation(c *v1alpha1.Cluster, rot *v1alpha1.CARotation) {
	if c.Status.Credentials == nil {
		c.Status.Credentials = &v1alpha1.ClusterCredentials{}
	}
	if c.Status.Credentials.Rotation == nil {
		c.Status.Credentials.Rotation = &v1alpha1.CredentialsRotation{}
	}
	c.Status.Credentials.Rotation.CertificateAuthorities = rot
}

// enterPhase records a phase reached by observation, with its timestamp. The
// event is recorded once the status is persisted.
func (r *Reconciler) enterPhase(c *v1alpha1.Cluster, phase v1alpha1.CARotationPhase) {
	rot := c.CARotation().DeepCopy()
	now := r.now()
	rot.Phase = phase
	switch phase {
	case v1alpha1.RotationPrepared:
		rot.LastInitiationFinishedTime = &now
	case v1alpha1.RotationCompleted:
		rot.LastCompletionTime = &now
	}
	setCARotation(c, rot)
}

// phaseChanged records a persisted phase change: an event and, at the end of
// a phase Carousel works through, its duration.
func (r *Reconciler) phaseChanged(c *v1alpha1.Cluster, from, to v1alpha1.CARotationPhase) {
	r.event(c, "Normal", v1alpha1.EventRotationPhaseChanged, "CA rotation phase %s → %s", phaseOrNone(from), to)
	rot := c.CARotation()
	switch to {
	case v1alpha1.RotationPrepared:
		r.Metrics.phaseDuration(v1alpha1.RotationPreparing, rot.LastInitiationTime, rot.LastInitiationFinishedTime)
	case v1alpha1.RotationCompleted:
		r.Metrics.phaseDuration(v1alpha1.RotationFinalizing, rot.LastCompletionTriggeredTime, rot.LastCompletionTime)
	}
}

func phaseOrNone(p v1alpha1.CARotationPhase) string {
	if p == "" {
		return "none"
	}
	return string(p)
}

// now is the clock's time at the precision the API stores.
func (r *Reconciler) now() metav1.Time {
	return metav1.NewTime(r.Clock.Now().UTC().Truncate(time.Second))
}

func (r *Reconciler) event(c *v1alpha1.Cluster, eventType, reason, format string, args ...any) {
	if r.Recorder != nil {
		r.Recorder.Eventf(c, nil, eventType, reason, "Reconcile", format, args...)
	}
}

func (r *Reconciler) setReadyCondition(c *v1alpha1.Cluster, err error) {
	cond := metav1.Condition{Type: v1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonCredentialsIssued,
		Message: "every CA, trust bundle, certificate and kubeconfig is issued", ObservedGeneration: c.Generation, LastTransitionTime: r.now()}
	var b *blockedError
	switch {
	case errors.As(err, &b):
		cond.Status, cond.Reason, cond.Message = metav1.ConditionFalse, b.reason, b.message
	case err != nil && !errors.Is(err, errStaleCache):
		cond.Status, cond.Reason, cond.Message = metav1.ConditionFalse, v1alpha1.ReasonReconcileFailed, err.Error()
	}
	meta.SetStatusCondition(&c.Status.Conditions, cond)
}
