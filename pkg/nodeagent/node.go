package nodeagent

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
	"github.com/carousel-dev/carousel/pkg/noderenewal"
)

// Node acts as the node with the manager's credentials: it carries out the
// credential renewals Carousel asks for on the Node, in ModeKubelet has the
// kubelet bootstrap again when the API server refuses its credentials, and,
// in ModeStandIn, registers the Node and keeps its Lease renewed for a
// kubelet that does not.
type Node struct {
	Manager *Manager
	// Kubelet is the real kubelet whose credentials are renewed (ModeKubelet);
	// nil in ModeStandIn.
	Kubelet *Kubelet
	// Pool is put into the carousel.dev/pool label of the Node (ModeStandIn).
	Pool string
	// Address is the node's InternalIP (ModeStandIn).
	Address string
	// HeartbeatInterval is how often the Lease is renewed (ModeStandIn).
	HeartbeatInterval time.Duration
	// RefusalGrace is how long the API server must go on refusing the
	// kubelet's credentials, with no answer that accepts them in between,
	// before the agent re-bootstraps the kubelet (ModeKubelet; see
	// rebootstrapIfRefused); 0 acts on the first refusal.
	RefusalGrace time.Duration
	// Version is what the agent marks the Node with
	// (v1alpha1.AnnotationNodeAgent); "unknown" when empty.
	Version string
	// Logf, when set, reports renewals and their errors.
	Logf func(format string, args ...any)

	// refusedSince is when the current run of refusals began; zero when the
	// last answer did not refuse. Only WatchRenewals' goroutine uses it.
	refusedSince time.Time
}

// DefaultRefusalGrace is the RefusalGrace the agent runs with: a single
// refusal may come from an API server in the middle of a roll or a proxy in
// the way, and a node that was off for a whole rotation can wait seconds.
const DefaultRefusalGrace = 10 * time.Second

func (n *Node) logf(format string, args ...any) {
	if n.Logf != nil {
		n.Logf(format, args...)
	}
}

// Register creates the Node (or keeps the existing one) and reports it Ready
// with its address, retrying with jittered backoff, as the kubelet does, while
// the API server cannot be reached, until ctx ends.
func (n *Node) Register(ctx context.Context) error {
	retry := newBackoff(registerBackoff)
	for {
		err := n.register(ctx)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return err
		case <-n.Manager.cfg.Clock.After(retry.next()):
		}
	}
}

func (n *Node) register(ctx context.Context) error {
	ctx, cancel := n.Manager.withRequestTimeout(ctx) // its two or three requests
	defer cancel()
	nodes := n.Manager.Client().CoreV1().Nodes()
	name := n.Manager.cfg.NodeName
	node, err := nodes.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{
		Name: name, Labels: map[string]string{v1alpha1.LabelPool: n.Pool, corev1.LabelHostname: name},
	}}, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		node, err = nodes.Get(ctx, name, metav1.GetOptions{})
	}
	if err != nil {
		return fmt.Errorf("registering node %s: %w", name, err)
	}
	now := metav1.NewTime(n.Manager.cfg.Clock.Now())
	node.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: n.Address}, {Type: corev1.NodeHostName, Address: name}}
	node.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "CarouselNodeAgent",
		Message: "the Carousel node agent is running", LastHeartbeatTime: now, LastTransitionTime: now}}
	if _, err := nodes.UpdateStatus(ctx, node, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("reporting node %s ready: %w", name, err)
	}
	return nil
}

// Heartbeat renews the node's Lease in kube-node-lease. It returns the error
// of a failed renewal; the caller decides whether to count or log it.
func (n *Node) Heartbeat(ctx context.Context) error {
	ctx, cancel := n.Manager.withRequestTimeout(ctx) // its two requests
	defer cancel()
	leases := n.Manager.Client().CoordinationV1().Leases(corev1.NamespaceNodeLease)
	name := n.Manager.cfg.NodeName
	now := metav1.NewMicroTime(n.Manager.cfg.Clock.Now())
	lease, err := leases.Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		_, err = leases.Create(ctx, &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(name),
				LeaseDurationSeconds: ptr.To(int32(4 * n.HeartbeatInterval / time.Second)), RenewTime: &now},
		}, metav1.CreateOptions{})
		return err
	}
	if err != nil {
		return err
	}
	lease.Spec.RenewTime = &now
	_, err = leases.Update(ctx, lease, metav1.UpdateOptions{})
	return err
}

// watchTimeout ends each watch of the Node, so that the next one starts
// with the credentials on disk (the kubelet rotates them).
const watchTimeout = 5 * time.Minute

// shortWatch is how long a watch of the Node must last, when it brings no
// renewal, for the next to start at once. One that the API server or a proxy
// in between ends sooner (a replica shutting down, a proxy that closes every
// stream) counts as a failed watch: the next waits with backoff, so that a
// node's agent does not watch in a tight loop. It is well under the idle
// timeouts of proxies (30 s and more), which end a quiet watch as a matter
// of course.
const shortWatch = 10 * time.Second

// errWatchEnded is how a watch that ended within shortWatch is logged.
var errWatchEnded = fmt.Errorf("the watch ended within %s", shortWatch)

// WatchRenewals carries out every renewal Carousel requests on the Node until
// ctx ends: it reads the current trust bundles from
// kube-system/carousel-node-trust over its already-trusted connection,
// installs them, renews the client certificate (in ModeKubelet also the
// kubelet's serving certificate when it is no longer trusted, restarting the
// kubelet when needed), and reports the request, the certificate's issuer
// and the bundles on the Node (see renewal). Failed renewals and failed
// watches are retried with jittered backoff.
//
// In ModeKubelet a watch that fails may be the API server refusing the
// kubelet's credentials (the node was off through a CA rotation): then, and
// while a re-bootstrap is unfinished, it re-bootstraps the kubelet with its
// bootstrap kubeconfig (rebootstrapIfRefused) before it watches again.
func (n *Node) WatchRenewals(ctx context.Context) error {
	name := n.Manager.cfg.NodeName
	retry, refused, rewatch := newBackoff(renewalBackoff), newBackoff(refusedRenewalBackoff), newBackoff(renewalBackoff)
	var malformed string // the last request logged as not carried out
	for ctx.Err() == nil {
		// A watch lasts from when it is asked for: the API server may end
		// it before the call returns.
		opened := n.Manager.cfg.Clock.Now()
		w, err := n.watchNode(ctx)
		if n.rebootstrapTakesOver(ctx, w, err, rewatch, refused) {
			continue
		}
		if err != nil {
			n.retryAfter(ctx, rewatch.next(), "watching node "+name, err)
			continue
		}
		renewing := false
		for ev := range w.ResultChan() {
			node, ok := ev.Object.(*corev1.Node)
			if !ok || ev.Type != watch.Added && ev.Type != watch.Modified {
				continue // a deleted Node's last state may carry a request: it is gone
			}
			n.markAgent(ctx, node.Annotations)
			request, pending := noderenewal.Pending(node.Annotations)
			if !pending {
				malformed = n.noteMalformedRequest(node.Annotations, malformed)
				continue
			}
			renewing = true
			start := n.Manager.cfg.Clock.Now()
			if err := n.renew(ctx, request); err != nil {
				n.Manager.cfg.Metrics.renewError()
				n.retryAfter(ctx, afterFailure(err, retry, refused), "renewal "+request.String(), err)
			} else {
				retry.reset()
				refused.reset()
				n.logf("renewal %s: done in %s, client certificate valid until %s", request,
					n.Manager.cfg.Clock.Since(start).Round(time.Millisecond), n.Manager.Current().Cert.NotAfter.Format(time.RFC3339))
			}
			// The renewal rebuilt the client: watch again with it.
			break
		}
		w.Stop()
		if !renewing && ctx.Err() == nil && n.Manager.cfg.Clock.Since(opened) < shortWatch {
			n.retryAfter(ctx, rewatch.next(), "watching node "+name, errWatchEnded)
			continue
		}
		rewatch.reset()
	}
	return ctx.Err()
}

// markAgent marks the Node as one a node agent runs on
// (v1alpha1.AnnotationNodeAgent, with its version) unless it is marked so
// already: the old-CA usage gate then counts on the agent to bring the
// kubelet back when the node is off through a rotation, before it ever
// reports a renewal. A failure is logged and tried again at the Node's next
// event, or the next watch.
func (n *Node) markAgent(ctx context.Context, annotations map[string]string) {
	version := cmp.Or(n.Version, "unknown")
	if annotations[v1alpha1.AnnotationNodeAgent] == version {
		return
	}
	if err := n.Manager.annotateNode(ctx, map[string]string{v1alpha1.AnnotationNodeAgent: version}); err != nil {
		n.logf("marking node %s as running the node agent (%s=%s): %v (tried again at its next change)", n.Manager.cfg.NodeName, v1alpha1.AnnotationNodeAgent, version, err)
	}
}

// annotateNode sets annotations on the Node (a merge patch, as the node),
// giving up after the request timeout.
func (m *Manager) annotateNode(ctx context.Context, annotations map[string]string) error {
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": annotations}})
	if err != nil {
		return err
	}
	ctx, cancel := m.withRequestTimeout(ctx)
	defer cancel()
	_, err = m.Client().CoreV1().Nodes().Patch(ctx, m.cfg.NodeName, types.MergePatchType, patch, metav1.PatchOptions{})
	return err
}

// noteMalformedRequest logs a renewal request on the Node that does not
// parse, such as one set by hand with a typo, which is not carried out;
// logged is the last one it logged, which it does not log again at each
// event of the Node. It returns the request it logged last.
func (n *Node) noteMalformedRequest(annotations map[string]string, logged string) string {
	value, ok := annotations[v1alpha1.AnnotationRenewCredentials]
	if !ok || value == logged {
		return logged
	}
	if _, err := noderenewal.ParseRequest(value); err != nil {
		n.logf("%v: not carried out (Carousel writes %s=<RFC 3339 time>/<Preparing|Finalizing|Aborting>, as the worker rollout's event says)",
			err, v1alpha1.AnnotationRenewCredentials)
		return value
	}
	return logged
}

// watchNode reads the credentials again (Reload) and watches the Node with
// them, for at most watchTimeout.
func (n *Node) watchNode(ctx context.Context) (watch.Interface, error) {
	if err := n.Manager.Reload(); err != nil {
		return nil, err
	}
	return n.Manager.Client().CoreV1().Nodes().Watch(ctx, metav1.ListOptions{
		FieldSelector:  fields.OneTermEqualSelector("metadata.name", n.Manager.cfg.NodeName).String(),
		TimeoutSeconds: ptr.To(int64(watchTimeout / time.Second)),
	})
}

// retryAfter logs what failed, with err, and waits delay or until ctx ends.
func (n *Node) retryAfter(ctx context.Context, delay time.Duration, what string, err error) {
	n.logf("%s: %v (retrying in %s)", what, err, delay.Round(time.Millisecond))
	select {
	case <-ctx.Done():
	case <-n.Manager.cfg.Clock.After(delay):
	}
}
