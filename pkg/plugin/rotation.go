package plugin

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/go-logr/logr"
	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
	"k8s.io/client-go/util/retry"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
	"github.com/carousel-dev/carousel/pkg/client/clientset/versioned"
	"github.com/carousel-dev/carousel/pkg/maintenance"
	"github.com/carousel-dev/carousel/pkg/pki"
	"github.com/carousel-dev/carousel/pkg/rotation"
)

// operationFlags are the flags every operation command has: --wait and
// --timeout, and --in-maintenance-window for those that can wait for the
// window (maintenance.Queueable).
type operationFlags struct {
	wait, inWindow bool
	timeout        time.Duration
	// timeoutSet: --timeout was given, and is taken as it is.
	timeoutSet bool
}

func addOperationFlags(cmd *cobra.Command, until string, queueable bool) *operationFlags {
	f := &operationFlags{}
	cmd.Flags().BoolVar(&f.wait, "wait", false, "Follow the rotation, printing each phase change, until it is "+until)
	if queueable {
		cmd.Flags().BoolVar(&f.inWindow, "in-maintenance-window", false, "Queue the operation for the Cluster's maintenance time window (spec.maintenance.timeWindow) instead of requesting it now")
	}
	cmd.Flags().DurationVar(&f.timeout, "timeout", time.Hour, "How long --wait waits; by default an hour more than the rotation's own waits "+
		"(spec.caRotation.workloadTrustReload, spec.serviceAccountKeyRotation.workloadTokenRefresh) when it starts one or rolls held pools")
	refuseTimeoutsNotPositive(cmd, &f.wait, &f.timeout)
	prerun := cmd.PreRunE
	cmd.PreRunE = func(cmd *cobra.Command, args []string) error {
		f.timeoutSet = cmd.Flags().Changed("timeout")
		return prerun(cmd, args)
	}
	return f
}

// followTimeout is how long --wait follows operation on cl: --timeout when
// given; otherwise the default, past the waits cl's spec puts into what the
// operation starts: pods are given workloadTrustReload to reload
// kube-root-ca.crt before a CA rotation is Prepared (after the last held
// pool rolled, for a rotation started without rolling them), and
// workloadTokenRefresh (an hour by default) to refresh their tokens before
// a service-account key rotation is. Started together, they wait at once.
func followTimeout(f *operationFlags, operation string, cl *v1alpha1.Cluster) time.Duration {
	op, err := v1alpha1.ParseOperation(operation)
	if f.timeoutSet || err != nil {
		return f.timeout
	}
	var own time.Duration
	if op.Verb.StartsCARotation() || op.Verb == v1alpha1.VerbRotateRolloutWorkers {
		own = cl.Spec.CARotation.WorkloadTrustReloadOrDefault()
	}
	if op.Verb.ServiceAccountKeyVerb() == v1alpha1.VerbRotateServiceAccountKeyStart {
		own = max(own, cl.Spec.ServiceAccountKeyRotation.WorkloadTokenRefreshOrDefault())
	}
	return f.timeout + own
}

// refuseTimeoutsNotPositive has cmd refuse, before it writes anything, a
// --timeout that is not positive with --wait: the operation would be
// requested, and the wait end at once as failed.
func refuseTimeoutsNotPositive(cmd *cobra.Command, wait *bool, timeout *time.Duration) {
	cmd.PreRunE = func(*cobra.Command, []string) error {
		if *wait && *timeout <= 0 {
			return fmt.Errorf("--timeout %s: --wait needs a positive timeout", *timeout)
		}
		return nil
	}
}

// requestOperation sets the operation annotation of the Cluster name (the
// admission webhook says when the operation is not allowed), or queues it
// for the maintenance window, and, with --wait, follows the phases until
// target. It replaces no other operation requested or queued (someone
// else's, say, that Carousel has not taken yet): the patch carries the
// resourceVersion it checked.
func (e *env) requestOperation(ctx context.Context, name, operation string, target followTarget, f *operationFlags) error {
	if _, err := maintenance.Queueable(operation); f.inWindow && err != nil {
		return fmt.Errorf("--in-maintenance-window: %w", err) // what the webhook says, before anything is written
	}
	annotation, done := v1alpha1.OperationAnnotation, "requested"
	if f.inWindow {
		annotation, done = v1alpha1.MaintenanceOperationAnnotation, "queued for the maintenance window"
	}
	var req *request
	if f.wait && !f.inWindow {
		req = e.newRequest(ctx, name, operation)
	}
	var cl *v1alpha1.Cluster
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var c client.Client
		var err error
		if c, cl, err = e.clusterArg(ctx, name); err != nil {
			return err
		}
		if pending, ok := cl.Annotations[annotation]; ok && pending != operation {
			return fmt.Errorf("cluster %s/%s has %s=%s, which Carousel has not taken yet; wait for it, or remove it first: kubectl annotate clusters.carousel.dev %s -n %s %s-",
				cl.Namespace, name, annotation, pending, name, cl.Namespace, annotation)
		}
		patch := client.MergeFromWithOptions(cl.DeepCopy(), client.MergeFromWithOptimisticLock{})
		if cl.Annotations == nil {
			cl.Annotations = map[string]string{}
		}
		cl.Annotations[annotation] = operation
		return c.Patch(ctx, cl, patch)
	})
	if err != nil {
		return err
	}
	fmt.Fprintf(e.streams.Out, "cluster %s/%s: %s %s\n", cl.Namespace, name, operation, done)
	if !f.wait {
		return nil
	}
	if req != nil {
		req.record = operationRecord(cl)
	}
	if f.inWindow {
		target.queued = operation
	}
	return e.follow(ctx, cl.Namespace, name, target, followTimeout(f, operation, cl), req)
}

// request is an operation requested of a Cluster, for --wait to tell when
// Carousel refuses it: the Cluster's operationRecord once it was requested,
// and its OperationRefused events before.
type request struct {
	operation string
	record    *v1alpha1.CredentialsRotation
	events    corev1client.EventInterface
	before    map[types.UID]string // resourceVersion by UID
	// looked is set once --wait looked for a refusal.
	looked bool
}

// newRequest is the request of operation on the Cluster name, or nil when
// its events cannot be listed (then --wait ends only at its target or
// timeout).
func (e *env) newRequest(ctx context.Context, name, operation string) *request {
	cfg, ns, err := e.config()
	if err != nil {
		return nil
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil
	}
	req := &request{operation: operation, events: cs.CoreV1().Events(ns), before: map[types.UID]string{}}
	events, err := req.refusals(ctx, name)
	if err != nil {
		return nil
	}
	for _, ev := range events {
		req.before[ev.UID] = ev.ResourceVersion
	}
	return req
}

// refusals lists the OperationRefused events of the Cluster name.
func (req *request) refusals(ctx context.Context, name string) ([]corev1.Event, error) {
	list, err := req.events.List(ctx, metav1.ListOptions{FieldSelector: fields.Set{
		"involvedObject.apiVersion": v1alpha1.SchemeGroupVersion.String(), "involvedObject.kind": "Cluster", "involvedObject.name": name,
		"reason": v1alpha1.EventOperationRefused}.AsSelector().String()})
	if err != nil {
		return nil, err
	}
	return list.Items, nil
}

// operationRecord is where an operation Carousel applies leaves its trace:
// the state of the Cluster's rotations (a phase, a time, a pool released),
// without the old-CA usage list, which changes by itself.
func operationRecord(cl *v1alpha1.Cluster) *v1alpha1.CredentialsRotation {
	if cl.Status.Credentials == nil || cl.Status.Credentials.Rotation == nil {
		return nil
	}
	r := cl.Status.Credentials.Rotation.DeepCopy()
	if r.CertificateAuthorities != nil {
		r.CertificateAuthorities.OldCAUsage = nil
	}
	return r
}

// mayBeRefusedBy reports whether the operation req asked of cl is gone,
// target not reached and the operationRecord as it was: Carousel refused
// it, or had already applied it (as a second forced abort), which an
// OperationRefused event tells apart (Carousel records what an operation
// does in the status before it removes the annotation, and emits the event
// when it refuses one). A rotation that moved on by itself in between hides
// a refusal, which --wait then reports only at its timeout.
func (req *request) mayBeRefusedBy(cl *v1alpha1.Cluster, target followTarget) bool {
	_, requested := cl.Annotations[v1alpha1.OperationAnnotation]
	return !requested && !rotationReached(cl, target) && equality.Semantic.DeepEqual(req.record, operationRecord(cl))
}

// refusalEventWait is how long --wait looks for the event that says why an
// operation was refused: Carousel emits it as it removes the annotation,
// and events are sent apart from the Cluster's writes.
const refusalEventWait = 10 * time.Second

// refusal is the error of the operation Carousel refused, with the message
// of the OperationRefused event it emitted for it since the request, once
// (mayBeRefusedBy); nil when no such event comes.
func (req *request) refusal(ctx context.Context, cl *v1alpha1.Cluster) error {
	if req.looked {
		return nil
	}
	req.looked = true
	var reason string
	_ = wait.PollUntilContextTimeout(ctx, time.Second, refusalEventWait, true, func(ctx context.Context) (bool, error) {
		events, err := req.refusals(ctx, cl.Name)
		if err != nil {
			return false, err
		}
		reason = newRefusal(events, req.operation, req.before)
		return reason != "", nil
	})
	if reason == "" {
		return nil
	}
	return fmt.Errorf("cluster %s/%s: Carousel refused %s and removed it: %s", cl.Namespace, cl.Name, req.operation, reason)
}

// newRefusal is the message of the newest of events about operation (its
// message names it, quoted) that is not in before, or changed since
// (another of the same series), or empty.
func newRefusal(events []corev1.Event, operation string, before map[types.UID]string) string {
	var newest time.Time
	var message string
	for _, ev := range events {
		if rv, seen := before[ev.UID]; seen && rv == ev.ResourceVersion || !strings.Contains(ev.Message, strconv.Quote(operation)) {
			continue
		}
		at := slices.MaxFunc([]time.Time{ev.CreationTimestamp.Time, ev.LastTimestamp.Time, ev.EventTime.Time, seriesLast(ev.Series)}, time.Time.Compare)
		if message == "" || at.After(newest) {
			newest, message = at, ev.Message
		}
	}
	return message
}

func seriesLast(s *corev1.EventSeries) time.Time {
	if s == nil {
		return time.Time{}
	}
	return s.LastObservedTime.Time
}

// followTarget is where --wait stops: the CA rotation in one of the phases
// ca (none: the CA rotation is not followed) and the service-account key
// rotation in phase serviceAccountKey (empty: not followed), with no
// operation requested, nor, when the operation followed was queued for the
// maintenance window (queued: its value), that one still queued.
type followTarget struct {
	ca                []v1alpha1.CARotationPhase
	serviceAccountKey v1alpha1.ServiceAccountKeyRotationPhase
	queued            string
}

func (t followTarget) String() string {
	var parts []string
	if len(t.ca) > 0 {
		parts = append(parts, phaseList(t.ca))
	}
	if t.serviceAccountKey != "" {
		parts = append(parts, "service-account key "+string(t.serviceAccountKey))
	}
	return strings.Join(parts, " and ")
}

// scope is what `rotation start` and `rotation complete` rotate (--scope).
type scope string

const (
	scopeCA                scope = "ca"
	scopeServiceAccountKey scope = "service-account-key"
	scopeAll               scope = "all"
)

var scopes = []string{string(scopeCA), string(scopeServiceAccountKey), string(scopeAll)}

// operationOf is the operation that starts (complete false) or completes
// the rotations of the scope, and where --wait stops; caTarget is the CA
// phase it stops at.
func operationOf(s scope, complete bool, caTarget []v1alpha1.CARotationPhase) (string, followTarget, error) {
	verbs := map[scope][2]v1alpha1.OperationVerb{
		scopeCA:                {v1alpha1.VerbStartCARotation, v1alpha1.VerbCompleteCARotation},
		scopeServiceAccountKey: {v1alpha1.VerbRotateServiceAccountKeyStart, v1alpha1.VerbRotateServiceAccountKeyComplete},
		scopeAll:               {v1alpha1.VerbRotateCredentialsStart, v1alpha1.VerbRotateCredentialsComplete},
	}
	v, ok := verbs[s]
	if !ok {
		return "", followTarget{}, fmt.Errorf("--scope %q is not one of %s", s, strings.Join(scopes, ", "))
	}
	saTarget := v1alpha1.ServiceAccountKeyPrepared
	verb := v[0]
	if complete {
		saTarget, verb = v1alpha1.ServiceAccountKeyCompleted, v[1]
	}
	var target followTarget
	if s != scopeServiceAccountKey {
		target.ca = caTarget
	}
	if s != scopeCA {
		target.serviceAccountKey = saTarget
	}
	return string(verb), target, nil
}

// operationCommand is `rotation start` or `rotation complete`: it requests
// the operation and, with --wait, follows the phases until the target one.
// start also takes --without-workers-rollout.
func (e *env) operationCommand(use, operation string, target v1alpha1.CARotationPhase) *cobra.Command {
	var withoutWorkers bool
	var scopeFlag string
	cmd := &cobra.Command{
		Use:   use + " CLUSTER",
		Short: fmt.Sprintf("Annotate CLUSTER with %s=%s (or, with --in-maintenance-window, %s)", v1alpha1.OperationAnnotation, operation, v1alpha1.MaintenanceOperationAnnotation),
		Long: fmt.Sprintf(`Request the %[1]s operation on CLUSTER by annotating it with %[2]s=%[1]s; Carousel carries it
out and the Cluster's rotation ends in phase %[3]s. The admission webhook refuses the operation, with the reason,
when the rotation is in a phase that does not allow it.

With --in-maintenance-window the operation is queued in %[4]s instead, and Carousel starts it when
the Cluster's maintenance time window (spec.maintenance.timeWindow) opens.

With --wait the command follows the Cluster (a watch) and prints the phase, and what Carousel waits for, each
time either changes, until the rotation is %[3]s or --timeout passes.`, operation, v1alpha1.OperationAnnotation, target, v1alpha1.MaintenanceOperationAnnotation),
		Example: fmt.Sprintf(`  # %[1]s the CA rotation of the Cluster prod and follow it until it is %[2]s
  kubectl carousel rotation %[3]s prod -n team-a --wait --timeout 2h

  # Leave it to the Cluster's maintenance window
  kubectl carousel rotation %[3]s prod -n team-a --in-maintenance-window`, strings.ToUpper(use[:1])+use[1:], target, use),
		Args:              oneCluster,
		ValidArgsFunction: e.completeClusters,
	}
	f := addOperationFlags(cmd, string(target), true)
	complete := operation == v1alpha1.OperationCompleteCARotation
	keyOperation, _, _ := operationOf(scopeServiceAccountKey, complete, nil)
	allOperation, _, _ := operationOf(scopeAll, complete, nil)
	cmd.Long += fmt.Sprintf(`

--scope says what rotates: %[1]s (the default) the certificate authorities, %[2]s the service-account token
signing key (%[3]s), %[4]s both at once (%[5]s).`, scopeCA, scopeServiceAccountKey, keyOperation, scopeAll, allOperation)
	cmd.Example += fmt.Sprintf(`

  # %s the rotation of the service-account signing key only
  kubectl carousel rotation %s prod -n team-a --scope service-account-key --wait`, strings.ToUpper(use[:1])+use[1:], use)
	cmd.Flags().StringVar(&scopeFlag, "scope", string(scopeCA), "What rotates: "+strings.Join(scopes, ", "))
	_ = cmd.RegisterFlagCompletionFunc("scope", cobra.FixedCompletions(scopes, cobra.ShellCompDirectiveNoFileComp))
	if operation == v1alpha1.OperationStartCARotation {
		cmd.Long += fmt.Sprintf(`

With --without-workers-rollout the operation is %[1]s: Carousel prepares the control plane and holds
every worker pool, which it rolls only once "kubectl carousel rotation rollout-workers" names it; the rotation
then waits in phase %[2]s (--wait ends there) until no pool is held. It does not wait for the maintenance
window: it cannot be combined with --in-maintenance-window.`, v1alpha1.OperationStartCARotationWithoutWorkersRollout, v1alpha1.RotationWaitingForWorkersRollout)
		cmd.Example += `

  # Prepare the control plane now, and roll the worker pools later, one at a time
  kubectl carousel rotation start prod -n team-a --without-workers-rollout --wait`
		cmd.Flags().BoolVar(&withoutWorkers, "without-workers-rollout", false,
			"Prepare the control plane only, and hold every worker pool until rollout-workers names it (not with --in-maintenance-window)")
	}
	var force bool
	if complete {
		cmd.Long += fmt.Sprintf(`

While anything still depends on the old CAs (the nodes, certificates and users "kubectl carousel rotation
status" lists under "Old CAs"), the webhook refuses the completion. --force completes anyway (%[1]s%[2]s):
whatever still depends on the old CAs loses access to the cluster.`, operation, v1alpha1.OperationForceSuffix)
		cmd.Flags().BoolVar(&force, "force", false, "Complete although clients still depend on the old CAs; they lose access")
	}
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		op, follow, err := operationOf(scope(scopeFlag), complete, []v1alpha1.CARotationPhase{target})
		if err != nil {
			return err
		}
		if force {
			if scope(scopeFlag) == scopeServiceAccountKey {
				return fmt.Errorf("--force overrides the old-CA usage gate of a CA rotation: it cannot be combined with --scope %s", scopeFlag)
			}
			op += v1alpha1.OperationForceSuffix
		}
		if withoutWorkers {
			if scope(scopeFlag) != scopeCA {
				return fmt.Errorf("--without-workers-rollout rotates the CAs only: it cannot be combined with --scope %s", scopeFlag)
			}
			// A Cluster without worker pools goes straight to Prepared.
			op, follow.ca = v1alpha1.OperationStartCARotationWithoutWorkersRollout, []v1alpha1.CARotationPhase{v1alpha1.RotationWaitingForWorkersRollout, target}
		}
		return e.requestOperation(cmd.Context(), args[0], op, follow, f)
	}
	return cmd
}

// rolloutWorkersCommand is `rotation rollout-workers`: it releases worker
// pools held by a rotation started without workers rollout.
func (e *env) rolloutWorkersCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "rollout-workers CLUSTER POOL [POOL...]",
		Short: fmt.Sprintf("Roll worker pools held by a rotation started with --without-workers-rollout (%s=%s<pool>,...)", v1alpha1.OperationAnnotation, v1alpha1.OperationRotateRolloutWorkersPrefix),
		Long: fmt.Sprintf(`Roll the named worker pools of CLUSTER, which a rotation started with --without-workers-rollout holds
(pendingWorkersRollouts lists them with held: true), by annotating it with %[1]s=%[2]s<pool>[,<pool>].
Each pool rolls with its rolloutStrategy; the rotation is in phase %[3]s until they rolled, then in phase
%[4]s while other pools are held, and %[5]s once none is. The admission webhook refuses a pool
that is not held.

--wait follows the Cluster until it is %[4]s or %[5]s again.`, v1alpha1.OperationAnnotation, v1alpha1.OperationRotateRolloutWorkersPrefix,
			v1alpha1.RotationPreparing, v1alpha1.RotationWaitingForWorkersRollout, v1alpha1.RotationPrepared),
		Example: `  # Roll the pool canary of the Cluster prod, and wait until it rolled
  kubectl carousel rotation rollout-workers prod canary -n team-a --wait

  # Then the others
  kubectl carousel rotation rollout-workers prod pool-a pool-b -n team-a`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) >= 2 {
				return nil
			}
			return fmt.Errorf("%s takes the name of a Cluster and of at least one worker pool, got %d argument(s): %s", cmd.CommandPath(), len(args), cmd.UseLine())
		},
		ValidArgsFunction: e.completeHeldPools,
	}
	f := addOperationFlags(cmd, string(v1alpha1.RotationWaitingForWorkersRollout)+" or "+string(v1alpha1.RotationPrepared), false)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		op := v1alpha1.Operation{Verb: v1alpha1.VerbRotateRolloutWorkers, Pools: args[1:]}
		return e.requestOperation(cmd.Context(), args[0], op.String(),
			followTarget{ca: []v1alpha1.CARotationPhase{v1alpha1.RotationWaitingForWorkersRollout, v1alpha1.RotationPrepared}}, f)
	}
	return cmd
}

// abortCommand is `rotation abort`: it takes a rotation that was not
// completed back to the old CAs.
func (e *env) abortCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "abort CLUSTER",
		Short: fmt.Sprintf("Take a CA rotation that was not completed back to the old CAs (%s=%s)", v1alpha1.OperationAnnotation, v1alpha1.OperationAbortCARotation),
		Long: fmt.Sprintf(`Abort the CA rotation of CLUSTER by annotating it with %[1]s=%[2]s. In phases %[3]s,
%[4]s, %[5]s and %[6]s the rotation goes to phase %[7]s: every role's old CA is current again,
the certificates the new CAs signed are re-issued from the old ones, the control plane and every worker pool (held
ones too) roll back, and only then are the new CAs, keys included, deleted from every trust bundle; the pools roll
once more. The rotation ends in phase %[8]s, from where a new one may start. The admission webhook refuses the abort in any other phase:
once %[9]s started, the old CAs are on their way out.

Kubeconfigs issued during the rotation ("kubectl carousel kubeconfig") are signed by the new client CA and stop
working once it is deleted. Before deleting it the abort waits (reason %[10]s) for each user holding one to take
a new one with the same --name, which kubectl carousel kubeconfig signs from the old client CA as soon as the abort
re-issued Carousel's own certificate from it, early in %[7]s; or for theirs to expire. It waits, too, for the
kubelets holding client certificates Carousel signed from it (reason %[12]s) to renew them. --force
(%[1]s=%[2]s%[11]s) does not wait: given while the abort is under way, it ends the wait.

--wait follows the Cluster until it is %[8]s.`, v1alpha1.OperationAnnotation, v1alpha1.OperationAbortCARotation,
			v1alpha1.RotationPreparing, v1alpha1.RotationPreparingWithoutWorkersRollout, v1alpha1.RotationWaitingForWorkersRollout,
			v1alpha1.RotationPrepared, v1alpha1.RotationAborting, v1alpha1.RotationAborted, v1alpha1.OperationCompleteCARotation,
			v1alpha1.ReasonWaitingForKubeconfigHolders, v1alpha1.OperationForceSuffix, v1alpha1.ReasonWaitingForKubeletHolders),
		Example: `  # Go back to the old CAs of the Cluster prod, and wait until the new ones are deleted
  kubectl carousel rotation abort prod -n team-a --wait --timeout 1h

  # Stop waiting for the users and kubelets who hold credentials from the new client CA: they lose access
  kubectl carousel rotation abort prod -n team-a --force`,
		Args:              oneCluster,
		ValidArgsFunction: e.completeClusters,
	}
	// Never queued for the maintenance window: it would outlive the
	// rotation it was meant for, and abort the next.
	f := &operationFlags{}
	cmd.Flags().BoolVar(&f.wait, "wait", false, "Follow the rotation, printing each phase change, until it is "+string(v1alpha1.RotationAborted))
	cmd.Flags().DurationVar(&f.timeout, "timeout", time.Hour, "How long --wait waits")
	refuseTimeoutsNotPositive(cmd, &f.wait, &f.timeout)
	force := cmd.Flags().Bool("force", false, "Delete the new CAs without waiting for the users holding kubeconfigs, nor the kubelets holding client certificates, "+
		"from the new client CA (they lose access: a kubelet then needs a fresh bootstrap kubeconfig); in phase "+
		string(v1alpha1.RotationAborting)+", end that wait")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		op := v1alpha1.Operation{Verb: v1alpha1.VerbAbortCARotation, Force: *force}
		return e.requestOperation(cmd.Context(), args[0], op.String(),
			followTarget{ca: []v1alpha1.CARotationPhase{v1alpha1.RotationAborted}}, f)
	}
	return cmd
}

// completeHeldPools completes the CLUSTER argument, then the names of the
// Cluster's held pools not named yet.
func (e *env) completeHeldPools(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
	if len(args) == 0 {
		return e.completeClusters(cmd, args, toComplete)
	}
	_, cl, err := e.clusterArg(cmd.Context(), args[0])
	if err != nil {
		cobra.CompDebugln("reading the Cluster: "+err.Error(), true)
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	var pools []cobra.Completion
	for _, pool := range rotation.HeldPools(cl.CARotation()) {
		if strings.HasPrefix(pool, toComplete) && !slices.Contains(args[1:], pool) {
			pools = append(pools, pool)
		}
	}
	return pools, cobra.ShellCompDirectiveNoFileComp
}

// follow watches the Cluster and prints the phase and what it waits for
// whenever either changes, until target. With req, the operation just
// requested, it ends as soon as Carousel refuses it, with the reason its
// event gives.
func (e *env) follow(ctx context.Context, ns, name string, target followTarget, timeout time.Duration, req *request) error {
	cfg, _, err := e.config()
	if err != nil {
		return err
	}
	clusters, err := versioned.NewForConfig(cfg)
	if err != nil {
		return err
	}
	byName := func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("metadata.name", name).String()
	}
	// The watch below retries a list that fails until the timeout,
	// silently: one first list says at once when --wait may not follow
	// (no right to list Clusters). Anything else (an API server away for
	// a moment) the watch retries.
	first := metav1.ListOptions{Limit: 1}
	byName(&first)
	if _, err := clusters.CarouselV1alpha1().Clusters(ns).List(ctx, first); apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err) {
		return fmt.Errorf("--wait follows the Cluster with a list and a watch of Clusters: %w", err)
	}
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			byName(&o)
			if o.ResourceVersion == "0" {
				// The reflector's first list takes any copy the API server
				// has (its watch cache), which may be from before the
				// operation was written: judged, it could end the wait at
				// once, or take someone else's abort for one since. The
				// most recent one, then (a list of one Cluster).
				o.ResourceVersion = ""
			}
			return clusters.CarouselV1alpha1().Clusters(ns).List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			byName(&o)
			return clusters.CarouselV1alpha1().Clusters(ns).Watch(ctx, o)
		},
	}
	waitCtx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	// Its informer logs nowhere: client-go's reflector logs a watch that
	// ended with an error, which it retries, and may take for one the stop
	// that ends a follow in the middle of a read, printing a warning after
	// the last line.
	waitCtx = klog.NewContext(waitCtx, logr.Discard())
	var last string
	_, err = watchtools.UntilWithSync(waitCtx, lw, &v1alpha1.Cluster{}, func(store cache.Store) (bool, error) {
		_, exists, err := store.GetByKey(ns + "/" + name)
		if err == nil && !exists {
			err = fmt.Errorf("cluster %s/%s does not exist", ns, name)
		}
		return false, err
	}, func(ev watch.Event) (bool, error) {
		cl, ok := ev.Object.(*v1alpha1.Cluster)
		if !ok || ev.Type == watch.Deleted {
			return false, fmt.Errorf("cluster %s/%s was deleted", ns, name)
		}
		line := followLine(cl, target)
		if line != last {
			fmt.Fprintln(e.streams.Out, line)
			last = line
		}
		if req != nil && req.mayBeRefusedBy(cl, target) {
			if err := req.refusal(ctx, cl); err != nil {
				return false, err
			}
		}
		if abortedMeanwhile(cl, target) {
			return false, fmt.Errorf("%s/%s: the CA rotation was aborted (phase %s), so it will not be %s", ns, name, cl.CARotationPhase(), target)
		}
		return rotationReached(cl, target), nil
	})
	if wait.Interrupted(err) && ctx.Err() == nil {
		return fmt.Errorf("%s/%s is not %s after %s (%s)", ns, name, target, timeout, last)
	}
	return err
}

// followLine is what --wait prints: the phase of each rotation followed
// and, while Carousel works or an operation is queued, what it waits for.
func followLine(cl *v1alpha1.Cluster, target followTarget) string {
	var parts []string
	if len(target.ca) > 0 {
		parts = append(parts, phaseLine("phase ", rotation.PhaseName(cl.CARotationPhase()), cl, v1alpha1.ConditionCARotation))
	}
	if target.serviceAccountKey != "" {
		parts = append(parts, phaseLine("service-account key phase ", rotation.ServiceAccountKeyPhaseName(cl.ServiceAccountKeyRotationPhase()),
			cl, v1alpha1.ConditionServiceAccountKeyRotation))
	}
	line := strings.Join(parts, "; ")
	if cond := meta.FindStatusCondition(cl.Status.Conditions, v1alpha1.ConditionMaintenanceOperationQueued); cond != nil && cond.Status == metav1.ConditionTrue {
		line += ": " + oneLine(cond.Message)
	}
	return line
}

// phaseLine is the prefix and phase, and what the rotation waits for when
// its condition is True.
func phaseLine(prefix, phase string, cl *v1alpha1.Cluster, conditionType string) string {
	line := prefix + phase
	if cond := meta.FindStatusCondition(cl.Status.Conditions, conditionType); cond != nil && cond.Status == metav1.ConditionTrue {
		// The rotation's messages begin with the phase, which the line has
		// said; one that begins with another phase was written before an
		// operation moved the phase, and is left out until Carousel updates it.
		if waiting, ok := strings.CutPrefix(cond.Message, phase+": "); ok {
			line += ": " + oneLine(waiting)
		}
	}
	return line
}

// rotationReached: each rotation followed is in a target phase and no
// operation is requested that would move it on, nor the one followed still
// queued (another operation queued for later, such as a completion queued
// before a start or after it ran, does not keep a start from reaching
// Prepared).
func rotationReached(cl *v1alpha1.Cluster, target followTarget) bool {
	_, requested := cl.Annotations[v1alpha1.OperationAnnotation]
	stillQueued := target.queued != "" && cl.Annotations[v1alpha1.MaintenanceOperationAnnotation] == target.queued
	return (len(target.ca) == 0 || slices.Contains(target.ca, cl.CARotationPhase())) &&
		(target.serviceAccountKey == "" || cl.ServiceAccountKeyRotationPhase() == target.serviceAccountKey) && !requested && !stillQueued
}

// abortedMeanwhile: the CA rotation followed was aborted (someone else's
// abort-ca-rotation), so it never reaches a target phase other than the
// abort's, and nothing requested, nor a start queued, would start another
// (a completion queued for the window does not).
func abortedMeanwhile(cl *v1alpha1.Cluster, target followTarget) bool {
	_, requested := cl.Annotations[v1alpha1.OperationAnnotation]
	queuedStart := false
	if value, ok := cl.Annotations[v1alpha1.MaintenanceOperationAnnotation]; ok {
		op, err := v1alpha1.ParseOperation(value)
		queuedStart = err == nil && op.Verb.StartsCARotation()
	}
	phase := cl.CARotationPhase()
	return len(target.ca) > 0 && (phase == v1alpha1.RotationAborting || phase == v1alpha1.RotationAborted) &&
		!slices.Contains(target.ca, v1alpha1.RotationAborted) && !requested && !queuedStart
}

// phaseList names phases for a person: "A", "A or B".
func phaseList(phases []v1alpha1.CARotationPhase) string {
	names := make([]string, len(phases))
	for i, p := range phases {
		names[i] = string(p)
	}
	return strings.Join(names, " or ")
}

// statusCommand is `rotation status`.
func (e *env) statusCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "status CLUSTER",
		Short: "Show the rotation phase, its timestamps, pending worker pools, the CA inventory and the conditions",
		Long: `Show where CLUSTER's CA rotation stands: its phase and what Carousel waits for, an operation queued for the
maintenance window, what Carousel recommends, the times of the last start and completion, the worker pools
still to roll, the fingerprint and expiry of each role's current and previous CA, and every condition of the
Cluster (docs/how-to/recover-a-stuck-rotation.md reads them).

-o json or -o yaml prints the Cluster object itself, as kubectl get does.`,
		Example: `  # Where does the rotation of prod stand?
  kubectl carousel rotation status prod -n team-a

  # Its phase, for a script
  kubectl carousel rotation status prod -n team-a -o json | jq -r '.status.credentials.rotation.certificateAuthorities.phase'`,
		Args:              oneCluster,
		ValidArgsFunction: e.completeClusters,
	}
	out := addOutputFlags(cmd)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		_, cl, err := e.clusterArg(cmd.Context(), args[0])
		if err != nil {
			return err
		}
		if out.printer != nil {
			return out.printer.PrintObj(cl, e.streams.Out)
		}
		writeStatus(e.streams.Out, cl)
		return nil
	}
	return cmd
}

// when formats an optional timestamp, or "-".
func when(t *metav1.Time) string {
	if t == nil {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

// writeStatus prints where a Cluster's CA rotation stands.
func writeStatus(w io.Writer, cl *v1alpha1.Cluster) {
	rot := cl.CARotation()
	if rot == nil {
		rot = &v1alpha1.CARotation{}
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "Cluster:\t%s/%s\n", cl.Namespace, cl.Name)
	fmt.Fprintf(tw, "Phase:\t%s\n", rotation.PhaseName(rot.Phase))
	if cond := meta.FindStatusCondition(cl.Status.Conditions, v1alpha1.ConditionCARotation); cond != nil && cond.Status == "True" {
		fmt.Fprintf(tw, "Waiting for:\t%s\n", oneLine(cond.Message))
	}
	if cond := meta.FindStatusCondition(cl.Status.Conditions, v1alpha1.ConditionMaintenanceOperationQueued); cond != nil && cond.Status == metav1.ConditionTrue {
		fmt.Fprintf(tw, "Queued:\t%s\n", oneLine(cond.Message))
	}
	if cond := meta.FindStatusCondition(cl.Status.Conditions, v1alpha1.ConditionCARotationRecommended); cond != nil && cond.Status == metav1.ConditionTrue {
		fmt.Fprintf(tw, "Recommended:\t%s\n", oneLine(cond.Message))
	}
	if cond := meta.FindStatusCondition(cl.Status.Conditions, v1alpha1.ConditionAutomaticCARotationScheduled); cond != nil {
		fmt.Fprintf(tw, "Automatic:\t%s\n", oneLine(cond.Message))
	}
	fmt.Fprintf(tw, "Last initiation:\t%s\n", when(rot.LastInitiationTime))
	fmt.Fprintf(tw, "Last initiation finished:\t%s\n", when(rot.LastInitiationFinishedTime))
	fmt.Fprintf(tw, "Last completion triggered:\t%s\n", when(rot.LastCompletionTriggeredTime))
	fmt.Fprintf(tw, "Last completion:\t%s\n", when(rot.LastCompletionTime))
	if rot.LastAbortTriggeredTime != nil {
		fmt.Fprintf(tw, "Last abort triggered:\t%s\n", when(rot.LastAbortTriggeredTime))
		fmt.Fprintf(tw, "Last abort:\t%s\n", when(rot.LastAbortTime))
		if rot.AbortForcedTime != nil {
			fmt.Fprintf(tw, "Abort forced:\t%s (not waiting for the holders of kubeconfigs or kubelet client certificates from the new client CA)\n", when(rot.AbortForcedTime))
		}
	}
	var pending []string
	for _, p := range rot.PendingWorkersRollouts {
		if p.Held {
			pending = append(pending, p.Name+" (held: kubectl carousel rotation rollout-workers)")
		} else {
			pending = append(pending, p.Name)
		}
	}
	if len(pending) == 0 {
		pending = []string{"none"}
	}
	fmt.Fprintf(tw, "Pending worker rollouts:\t%s\n", strings.Join(pending, ", "))
	if u := rot.OldCAUsage; u != nil {
		line := "nothing depends on them any more"
		if u.Total > 0 {
			line = rotation.DescribeOldCAUsage(u)
		}
		if !u.AuditEventsReceived {
			line += " (no audit events received from the API server)"
		}
		fmt.Fprintf(tw, "Old CAs:\t%s\n", line)
	}
	if key := cl.ServiceAccountKeyRotation(); key != nil {
		fmt.Fprintf(tw, "Service-account key phase:\t%s\n", rotation.ServiceAccountKeyPhaseName(key.Phase))
		if cond := meta.FindStatusCondition(cl.Status.Conditions, v1alpha1.ConditionServiceAccountKeyRotation); cond != nil && cond.Status == metav1.ConditionTrue {
			fmt.Fprintf(tw, "Service-account key waiting for:\t%s\n", oneLine(cond.Message))
		}
		fmt.Fprintf(tw, "Service-account key last initiation:\t%s\n", when(key.LastInitiationTime))
		fmt.Fprintf(tw, "Service-account key last completion:\t%s\n", when(key.LastCompletionTime))
	}
	_ = tw.Flush()

	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ROLE\tCURRENT FINGERPRINT\tCURRENT NOT AFTER\tPREVIOUS FINGERPRINT\tPREVIOUS NOT AFTER")
	if cl.Status.Credentials != nil {
		for _, inv := range cl.Status.Credentials.CertificateAuthorities {
			cur, curAfter, prev, prevAfter := "-", "-", "-", "-"
			if inv.Current != nil {
				cur, curAfter = pki.ShortFingerprint(inv.Current.Fingerprint), inv.Current.NotAfter.UTC().Format(time.RFC3339)
			}
			if inv.Previous != nil {
				prev, prevAfter = pki.ShortFingerprint(inv.Previous.Fingerprint), inv.Previous.NotAfter.UTC().Format(time.RFC3339)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", inv.Role, cur, curAfter, prev, prevAfter)
		}
	}
	_ = tw.Flush()

	if u := rot.OldCAUsage; u != nil && len(u.Dependents) > 0 {
		fmt.Fprintln(w)
		tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ON THE OLD CAS\tLAST SEEN\tWHY")
		for _, d := range u.Dependents {
			fmt.Fprintf(tw, "%s %s\t%s\t%s\n", d.Kind, oneLine(d.Name), when(d.LastSeen), oneLine(d.Message))
		}
		if more := int(u.Total) - len(u.Dependents); more > 0 {
			fmt.Fprintf(tw, "… and %d more\t\t\n", more)
		}
		_ = tw.Flush()
	}

	// The conditions, as the recovery guide reads them.
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "CONDITION\tSTATUS\tREASON\tSINCE\tMESSAGE")
	for _, cond := range cl.Status.Conditions {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", oneLine(cond.Type), cond.Status, oneLine(cond.Reason), cond.LastTransitionTime.UTC().Format(time.RFC3339), oneLine(cond.Message))
	}
	_ = tw.Flush()
}
