// Package workerrollout holds the worker rollout strategies the Cluster
// controller asks to roll a pool: InPlace (the node agents renew through an
// annotation on their Node; see package noderenewal), Replace (Cluster API
// replaces the Machines of a MachineDeployment) and Manual (the user reports
// it).
package workerrollout

import (
	"context"
	"errors"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
	"github.com/carousel-dev/carousel/pkg/bootstrap"
	"github.com/carousel-dev/carousel/pkg/credentials"
	"github.com/carousel-dev/carousel/pkg/noderenewal"
)

// InPlaceRollout is the InPlace worker rollout strategy: Carousel asks the
// nodes of the pool, through an annotation on each Node, to fetch the current
// trust bundles (cluster and kubelet), install them and renew its client
// certificate; the node agent does so over its already-trusted connection
// and reports back on the Node, and Carousel compares the report with the
// bundles it published.
//
// The nodes renew a few at a time (the pool's maxUnavailable), and a node
// whose Lease is older than the pool's offlineNodeTimeout, next to the
// newest node Lease, and stayed so for OfflineConfirmation, is not waited
// for (see PlanRollout, Heartbeats and OfflineNodes).
type InPlaceRollout struct {
	Connections ManagedClients // reaches the managed clusters
	Management  client.Reader  // reads the Cluster's CAs
	// Bundles reads the Cluster's bundle ConfigMaps, which the pass of the
	// Cluster that rolls the pool may have written just before: the API
	// server (a manager's APIReader), so that a cache behind does not have
	// nodes asked with the bundles of before while the managed cluster
	// still shows them too, and asked again, their kubelets restarted
	// twice. Nil reads them through Management.
	Bundles client.Reader
	// Clock bounds the nodes' heartbeats (see Heartbeats); nil is the real
	// clock.
	Clock clock.PassiveClock
	// Offline confirms that a node behind is offline (shared with the
	// old-CA usage gate); nil takes one for offline at the first look.
	Offline *OfflineNodes
}

// ManagedClients are the clients of the managed clusters (a
// *clustercache.Cache): a rollout reads and writes a pool's Nodes through
// the connection the kubelet bootstrap controller keeps.
type ManagedClients interface {
	Client(*v1alpha1.Cluster) (client.Client, bool)
}

// Rollout implements the cluster controller's WorkerRollout.
func (p *InPlaceRollout) Rollout(ctx context.Context, c *v1alpha1.Cluster, pool v1alpha1.WorkerPool) (bool, string, error) {
	key := client.ObjectKeyFromObject(c)
	remote, ok := p.Connections.Client(c)
	if !ok {
		p.Offline.Forget(key) // its API server may be away: see unreachable
		return false, fmt.Sprintf("pool %s: waiting to reach the cluster's API server (spec.controlPlane.endpoint)", pool.Name), nil
	}
	clientCAs, wait, err := nodesMayMove(ctx, p.Management, c, pool)
	if err != nil || wait != "" {
		return false, wait, err
	}
	rot := c.CARotation()
	trust, err := p.trust(ctx, c)
	if apierrors.IsNotFound(err) {
		return false, fmt.Sprintf("pool %s: waiting for Carousel's trust bundles to be published", pool.Name), nil
	}
	if err != nil {
		return false, "", err
	}
	if wait, err := trustPublished(ctx, remote, pool, trust); err != nil || wait != "" {
		return false, wait, p.unreachable(key, err)
	}
	kubeletCAs, err := credentials.ReadCAs(ctx, p.Management, c, v1alpha1.CARoleKubelet)
	if err != nil {
		return false, "", err
	}
	request := noderenewal.RequestFor(rot)
	// Serving certificates come from the current kubelet CA once nodes may
	// move: it signs them from the moment the client CA moved.
	want := noderenewal.Expected(request, clientCAs.Current.Cert, kubeletCAs.Current.Cert, trust)

	var nodes corev1.NodeList
	if err := remote.List(ctx, &nodes, client.MatchingLabels{v1alpha1.LabelPool: pool.Name}); err != nil {
		return false, "", p.unreachable(key, fmt.Errorf("listing the nodes of pool %s: %w", pool.Name, err))
	}
	var leases coordinationv1.LeaseList
	if err := remote.List(ctx, &leases, client.InNamespace(corev1.NamespaceNodeLease)); err != nil {
		return false, "", p.unreachable(key, fmt.Errorf("listing the node Leases: %w", err))
	}
	var clk clock.PassiveClock = clock.RealClock{}
	if p.Clock != nil {
		clk = p.Clock
	}
	now := clk.Now()
	seen, newest := Heartbeats(nodes.Items, leases.Items, now)
	offlineAfter := pool.OfflineNodeTimeoutOrDefault()
	states := make([]NodeState, len(nodes.Items))
	byName := make(map[string]*corev1.Node, len(nodes.Items))
	for i := range nodes.Items {
		n := &nodes.Items[i]
		byName[n.Name] = n
		action := noderenewal.Assess(n.Annotations, want)
		behind := newest.Sub(seen[n.Name]) > offlineAfter
		offline := p.Offline.Confirmed(key, n.Name, behind, now) // a node not behind is forgotten
		states[i] = NodeState{Name: n.Name, Action: action, LastSeen: seen[n.Name], InFlight: action == noderenewal.Ask && askedThisRotation(n.Annotations, rot),
			Unconfirmed: behind && !offline}
	}
	plan := PlanRollout(states, pool.MaxUnavailableOrDefault(), offlineAfter, newest)
	for _, ask := range plan.Ask {
		n := byName[ask.Name]
		patch := client.MergeFrom(n.DeepCopy())
		n.Annotations = noderenewal.Annotate(n.Annotations, ask.Action, request)
		if err := remote.Patch(ctx, n, patch); err != nil {
			return false, "", fmt.Errorf("asking node %s to renew: %w", n.Name, err)
		}
	}
	if plan.Done() && len(plan.Offline) == 0 {
		return true, "", nil
	}
	return plan.Done(), plan.Message(pool.Name, offlineAfter, request), nil
}

// AskNodes implements the cluster controller's NodeAsker: it asks nodes of
// an InPlace pool, rolled for the Cluster's current phase already, to renew
// for it (as an administrator annotating them would), unless they were
// asked for it. The node agent of one that is offline answers once it is
// back. The abort asks those whose kubelet holds a client certificate from
// the new client CA: offline while their pool rolled, they were not asked.
func (p *InPlaceRollout) AskNodes(ctx context.Context, c *v1alpha1.Cluster, nodes []corev1.Node) ([]string, error) {
	remote, ok := p.Connections.Client(c)
	if !ok {
		return nil, nil // asked again once connected
	}
	request := noderenewal.RequestFor(c.CARotation())
	var asked []string
	var errs []error // one node that cannot be asked holds up none of the others
	for i := range nodes {
		n := nodes[i].DeepCopy()
		if n.Annotations[v1alpha1.AnnotationRenewCredentials] == request.String() {
			continue
		}
		patch := client.MergeFrom(n.DeepCopy())
		n.Annotations = noderenewal.Annotate(n.Annotations, noderenewal.Ask, request)
		err := remote.Patch(ctx, n, patch)
		switch {
		case apierrors.IsNotFound(err):
			continue // deleted since: it holds nothing any more
		case err != nil:
			errs = append(errs, fmt.Errorf("asking node %s to renew: %w", n.Name, err))
			continue
		}
		asked = append(asked, n.Name)
	}
	return asked, errors.Join(errs...)
}

// unreachable returns err, a failed read of the managed cluster of key, if
// any, and then drops what was seen of its nodes behind: its API server may
// be away, and the nodes count from anew once it is back (see
// OfflineNodes). Other errors (the management cluster's, a Node's patch)
// leave the counts alone.
func (p *InPlaceRollout) unreachable(key client.ObjectKey, err error) error {
	if err != nil {
		p.Offline.Forget(key)
	}
	return err
}

// askedThisRotation says whether a node whose annotations these are was
// asked, in the rotation rot, for a request it has not answered: an earlier
// phase's (a phase aborted while it renewed), or the abort's first roll's.
// One asked in an earlier rotation and never heard from since is not: the
// pool went on without it then, and it does not hold the pool now.
func askedThisRotation(annotations map[string]string, rot *v1alpha1.CARotation) bool {
	req, pending := noderenewal.Pending(annotations)
	return pending && rot.LastInitiationTime != nil && !req.Initiated.Before(rot.LastInitiationTime.Truncate(time.Second))
}

// nodesMayMove says what a pool's rollout waits for before any node of it
// may move to the phase's credentials, or "" when they may, with the
// Cluster's client CAs. In Preparing, nodes move once the managed API server
// trusts the new client CA, which is when Carousel's own client certificate
// moved to it; in Finalizing, once the old CAs are dropped from every bundle;
// in Aborting, once Carousel's own client certificate is back on the old
// client CA, which is current again (kubelet certificates are signed by the
// old CAs all through Aborting, package kubeletcsr), and, the second time
// the abort rolls the pool, once the new CAs are deleted. r may be a cache
// behind the pass that wrote the CAs: what it shows must be the phase's,
// not the state of before that agrees with itself (the CA Secrets of before
// the rotation, with Carousel's certificate on their CA; those of before
// the abort swapped them back).
func nodesMayMove(ctx context.Context, r client.Reader, c *v1alpha1.Cluster, pool v1alpha1.WorkerPool) (*credentials.CAs, string, error) {
	clientCAs, inUse, err := credentials.ClientCAInUse(ctx, r, c)
	if apierrors.IsNotFound(err) {
		return nil, fmt.Sprintf("pool %s: waiting for Carousel's credentials to be issued", pool.Name), nil
	}
	if err != nil {
		return nil, "", err
	}
	switch c.CARotation().Phase {
	case v1alpha1.RotationPreparing:
		if !clientCAs.WrittenInRotation(c) || inUse != clientCAs.Current {
			return nil, fmt.Sprintf("pool %s: waiting until the API server trusts the new client CA", pool.Name), nil
		}
	case v1alpha1.RotationAborting:
		swappedBack := clientCAs.Previous == nil || clientCAs.Restored()
		if c.CARotation().AbortRolledBackTime == nil && (!swappedBack || inUse != clientCAs.Current) {
			return nil, fmt.Sprintf("pool %s: waiting until Carousel's own client certificate is back on the old client CA", pool.Name), nil
		}
		if c.CARotation().AbortRolledBackTime != nil {
			if kept, err := previousKept(ctx, r, c); err != nil {
				return nil, "", err
			} else if kept {
				return nil, fmt.Sprintf("pool %s: waiting until the new CAs are deleted", pool.Name), nil
			}
		}
	case v1alpha1.RotationFinalizing:
		if kept, err := previousKept(ctx, r, c); err != nil {
			return nil, "", err
		} else if kept {
			return nil, fmt.Sprintf("pool %s: waiting until the old CAs are dropped", pool.Name), nil
		}
	}
	return clientCAs, "", nil
}

// previousKept says whether any role's CA Secret still holds a previous CA:
// the old CAs in Finalizing, the aborted new ones in Aborting, which the
// cluster controller deletes one role after the other (and a crash may stop
// in between). Nodes asked before every one is gone would install the
// bundles of before and be asked again, restarting their kubelets twice.
func previousKept(ctx context.Context, r client.Reader, c *v1alpha1.Cluster) (bool, error) {
	for _, role := range v1alpha1.CARoles() {
		cas, err := credentials.ReadCAs(ctx, r, c, role)
		if err != nil {
			return false, err
		}
		if cas.Previous != nil {
			return true, nil
		}
	}
	return false, nil
}

// Heartbeats says when each node last showed it is alive: its Lease's
// renewTime in kube-node-lease (a kubelet renews it every 10 s), or, for a
// node without one, when the Node was created. newest is the newest
// renewTime of any Lease there, the moment the rollout measures every
// node's silence against: an API server that was down, or a controller
// whose clock is behind, leaves every Lease as old and takes no node
// offline. A kubelet writes renewTime from its node's clock, so a time
// later than now (the controller's clock) counts as now: one node whose
// clock runs ahead, or one Lease written with a time to come, would
// otherwise put every other node behind, and the rollout would go on
// without them. A controller whose clock is behind only takes longer to
// see a node offline (by its lag), which holds the rollout rather than
// leaving a node out.
func Heartbeats(nodes []corev1.Node, leases []coordinationv1.Lease, now time.Time) (seen map[string]time.Time, newest time.Time) {
	seen = make(map[string]time.Time, len(nodes))
	for _, n := range nodes {
		seen[n.Name] = n.CreationTimestamp.Time
	}
	for _, l := range leases {
		if l.Spec.RenewTime == nil {
			continue
		}
		renewed := l.Spec.RenewTime.Time
		if renewed.After(now) {
			renewed = now
		}
		if renewed.After(newest) {
			newest = renewed
		}
		if last, ok := seen[l.Name]; ok && renewed.After(last) {
			seen[l.Name] = renewed
		}
	}
	return seen, newest
}

// trust reads the bundles a node of c must end up with from the management
// cluster (credentials.NodeTrust): the cluster CA bundle (the kubelet's
// kubeconfigs) and the kubelet CA bundle (the kubelet's clientCAFile).
func (p *InPlaceRollout) trust(ctx context.Context, c *v1alpha1.Cluster) (noderenewal.Trust, error) {
	cluster, err := p.bundle(ctx, c, v1alpha1.CARoleCluster)
	if err != nil {
		return noderenewal.Trust{}, err
	}
	kubelet, err := p.bundle(ctx, c, v1alpha1.CARoleKubelet)
	if err != nil {
		return noderenewal.Trust{}, err
	}
	return credentials.NodeTrust(ctx, p.Management, c, noderenewal.Trust{Cluster: cluster, Kubelet: kubelet})
}

// trustPublished says what a pool's rollout waits for until the managed
// cluster's kube-system/carousel-node-trust, which the node agents read,
// holds want, or "" once it does: a node asked before would install the
// bundles of before, answer with them, and be asked again, restarting its
// kubelet twice.
func trustPublished(ctx context.Context, remote client.Reader, pool v1alpha1.WorkerPool, want noderenewal.Trust) (string, error) {
	cm := &corev1.ConfigMap{}
	err := remote.Get(ctx, client.ObjectKey{Namespace: metav1.NamespaceSystem, Name: bootstrap.NodeTrustConfigMap}, cm)
	if client.IgnoreNotFound(err) != nil {
		return "", fmt.Errorf("reading the node trust bundles of the managed cluster: %w", err)
	}
	if cm.Data[bootstrap.NodeTrustKeyClusterCA] != string(want.Cluster) || cm.Data[bootstrap.NodeTrustKeyKubeletCA] != string(want.Kubelet) {
		return fmt.Sprintf("pool %s: waiting for Carousel to publish the phase's node trust bundles in %s/%s", pool.Name,
			metav1.NamespaceSystem, bootstrap.NodeTrustConfigMap), nil
	}
	return "", nil
}

func (p *InPlaceRollout) bundle(ctx context.Context, c *v1alpha1.Cluster, role v1alpha1.CARole) ([]byte, error) {
	r := p.Bundles
	if r == nil {
		r = p.Management
	}
	cm := &corev1.ConfigMap{}
	if err := r.Get(ctx, client.ObjectKey{Namespace: c.Namespace, Name: credentials.BundleConfigMapName(c.Name, role)}, cm); err != nil {
		return nil, err
	}
	return []byte(cm.Data[v1alpha1.DataKeyCABundle]), nil
}
