package rotation

import (
	"fmt"
	"slices"
	"strings"
	"time"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
	"github.com/carousel-dev/carousel/pkg/credentials"
)

// Facts are what a reconcile observed about a rotation.
type Facts struct {
	Phase v1alpha1.CARotationPhase
	// NewCAsPersisted: every role's CA Secret holds the CA of this rotation.
	NewCAsPersisted bool
	// OldCAsRemoved: no role keeps a previous CA.
	OldCAsRemoved bool
	// OldCAsRestored (Aborting): every role that keeps a previous CA has
	// had its two CAs swapped back, the old one current again and the new
	// one previous.
	OldCAsRestored bool
	// RolledBack (Aborting): the status records that every certificate and
	// worker pool was back on the old CAs (abortRolledBackTime).
	RolledBack bool
	// KubeconfigHolders (Aborting) are the users of kubectl carousel
	// kubeconfig who hold an unexpired kubeconfig from the new client CA
	// and have taken none from the old one since; AbortForced: the abort
	// does not wait for them (abort-ca-rotation=force).
	// KubeconfigHoldersUnknown says why the reconciler cannot tell them all
	// (the record lost or unreadable), and holds the abort as they do.
	KubeconfigHolders, KubeconfigHoldersUnknown []string
	// KubeletHolders (Aborting) are the Nodes whose kubelet's last client
	// certificate Carousel signed is from the new client CA and unexpired;
	// KubeletHoldersUnknown says why the reconciler cannot tell them all.
	// The abort waits for them as for KubeconfigHolders.
	KubeletHolders, KubeletHoldersUnknown []string
	AbortForced                           bool
	// ClientsOnNewCA: every certificate renewed in Preparing is signed by the current CA.
	ClientsOnNewCA bool
	// AllOnNewCA: every certificate is signed by the current CA (in
	// Aborting, the old CA restored).
	AllOnNewCA bool
	// ConsumersRolledOut: every consumer runs with the credentials written now.
	ConsumersRolledOut bool
	// PendingWorkerPools counts pools whose rollout is still awaited, held
	// pools left out.
	PendingWorkerPools int
	// HeldWorkerPools names the pools held until rotate-rollout-workers
	// names them (HeldPools).
	HeldWorkerPools []string
	// Evidence is what the check of the API server's behaviour observed.
	Evidence Evidence
	// KubeRootCA is what the check of kube-root-ca.crt observed: Passed when
	// every namespace of the managed cluster has one that is exactly the
	// cluster CA bundle; KubeRootCABehind names the namespaces that do not.
	KubeRootCA       Evidence
	KubeRootCABehind []string
	// APIServices is what the check of the caBundle of the APIServices
	// labelled carousel.dev/ca-bundle=metrics-server, and of the unlabelled
	// ones that pin a metrics-server CA, observed: Passed when each is
	// exactly the metrics-server CA bundle; APIServicesBehind names those
	// that are not (evidence.APIServiceLag).
	APIServices       Evidence
	APIServicesBehind []string
	// KubeRootCAPublished is when kube-root-ca.crt was first seen carrying
	// both cluster CAs in every namespace in this Preparing; zero before.
	// WorkloadTrustReload is how long pods get from then to reload it
	// (spec.caRotation.workloadTrustReload), and Now the time of the pass.
	KubeRootCAPublished time.Time
	WorkloadTrustReload time.Duration
	Now                 time.Time
}

// Record keeps what a check of the managed cluster observed: its result
// and, for a check of trust published there, what lags behind.
func (f *Facts) Record(check EvidenceCheck, e Evidence, behind []string) {
	switch check {
	case CheckKubeRootCA:
		f.KubeRootCA, f.KubeRootCABehind = e, behind
	case CheckAPIServices:
		f.APIServices, f.APIServicesBehind = e, behind
	default:
		f.Evidence = e
	}
}

// Evidence is what was observed of the managed cluster's API server.
type Evidence string

const (
	// EvidencePassed means the API server behaves as the phase requires.
	EvidencePassed Evidence = "Passed"
	// EvidenceSkipped means the Cluster names no endpoint, so nothing can be checked.
	EvidenceSkipped Evidence = "Skipped"
	// EvidencePending means nothing conclusive was observed (yet).
	EvidencePending Evidence = "Pending"
)

// EvidenceCheck names a check of the managed API server.
type EvidenceCheck int

const (
	// CheckNone means no check is due.
	CheckNone EvidenceCheck = iota
	// CheckNewClientAccepted (end of Preparing) checks that the API server accepts
	// Carousel's client certificate from the new client CA.
	CheckNewClientAccepted
	// CheckOldCADropped (end of Finalizing) checks that the API server serves a
	// certificate that chains to the new cluster CA and rejects a client
	// certificate from the old client CA.
	CheckOldCADropped
	// CheckKubeRootCA (end of both phases) checks that kube-root-ca.crt, the
	// trust anchor kube-controller-manager publishes to every namespace for
	// the workloads, is the cluster CA bundle of the phase.
	CheckKubeRootCA
	// CheckAPIServices (end of both phases) checks that the APIServices whose
	// caBundle Carousel keeps carry the metrics-server CA bundle of the phase.
	CheckAPIServices
)

// Wait is what a phase waits for.
type Wait struct {
	Reason  v1alpha1.RotationReason
	Message string
	// PollManaged says that what the phase waits for happens in the managed
	// cluster (its API server, its nodes), which raises no event in the
	// management cluster: the reconciler must look again on its own.
	PollManaged bool
	// Until, when set, is the time the phase waits for: the reconciler looks
	// again then.
	Until time.Time
}

// Decision is what the reconciler does after a pass that observed Facts.
type Decision struct {
	// Phase is the phase the rotation is in after this pass; when it differs
	// from Facts.Phase the reconciler records it with EnterPhase.
	Phase v1alpha1.CARotationPhase
	// Wait is what Phase waits for; nil outside a rotation.
	Wait *Wait
	// DropOldCAs: sign the old-client probe with the old client CA, then
	// delete every old CA. The rest of the pass waits for the CA Secrets'
	// update events.
	DropOldCAs bool
	// RecordRolledBack: record, with RecordRolledBack, that an abort's
	// certificates and worker pools are back on the old CAs, and no
	// kubeconfig or kubelet holder is waited for.
	RecordRolledBack bool
}

// step is one thing a phase waits for, in order: while it is not done the
// phase waits with its reason and message. plan is what `kubectl carousel
// rotation plan` prints for it.
type step struct {
	reason  v1alpha1.RotationReason
	done    func(Facts) bool
	waiting func(Facts) string
	// managed: what the step waits for happens in the managed cluster.
	managed bool
	// evidence is the check whose result the step waits for, if any.
	evidence EvidenceCheck
	// until, when set, is the time the step waits for; zero while unknown.
	until func(Facts) time.Time
	plan  []PlanLine
}

var preparing = []step{
	{reason: v1alpha1.ReasonWaitingForNewCAs, done: func(f Facts) bool { return f.NewCAsPersisted },
		waiting: say("generating and storing the new CAs"),
		plan:    []PlanLine{{"generate a new CA for: %s (the old ones stay trusted)", ListCARoles}, {"every trust bundle: old + new CA", ListNone}}},
	{reason: v1alpha1.ReasonWaitingForConsumers, done: func(f Facts) bool { return f.ConsumersRolledOut },
		waiting: say("waiting for the control-plane workloads to roll out"),
		plan:    []PlanLine{{"roll (to trust both): %s", ListConsumers}}},
	{reason: v1alpha1.ReasonWaitingForClients, done: func(f Facts) bool { return f.ClientsOnNewCA }, managed: true,
		waiting: say("client certificates move to the new CAs once every consumer, and the API server, trusts both"),
		plan: []PlanLine{{"re-issue from the new CAs: %s", ListClientCertificates}, {"keep on the old CAs: %s", ListServerCertificates},
			{"roll again (new client certificates): %s", ListConsumers}}},
	{reason: v1alpha1.ReasonWaitingForWorkers, done: func(f Facts) bool { return f.PendingWorkerPools == 0 }, managed: true,
		waiting: poolsToRoll,
		plan: []PlanLine{{"roll worker pools (kubelets trust both CAs, client certificates from the new client CA); " +
			"with --without-workers-rollout, each pool once rollout-workers names it:", ListWorkerPools}}},
	{reason: v1alpha1.ReasonWaitingForEvidence, done: evidenceIn, managed: true,
		evidence: CheckNewClientAccepted,
		waiting:  say("waiting for the API server to accept a client certificate from the new client CA"),
		plan:     []PlanLine{{"check that the API server accepts a client certificate from the new client CA", ListNone}}},
	kubeRootCAStep("both cluster CAs"),
	apiServicesStep("both metrics-server CAs"),
	{reason: v1alpha1.ReasonWaitingForWorkloadTrust, done: workloadsHadTimeToReload,
		waiting: workloadsReloading, until: workloadTrustDeadline,
		plan: []PlanLine{{"give pods spec.caRotation.workloadTrustReload (default 7m) to reload kube-root-ca.crt", ListNone}}},
}

var finalizing = []step{
	{reason: v1alpha1.ReasonWaitingForServers, done: func(f Facts) bool { return f.AllOnNewCA },
		waiting: say("re-issuing server certificates from the new CAs"),
		plan:    []PlanLine{{"re-issue from the new CAs: %s", ListServerCertificates}, {"roll: %s", ListConsumers}}},
	{reason: v1alpha1.ReasonWaitingForOldCADrop, done: func(f Facts) bool { return f.OldCAsRemoved },
		waiting: say("waiting for servers to present the new certificates before the old CAs are dropped"),
		plan:    []PlanLine{{"delete the old CAs (keys included); every trust bundle: new CA only", ListNone}}},
	{reason: v1alpha1.ReasonWaitingForConsumers, done: func(f Facts) bool { return f.ConsumersRolledOut },
		waiting: say("waiting for the control-plane workloads to roll out"),
		plan:    []PlanLine{{"roll again: %s", ListConsumers}}},
	{reason: v1alpha1.ReasonWaitingForWorkers, done: func(f Facts) bool { return f.PendingWorkerPools == 0 }, managed: true,
		waiting: poolsToRoll,
		plan:    []PlanLine{{"roll worker pools again (kubelets drop the old CA):", ListWorkerPools}}},
	{reason: v1alpha1.ReasonWaitingForEvidence, done: evidenceIn, managed: true,
		evidence: CheckOldCADropped,
		waiting:  say("waiting for the API server to reject the old client CA and serve a certificate from the new cluster CA"),
		plan:     []PlanLine{{"check that the API server rejects the old client CA and serves a certificate from the new cluster CA", ListNone}}},
	kubeRootCAStep("only the new cluster CA"),
	apiServicesStep("only the new metrics-server CA"),
}

// aborting goes back to the old CAs. Everything moves to them while both
// CAs stay trusted, and the users holding kubeconfigs from the new client
// CA take new ones, and the kubelets holding certificates from it renew;
// only once that is recorded are the new CAs deleted, so a kubelet is back
// on a client certificate from the old client CA before the API server
// stops accepting the new one. The pools then roll again, as
// in Finalizing, for their nodes to stop trusting the new CAs.
var aborting = []step{
	{reason: v1alpha1.ReasonWaitingForOldCAsRestored, done: func(f Facts) bool { return f.OldCAsRestored },
		waiting: say("making every role's old CA the current one again"),
		plan:    []PlanLine{{"make the old CA current again for: %s (the new ones stay trusted)", ListCARoles}}},
	{reason: v1alpha1.ReasonWaitingForClients, done: func(f Facts) bool { return f.AllOnNewCA },
		waiting: say("re-issuing from the old CAs the certificates the new CAs signed"),
		plan:    []PlanLine{{"re-issue from the old CAs: %s", ListClientCertificates}}},
	{reason: v1alpha1.ReasonWaitingForConsumers, done: func(f Facts) bool { return f.ConsumersRolledOut },
		waiting: say("waiting for the control-plane workloads to roll out"),
		plan:    []PlanLine{{"roll: %s", ListConsumers}}},
	{reason: v1alpha1.ReasonWaitingForWorkers, done: func(f Facts) bool { return f.RolledBack || f.PendingWorkerPools == 0 }, managed: true,
		waiting: poolsToRoll,
		plan: []PlanLine{{"roll back every worker pool, held ones too (client and serving certificates from the old CAs; " +
			"in-place nodes also trust the old CAs alone from then on):", ListWorkerPools}}},
	{reason: v1alpha1.ReasonWaitingForKubeconfigHolders, done: func(f Facts) bool { return f.RolledBack || !waits(f, f.KubeconfigHolders, f.KubeconfigHoldersUnknown) },
		waiting: kubeconfigHolders,
		plan: []PlanLine{{"wait for the users of kubectl carousel kubeconfig who hold one from the new client CA to take a new one " +
			"(or for theirs to expire; abort-ca-rotation=force does not wait)", ListNone}}},
	{reason: v1alpha1.ReasonWaitingForKubeletHolders, done: func(f Facts) bool { return f.RolledBack || !waits(f, f.KubeletHolders, f.KubeletHoldersUnknown) }, managed: true,
		waiting: kubeletHolders,
		plan: []PlanLine{{"wait for the kubelets whose client certificate Carousel signed from the new client CA, or serving certificate " +
			"from the new kubelet CA, to renew (or for their certificates to expire, or their Nodes to be deleted; " +
			"abort-ca-rotation=force does not wait)", ListNone}}},
	{reason: v1alpha1.ReasonWaitingForNewCADrop, done: func(f Facts) bool { return f.RolledBack && f.OldCAsRemoved },
		waiting: say("deleting the new CAs once every certificate and node is back on the old ones"),
		plan:    []PlanLine{{"delete the new CAs (keys included); every trust bundle: old CA only", ListNone}}},
	{reason: v1alpha1.ReasonWaitingForConsumers, done: func(f Facts) bool { return f.ConsumersRolledOut },
		waiting: say("waiting for the control-plane workloads to roll out"),
		plan:    []PlanLine{{"roll again: %s", ListConsumers}}},
	{reason: v1alpha1.ReasonWaitingForWorkers, done: func(f Facts) bool { return f.PendingWorkerPools == 0 }, managed: true,
		waiting: poolsToRoll,
		plan:    []PlanLine{{"roll the Replace and Manual worker pools again (their kubelets drop the new CAs from their trust)", ListNone}}},
	{reason: v1alpha1.ReasonWaitingForEvidence, done: evidenceIn, managed: true,
		evidence: CheckOldCADropped,
		waiting:  say("waiting for the API server to reject the new client CA and serve a certificate from the old cluster CA"),
		plan:     []PlanLine{{"check that the API server rejects the new client CA and serves a certificate from the old cluster CA", ListNone}}},
	kubeRootCAStep("only the old cluster CA"),
	apiServicesStep("only the old metrics-server CA"),
}

// kubeRootCAStep waits until kube-root-ca.crt carries what in every
// namespace: pods mount it to trust the API server, so a namespace whose
// copy lags would break its workloads once the phase's server certificate
// or bundle change reaches them (Gardener #15301).
func kubeRootCAStep(what string) step {
	return trustStep(v1alpha1.ReasonWaitingForKubeRootCA, CheckKubeRootCA,
		func(f Facts) (Evidence, []string) { return f.KubeRootCA, f.KubeRootCABehind },
		"kube-root-ca.crt to carry "+what+" in every namespace", "(kube-controller-manager publishes it): %d namespace(s) behind")
}

// workloadsHadTimeToReload: pods have had workloadTrustReload since
// kube-root-ca.crt carried both cluster CAs everywhere, or there is nothing
// to wait for: no endpoint to check kube-root-ca.crt through, or no time
// asked for.
func workloadsHadTimeToReload(f Facts) bool {
	if f.KubeRootCA == EvidenceSkipped || f.WorkloadTrustReload <= 0 {
		return true
	}
	deadline := workloadTrustDeadline(f)
	return !deadline.IsZero() && !f.Now.Before(deadline)
}

// workloadTrustDeadline is when pods have had workloadTrustReload; zero
// until kube-root-ca.crt was seen carrying both cluster CAs.
func workloadTrustDeadline(f Facts) time.Time {
	if f.KubeRootCAPublished.IsZero() {
		return time.Time{}
	}
	return f.KubeRootCAPublished.Add(f.WorkloadTrustReload)
}

func workloadsReloading(f Facts) string {
	if f.KubeRootCAPublished.IsZero() {
		return "waiting to record when kube-root-ca.crt carried both cluster CAs in every namespace"
	}
	return fmt.Sprintf("giving pods until %s to reload kube-root-ca.crt, which carries both cluster CAs since %s "+
		"(spec.caRotation.workloadTrustReload: %s): kubelets rewrite it in the pods' volumes, client-go rereads it at most every 5 minutes",
		workloadTrustDeadline(f).UTC().Format(time.RFC3339), f.KubeRootCAPublished.UTC().Format(time.RFC3339), f.WorkloadTrustReload)
}

// apiServicesStep waits until the caBundle of every APIService labelled
// carousel.dev/ca-bundle=metrics-server, and of every other one that trusts
// a metrics-server CA, carries what: the aggregator verifies the aggregated
// API server with it, so it must trust the new CA before Finalizing moves
// the server's certificate, and drop the old one after. Carousel writes the
// labelled ones; the others wait for the user to label them
// (evidence.APIServiceLag).
func apiServicesStep(what string) step {
	return trustStep(v1alpha1.ReasonWaitingForAPIServices, CheckAPIServices,
		func(f Facts) (Evidence, []string) { return f.APIServices, f.APIServicesBehind },
		"the caBundle of the APIServices that trust the metrics-server CA to carry "+what,
		"(Carousel writes those labelled "+v1alpha1.LabelCABundle+"="+string(v1alpha1.CARoleMetricsServer)+"): %d APIService(s) behind")
}

// trustStep waits for a check of trust published in the managed cluster:
// observed reads its result and what lags behind.
func trustStep(reason v1alpha1.RotationReason, check EvidenceCheck, observed func(Facts) (Evidence, []string), waitingFor, behindFormat string) step {
	return step{reason: reason, managed: true, evidence: check,
		done: func(f Facts) bool { e, _ := observed(f); return passedOrSkipped(e) },
		waiting: func(f Facts) string {
			_, behind := observed(f)
			if len(behind) == 0 {
				return "waiting to check " + waitingFor
			}
			return fmt.Sprintf("waiting for %s %s: %s", waitingFor, fmt.Sprintf(behindFormat, len(behind)), namesBehind(behind))
		},
		plan: []PlanLine{{"check " + waitingFor, ListNone}}}
}

// namesBehind lists up to five names and counts the rest.
func namesBehind(names []string) string {
	const shown = 5
	if len(names) <= shown {
		return strings.Join(names, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(names[:shown], ", "), len(names)-shown)
}

// prepared is what Prepared waits for: the user.
var prepared = Wait{Reason: v1alpha1.ReasonWaitingForCompletion, Message: "every client uses the new CAs; update your own credentials, then annotate " +
	v1alpha1.OperationAnnotation + "=" + v1alpha1.OperationCompleteCARotation}

// waitingForWorkersRollout is what WaitingForWorkersRollout waits for: the
// user, to roll the held pools.
func waitingForWorkersRollout(f Facts) Wait {
	return Wait{Reason: v1alpha1.ReasonWaitingForWorkersRolloutOperation, Message: fmt.Sprintf(
		"everything but the held worker pools is prepared; %d pool(s) held: %s; roll them with %s=%s<pool>[,<pool>]",
		len(f.HeldWorkerPools), namesBehind(f.HeldWorkerPools), v1alpha1.OperationAnnotation, v1alpha1.OperationRotateRolloutWorkersPrefix)}
}

// evidenceIn: the API server was seen behaving as the phase requires, or
// cannot be checked (no endpoint). Anything else, unset included, waits.
func evidenceIn(f Facts) bool { return passedOrSkipped(f.Evidence) }

func passedOrSkipped(e Evidence) bool { return e == EvidencePassed || e == EvidenceSkipped }

func say(message string) func(Facts) string { return func(Facts) string { return message } }

// holdersWait: an abort keeps the new client CA for the users holding
// kubeconfigs from it and the kubelets holding certificates from it.
func holdersWait(f Facts) bool {
	return waits(f, f.KubeconfigHolders, f.KubeconfigHoldersUnknown) || waits(f, f.KubeletHolders, f.KubeletHoldersUnknown)
}

// waits: an abort that is not forced waits for holders, and for those the
// reconciler cannot tell.
func waits(f Facts, holders, unknown []string) bool {
	return (len(holders) > 0 || len(unknown) > 0) && !f.AbortForced
}

// firstNames names the first three of names, and says how many more there
// are.
func firstNames(names []string) string {
	first := strings.Join(names[:min(len(names), 3)], ", ")
	if more := len(names) - 3; more > 0 {
		first += fmt.Sprintf(" and %d more", more)
	}
	return first
}

// holdersCounted counts the holders named, and says that there may be others
// the reconciler cannot name.
func holdersCounted(noun string, names, unknown []string) string {
	switch {
	case len(unknown) == 0:
		return fmt.Sprintf("%d %s", len(names), noun)
	case len(names) == 0:
		return noun + " Carousel cannot name"
	}
	return fmt.Sprintf("%d %s, and others Carousel cannot name,", len(names), noun)
}

// holdersNamed says why the reconciler cannot name every holder, then
// names the first ones.
func holdersNamed(names, unknown []string) string {
	said := slices.Clip(unknown)
	if len(names) > 0 {
		said = append(said, firstNames(names))
	}
	return strings.Join(said, "; ")
}

func kubeletHolders(f Facts) string {
	return fmt.Sprintf("%s whose kubelet holds a certificate Carousel signed from a new CA the abort deletes (a client certificate "+
		"from the new client CA, or a serving one from the new kubelet CA, which the API server would no longer verify): %s; "+
		"each kubelet renews it (now from the old CAs; a node of an InPlace pool, rolled without it while it was offline, is asked to "+
		"and does once it is back online) or it expires, or the Node is deleted if it is gone, or %s=%s%s deletes the CAs now "+
		"(such a kubelet then needs a fresh bootstrap kubeconfig, or a new serving certificate)",
		holdersCounted("Node(s)", f.KubeletHolders, f.KubeletHoldersUnknown), holdersNamed(f.KubeletHolders, f.KubeletHoldersUnknown), v1alpha1.OperationAnnotation, v1alpha1.OperationAbortCARotation, v1alpha1.OperationForceSuffix)
}

func kubeconfigHolders(f Facts) string {
	return fmt.Sprintf("%s hold a kubeconfig from the new client CA, which the abort deletes: %s; "+
		"each takes a new one (kubectl carousel kubeconfig --name <name>, now from the old client CA) or waits for it to expire, "+
		"or %s=%s%s deletes it now", holdersCounted("user(s) of kubectl carousel kubeconfig", f.KubeconfigHolders, f.KubeconfigHoldersUnknown),
		holdersNamed(f.KubeconfigHolders, f.KubeconfigHoldersUnknown), v1alpha1.OperationAnnotation, v1alpha1.OperationAbortCARotation, v1alpha1.OperationForceSuffix)
}

func poolsToRoll(f Facts) string {
	return fmt.Sprintf("%d worker pool(s) still to roll", f.PendingWorkerPools)
}

// stepsOf returns the steps of the phase Carousel works through, and the
// phase it ends in once they are done; nil steps for a phase that waits for
// the user. Phase 1 ends in WaitingForWorkersRollout while pools are held,
// and WaitingForWorkersRollout, which has no steps, ends in Prepared once
// none is.
func stepsOf(f Facts) ([]step, v1alpha1.CARotationPhase) {
	switch phase := f.Phase; {
	case phase.Preparing() && len(f.HeldWorkerPools) > 0:
		return preparing, v1alpha1.RotationWaitingForWorkersRollout
	case phase.Preparing():
		return preparing, v1alpha1.RotationPrepared
	case phase == v1alpha1.RotationWaitingForWorkersRollout && len(f.HeldWorkerPools) == 0 && f.PendingWorkerPools == 0:
		return nil, v1alpha1.RotationPrepared
	case phase == v1alpha1.RotationFinalizing:
		return finalizing, v1alpha1.RotationCompleted
	case phase == v1alpha1.RotationAborting:
		return aborting, v1alpha1.RotationAborted
	}
	return nil, f.Phase
}

// firstPending returns the first step of the phase that is not done.
func firstPending(f Facts) *step {
	steps, _ := stepsOf(f)
	for i := range steps {
		if !steps[i].done(f) {
			return &steps[i]
		}
	}
	return nil
}

// waitOf says what the phase of f waits for, nil when nothing.
func waitOf(f Facts) *Wait {
	switch f.Phase {
	case v1alpha1.RotationPrepared:
		w := prepared
		return &w
	case v1alpha1.RotationWaitingForWorkersRollout:
		w := waitingForWorkersRollout(f)
		return &w
	}
	s := firstPending(f)
	if s == nil {
		return nil
	}
	w := &Wait{Reason: s.reason, Message: s.waiting(f), PollManaged: s.managed}
	if s.until != nil {
		w.Until = s.until(f)
	}
	return w
}

// EvidenceDue returns the check of the managed cluster whose result is all
// the phase still waits for. The reconciler runs it before Decide and, when
// it passed, the one due next, until one does not pass or none is due.
func EvidenceDue(f Facts) EvidenceCheck {
	if s := firstPending(f); s != nil {
		return s.evidence
	}
	return CheckNone
}

// PublicationCheckDue reports whether the reconciler should also check
// kube-root-ca.crt while Preparing still waits for worker pools or for the
// API server to accept the new client CA: kube-controller-manager publishes
// both cluster CAs once it has rolled with them, before the worker pools
// roll, so the time pods get to reload kube-root-ca.crt
// (workloadTrustReload) can run while the pools roll instead of after them.
// A check that passes only records the time (RecordKubeRootCAPublished);
// the kube-root-ca.crt step still checks it again in its turn. It is due
// until the time is recorded, and only when there is a time to wait.
func PublicationCheckDue(f Facts) bool {
	if !f.Phase.Preparing() || !f.KubeRootCAPublished.IsZero() || f.WorkloadTrustReload <= 0 {
		return false
	}
	s := firstPending(f)
	return s != nil && (s.reason == v1alpha1.ReasonWaitingForWorkers || s.reason == v1alpha1.ReasonWaitingForEvidence)
}

// Decide maps what a pass observed to the phase after it, what that phase
// waits for, and what the reconciler must carry out.
func Decide(f Facts) Decision {
	if f.Phase == v1alpha1.RotationAborting && !f.RolledBack && backOnOldCAs(f) && !holdersWait(f) {
		return Decision{Phase: f.Phase, Wait: waitOf(f), RecordRolledBack: true}
	}
	if CanDropOldCAs(f) && !f.OldCAsRemoved {
		return Decision{Phase: f.Phase, Wait: waitOf(f), DropOldCAs: true}
	}
	next := f
	if _, end := stepsOf(f); firstPending(f) == nil {
		next.Phase = end
	}
	return Decision{Phase: next.Phase, Wait: waitOf(next)}
}

// CanDropOldCAs reports whether Finalizing may delete the old CAs: every
// certificate, servers included, is on the new CA and every consumer serves
// and presents it; or whether Aborting may delete the new CAs, which are
// previous then: the status records that every certificate, consumer and
// worker pool is back on the old CAs, and that no user held a kubeconfig
// from the new client CA only nor a kubelet a certificate from it, or the
// abort was forced (Decision.RecordRolledBack).
func CanDropOldCAs(f Facts) bool {
	switch f.Phase {
	case v1alpha1.RotationFinalizing:
		return f.AllOnNewCA && f.ConsumersRolledOut
	case v1alpha1.RotationAborting:
		return f.RolledBack && f.OldCAsRestored && f.AllOnNewCA && f.ConsumersRolledOut
	}
	return false
}

// backOnOldCAs: an abort's certificates, consumers and worker pools are
// back on the old CAs.
func backOnOldCAs(f Facts) bool {
	return f.OldCAsRestored && f.AllOnNewCA && f.ConsumersRolledOut && f.PendingWorkerPools == 0
}

// Issuer decides which CA of its role signs a certificate.
//
// Outside a rotation and in Finalizing that is the current CA. From Preparing
// (or PreparingWithoutWorkersRollout) to Prepared, while both CAs are
// trusted, a certificate renewed in Preparing (a client) moves to the new
// CA once every consumer trusts both CAs, and stays there; everything else
// (servers, and the API server's client certificate for kubelets, which nodes
// trust only after their rollout) stays on the old CA until Finalizing.
func Issuer(renewIn credentials.RenewalPhase, phase v1alpha1.CARotationPhase, trustEstablished, signedByCurrent bool) Generation {
	switch {
	case phase.BothCAsTrusted():
		if renewIn == credentials.RenewInPreparing && (trustEstablished || signedByCurrent) {
			return Current
		}
		return Previous
	default:
		return Current
	}
}

// Generation picks one of a role's two CAs.
type Generation string

const (
	// Current is the newest CA of a role (the new one during a rotation).
	Current Generation = "current"
	// Previous is the old CA, kept during a rotation.
	Previous Generation = "previous"
)

// PollDelay is how long a reconcile waiting on the managed cluster waits
// before it looks again: base at first and, while a check keeps failing
// (since failingSince; zero when nothing failed), a quarter of the time it
// has been failing, at most maximum. An API server that comes back is
// noticed within a quarter of its outage, and a long outage costs a probe
// every few minutes instead of every few seconds.
func PollDelay(failingSince, now time.Time, base, maximum time.Duration) time.Duration {
	if failingSince.IsZero() || !now.After(failingSince) {
		return base
	}
	return min(max(now.Sub(failingSince)/4, base), max(maximum, base))
}
