package cluster

import (
	"context"
	"errors"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
	"github.com/carousel-dev/carousel/pkg/credentials"
	"github.com/carousel-dev/carousel/pkg/rotation"
)

// scope is one pass over one Cluster: what it read, what its phases
// observed, and what rotation.Decide made of it. The phases write objects;
// only updateStatus turns the scope into conditions.
type scope struct {
	cluster *v1alpha1.Cluster

	objs      *objects
	cas       map[v1alpha1.CARole]*credentials.CAs
	trust     bundles
	consumers []consumer
	trustSum  string
	// endpointRemoved: the CA rotation recorded an endpoint the spec no longer names.
	endpointRemoved bool
	// keyEndpointRemoved: the service-account key rotation recorded an
	// endpoint the spec no longer names.
	keyEndpointRemoved bool
	// trusted: every consumer, and the API server, trusts both client CAs.
	trusted bool
	// clientsMoved: the clients had moved to the new client CA when the pass began.
	clientsMoved bool
	certs        certificateFacts
	rolledOut    bool
	waitingPools []string
	facts        rotation.Facts
	// askableHolders are the Nodes of facts.KubeletHolders in a pool whose
	// rollout can ask them to renew once more (NodeAsker).
	askableHolders map[v1alpha1.WorkerRolloutStrategy][]corev1.Node

	// reachability is what this pass saw of the managed API server, for the
	// ControlPlaneReachable condition; nil when it saw nothing.
	reachability *metav1.Condition
	// managedCheckFailed: a check of the managed cluster ran and failed; the
	// poll backs off.
	managedCheckFailed bool
	// decision is nil until the decide phase ran to its end.
	decision *rotation.Decision
	// keyDecision is what the service-account key rotation waits for; nil
	// outside one.
	keyDecision *rotation.ServiceAccountKeyDecision
	// wakeUp is the earliest time a condition changes by itself (a
	// recommendation comes due, the maintenance window opens): the Cluster
	// is looked at again then. Zero when none does.
	wakeUp time.Time
}

// wakeAt makes the pass look at the Cluster again at t, unless it does
// sooner; a zero t changes nothing.
func (s *scope) wakeAt(t time.Time) {
	if !t.IsZero() && (s.wakeUp.IsZero() || t.Before(s.wakeUp)) {
		s.wakeUp = t
	}
}

// phase is one named step of a pass. Each is idempotent and writes only what
// differs, so a pass that finds everything in place writes nothing and
// generates no key.
type phase struct {
	name string
	run  func(context.Context, *scope) error
	// holdsUpNothing: the phases after it do not need what it does, so its
	// failure does not stop them; the pass fails with it at the end.
	holdsUpNothing bool
}

// phases are the steps of a pass, in order.
func (r *Reconciler) phases() []phase {
	return []phase{
		{name: "load objects", run: r.loadPhase},
		{name: "old-CA records", run: r.recordsPhase},
		{name: "CAs", run: r.caPhase},
		{name: "trust bundles", run: r.bundlePhase},
		{name: "endpoint", run: r.endpointPhase},
		{name: "API-server trust", run: r.trustPhase},
		{name: "certificates", run: r.certificatePhase},
		{name: "audit webhook", run: r.auditWebhookPhase},
		{name: "consumers", run: r.consumerPhase},
		{name: "service-account key", run: r.serviceAccountKeyPhase},
		// A pool that fails to roll leaves itself pending, which the
		// decision waits for; the evidence (kube-root-ca.crt's publication
		// time, which runs while the pools roll) and the conditions go on.
		{name: "worker pools", run: r.workerPhase, holdsUpNothing: true},
		{name: "evidence", run: r.evidencePhase},
		{name: "decision", run: r.decisionPhase},
		{name: "old-CA usage", run: r.oldCAUsagePhase},
	}
}

// reconcileCredentials runs the phases in order (runPhases).
func (r *Reconciler) reconcileCredentials(ctx context.Context, s *scope) (ctrl.Result, error) {
	if err := runPhases(ctx, s, r.phases()); err != nil {
		return ctrl.Result{}, err
	}
	return r.requeue(s), nil
}

// runPhases runs phases in order, stopping at the first error but that of a
// phase that holds up nothing, which it returns once the others ran (with
// the error that stopped them, if one did). A stale read stops the pass
// wherever it happens: what the pass read is behind the API server.
func runPhases(ctx context.Context, s *scope, phases []phase) error {
	var deferred error
	for _, p := range phases {
		err := p.run(ctx, s)
		switch {
		case err == nil:
		case p.holdsUpNothing && !staleRead(err):
			deferred = err
		default:
			return errors.Join(deferred, err)
		}
	}
	return deferred
}

func (r *Reconciler) loadPhase(ctx context.Context, s *scope) (err error) {
	s.objs, err = r.loadObjects(ctx, s.cluster)
	return err
}

// caPhase keeps every role's CAs, and the service-account key.
func (r *Reconciler) caPhase(ctx context.Context, s *scope) (err error) {
	if s.cas, err = r.ensureCAs(ctx, s.cluster, s.objs); err != nil {
		return err
	}
	return r.ensureServiceAccountKey(ctx, s.cluster, s.objs)
}

func (r *Reconciler) bundlePhase(ctx context.Context, s *scope) (err error) {
	if s.trust, err = r.ensureBundles(ctx, s.cluster, s.objs, s.cas); err != nil {
		return err
	}
	s.consumers, s.trustSum = consumersOf(s.objs), trustChecksum(s.trust)
	return nil
}

// endpointPhase records the endpoint the checks of each rotation under way
// run against.
func (r *Reconciler) endpointPhase(_ context.Context, s *scope) error {
	endpoint := s.cluster.Spec.ControlPlane.Endpoint
	var rot *v1alpha1.CARotation
	rot, s.endpointRemoved = rotation.TrackEndpoint(s.cluster.CARotation(), endpoint)
	if rot != s.cluster.CARotation() {
		setCARotation(s.cluster, rot)
	}
	var keyRot *v1alpha1.ServiceAccountKeyRotation
	keyRot, s.keyEndpointRemoved = rotation.TrackServiceAccountKeyEndpoint(s.cluster.ServiceAccountKeyRotation(), endpoint)
	if keyRot != s.cluster.ServiceAccountKeyRotation() {
		setServiceAccountKeyRotation(s.cluster, keyRot)
	}
	return nil
}

// trustPhase decides whether clients may move to the new CAs: every consumer
// rolled out trusting both, and the API server accepts the new client CA; or
// they moved already (clientsMoved), which settled it: a client re-issued
// since (its Secret lost) goes to the new CA whatever the consumers'
// rollouts show now (a replica down, the pools rolling).
func (r *Reconciler) trustPhase(ctx context.Context, s *scope) (err error) {
	if clientsMoved(s.cluster, s.objs, s.cas[v1alpha1.CARoleClient]) {
		s.trusted, s.clientsMoved = true, true
		return nil
	}
	s.trusted = trustEstablished(s.consumers, s.trustSum)
	if !s.trusted {
		return nil
	}
	var seen *metav1.Condition
	s.trusted, seen, err = r.apiServerTrustsNewClientCA(ctx, s.cluster, s.objs, s.cas, s.trust, s.endpointRemoved)
	return s.observe(seen, err)
}

func (r *Reconciler) certificatePhase(ctx context.Context, s *scope) (err error) {
	s.certs, err = r.ensureCertificates(ctx, s.cluster, s.objs, s.cas, s.trust, s.trusted)
	return err
}

func (r *Reconciler) consumerPhase(ctx context.Context, s *scope) (err error) {
	s.rolledOut, err = r.rollConsumers(ctx, s.objs, s.consumers, s.trustSum)
	return err
}

// workerPhase rolls the pending worker pools. Before it, while clients have
// not moved to the new client CA (the pass's certificates may move them), a
// pool added to the spec since the rotation started is made pending too:
// its nodes joined with certificates from the old CAs (rotation.PendPoolsAdded).
func (r *Reconciler) workerPhase(ctx context.Context, s *scope) (err error) {
	if rot := s.cluster.CARotation(); !s.clientsMoved {
		if next := rotation.PendPoolsAdded(rot, s.cluster.Spec.Workers); next != rot {
			setCARotation(s.cluster, next)
		}
	}
	s.waitingPools, err = r.rollWorkers(ctx, s.cluster)
	return err
}

// evidencePhase gathers the facts of the rotation and runs the checks of the
// managed cluster that rotation.EvidenceDue asks for: the first, and each
// next one while they pass.
func (r *Reconciler) evidencePhase(ctx context.Context, s *scope) error {
	c := s.cluster
	held := rotation.HeldPools(c.CARotation())
	s.facts = rotation.Facts{
		Phase:               c.CARotationPhase(),
		NewCAsPersisted:     allCAs(s.cas, func(x *credentials.CAs) bool { return x.WrittenInRotation(c) }),
		OldCAsRemoved:       allCAs(s.cas, func(x *credentials.CAs) bool { return x.Previous == nil }),
		OldCAsRestored:      allCAs(s.cas, func(x *credentials.CAs) bool { return x.Previous == nil || x.Restored() }),
		ClientsOnNewCA:      s.certs.clientsOnNewCA,
		AllOnNewCA:          s.certs.allOnNewCA,
		ConsumersRolledOut:  s.rolledOut,
		PendingWorkerPools:  len(pendingPools(c)) - len(held),
		HeldWorkerPools:     held,
		Evidence:            rotation.EvidencePending,
		KubeRootCA:          rotation.EvidencePending,
		APIServices:         rotation.EvidencePending,
		WorkloadTrustReload: c.Spec.CARotation.WorkloadTrustReloadOrDefault(),
		Now:                 r.Clock.Now(),
	}
	if rot := c.CARotation(); rot != nil && rot.KubeRootCAPublishedTime != nil {
		s.facts.KubeRootCAPublished = rot.KubeRootCAPublishedTime.Time
	}
	if rot := c.CARotation(); rot != nil {
		s.facts.RolledBack, s.facts.AbortForced = rot.AbortRolledBackTime != nil, rot.AbortForcedTime != nil
	}
	var err error
	if s.facts.KubeconfigHolders, s.facts.KubeconfigHoldersUnknown, err = r.kubeconfigHolders(ctx, s); err != nil {
		return err
	}
	if s.facts.KubeletHolders, s.facts.KubeletHoldersUnknown, err = r.kubeletHolders(ctx, s); err != nil {
		return err
	}
	// With no check due, gatherEvidence still reports a missing or removed endpoint.
	for check := rotation.EvidenceDue(s.facts); ; {
		seen, err := r.gatherEvidence(ctx, s, check)
		if err := s.observe(seen, err); err != nil {
			return err
		}
		next := rotation.EvidenceDue(s.facts)
		if next == rotation.CheckNone || next == check { // done, or it did not pass
			break
		}
		check = next
	}
	if rotation.PublicationCheckDue(s.facts) {
		// Only a pass matters, for decisionPhase to record it: a failure
		// is left to the kube-root-ca.crt step to report when it is due.
		_, _ = r.gatherEvidence(ctx, s, rotation.CheckKubeRootCA)
	}
	return nil
}

// decisionPhase records when kube-root-ca.crt first carried both cluster
// CAs, then carries out rotation.Decide.
func (r *Reconciler) decisionPhase(ctx context.Context, s *scope) error {
	c := s.cluster
	// evidencePhase took the facts' publication time from the status; a
	// time recorded now joins them.
	if rot := rotation.RecordKubeRootCAPublished(c.CARotation(), s.facts.KubeRootCA, r.now()); rot != c.CARotation() {
		setCARotation(c, rot)
		s.facts.KubeRootCAPublished = rot.KubeRootCAPublishedTime.Time
	}
	d := rotation.Decide(s.facts)
	// Once the abort rolled every pool back (a pool's own roll asks its
	// nodes, maxUnavailable at a time), whatever else it waits for first.
	if !s.facts.AbortForced && len(pendingPools(c)) == 0 {
		r.askKubeletHolders(ctx, s)
	}
	if d.RecordRolledBack {
		// Persisted with the status, before the next pass, a second from
		// now, deletes the new CAs: the pools' second rollout is never lost
		// to a crash.
		setCARotation(c, rotation.RecordRolledBack(c.CARotation(), c.Spec.Workers, r.now()))
		s.wakeAt(r.Clock.Now())
	}
	if d.DropOldCAs {
		if err := r.ensureOldClientProbe(ctx, c, s.objs, s.cas); err != nil {
			return err
		}
		// The CA Secrets' update events start the next pass, which writes
		// the single-CA bundles and rolls the consumers again.
		return r.dropOldCAs(ctx, c, s.objs, s.cas)
	}
	// The probes the next phase has no use for go first: a pass that fails
	// to delete one records no new phase, whose status (inventory,
	// conditions) this pass would not write.
	if d.Phase == v1alpha1.RotationCompleted || d.Phase == v1alpha1.RotationAborted {
		if err := r.deleteSecret(ctx, s.objs, oldClientProbeSecret(c)); err != nil {
			return err
		}
	}
	if !d.Phase.Preparing() {
		if err := r.deleteSecret(ctx, s.objs, trustProbeSecret(c)); err != nil {
			return err
		}
	}
	if d.Phase != s.facts.Phase {
		// The event is recorded once the status is persisted.
		setCARotation(c, rotation.EnterPhase(c.CARotation(), d.Phase, r.now()))
	}
	r.Metrics.observe(c, s.cas, s.certs.notAfter)
	s.decision = &d
	return nil
}

// observe keeps what a check of the managed API server saw. A check that
// failed does not fail the pass: the condition says it, and the poll backs
// off.
func (s *scope) observe(seen *metav1.Condition, err error) error {
	// A check that passed does not hide one that failed in the same pass.
	if seen != nil && (seen.Status != metav1.ConditionTrue || !s.managedCheckFailed) {
		s.reachability = seen
	}
	if errors.Is(err, errManagedCheckFailed) {
		s.managedCheckFailed = true
		return nil
	}
	return err
}

// requeue is when the Cluster is looked at again: at the first certificate
// renewal, soon while the phase waits on the managed cluster, which raises
// no event here, and when the time the phase waits for comes.
func (r *Reconciler) requeue(s *scope) ctrl.Result {
	if s.decision == nil {
		return ctrl.Result{} // the old CAs were dropped: their Secrets' events come back
	}
	result := ctrl.Result{RequeueAfter: s.certs.nextRenewal.Sub(r.Clock.Now())}
	if d := s.keyDecision; d != nil && d.PollManaged {
		result = lookAgainBy(result, r.Clock.Now().Add(r.managedPollDelay(s.cluster, s.managedCheckFailed)), r.Clock.Now())
	} else if d != nil {
		result = lookAgainBy(result, d.Until, r.Clock.Now())
	}
	switch w := s.decision.Wait; {
	case w == nil:
	case w.PollManaged:
		// Not later than a time that came before: the service-account
		// key's, or a renewal's.
		result = lookAgainBy(result, r.Clock.Now().Add(r.managedPollDelay(s.cluster, s.managedCheckFailed)), r.Clock.Now())
	case !w.Until.IsZero():
		result = lookAgainBy(result, w.Until, r.Clock.Now())
	}
	return result
}

// lookAgainBy shortens result so that the Cluster is looked at again by at,
// but not within the second; a zero at leaves result as it is, and a result
// without a positive RequeueAfter (none, or a renewal already past) takes at.
func lookAgainBy(result ctrl.Result, at, now time.Time) ctrl.Result {
	if at.IsZero() {
		return result
	}
	if d := max(at.Sub(now), time.Second); result.RequeueAfter <= 0 || d < result.RequeueAfter {
		result.RequeueAfter = d
	}
	return result
}

// managedPollDelay is when a phase waiting on the managed cluster looks
// again: ManagedPollInterval, backing off while a check of the managed
// cluster keeps failing, counted from when this process first found it
// failing (failingChecks; not the condition's lastTransitionTime, which
// False for an endpoint empty or removed before leaves long ago).
func (r *Reconciler) managedPollDelay(c *v1alpha1.Cluster, checkFailed bool) time.Duration {
	var failingSince time.Time
	if checkFailed {
		failingSince = r.failingChecks.began(client.ObjectKeyFromObject(c))
	}
	return r.pollDelay(failingSince)
}

// pollDelay is ManagedPollInterval, backing off from failingSince (zero when
// nothing failed) to MaxManagedPollInterval.
func (r *Reconciler) pollDelay(failingSince time.Time) time.Duration {
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
