package nodeagent

import (
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
	"k8s.io/client-go/tools/clientcmd"
	bootstrapapi "k8s.io/cluster-bootstrap/token/api"
	"k8s.io/utils/ptr"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
	"github.com/carousel-dev/carousel/pkg/noderenewal"
)

// Node acts for the kubelet with the manager's credentials: it registers the
// Node, keeps its Lease renewed, and carries out the credential renewals
// Carousel asks for on the Node.
type Node struct {
	Manager *Manager
	// Pool is put into the carousel.dev/pool label of the Node.
	Pool string
	// Address is the node's InternalIP.
	Address string
	// HeartbeatInterval is how often the Lease is renewed.
	HeartbeatInterval time.Duration
	// Logf, when set, reports renewals and their errors.
	Logf func(format string, args ...any)
}

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

// WatchRenewals carries out every renewal Carousel requests on the Node until
// ctx ends: it fetches the current trust bundle from kube-public/cluster-info
// over its already-trusted connection, renews the client certificate, and
// reports the request, the certificate's issuer and the bundle on the Node.
// Failed renewals and failed watches are retried with jittered backoff.
func (n *Node) WatchRenewals(ctx context.Context) error {
	name := n.Manager.cfg.NodeName
	retry, rewatch := newBackoff(renewalBackoff), newBackoff(renewalBackoff)
	for ctx.Err() == nil {
		nodes := n.Manager.Client().CoreV1().Nodes()
		w, err := nodes.Watch(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", name).String()})
		if err != nil {
			delay := rewatch.next()
			n.logf("watching node %s: %v (retrying in %s)", name, err, delay.Round(time.Millisecond))
			select {
			case <-ctx.Done():
			case <-n.Manager.cfg.Clock.After(delay):
			}
			continue
		}
		rewatch.reset()
		for ev := range w.ResultChan() {
			node, ok := ev.Object.(*corev1.Node)
			if !ok {
				continue
			}
			request, pending := noderenewal.Pending(node.Annotations)
			if !pending {
				continue
			}
			if err := n.renew(ctx, request); err != nil {
				n.Manager.cfg.Metrics.renewError()
				delay := retry.next()
				n.logf("renewal %s: %v (retrying in %s)", request, err, delay.Round(time.Millisecond))
				select {
				case <-ctx.Done():
				case <-n.Manager.cfg.Clock.After(delay):
				}
			} else {
				retry.reset()
				n.logf("renewal %s: done, client certificate valid until %s", request, n.Manager.Current().Cert.NotAfter.Format(time.RFC3339))
			}
			// The renewal rebuilt the client: watch again with it.
			break
		}
		w.Stop()
	}
	return ctx.Err()
}

func (n *Node) renew(ctx context.Context, request noderenewal.Request) error {
	cs := n.Manager.Client()
	info, err := cs.CoreV1().ConfigMaps(metav1.NamespacePublic).Get(ctx, bootstrapapi.ConfigMapClusterInfo, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("reading cluster-info: %w", err)
	}
	cfg, err := clientcmd.Load([]byte(info.Data[bootstrapapi.KubeConfigKey]))
	if err != nil {
		return fmt.Errorf("cluster-info: %w", err)
	}
	var bundle []byte
	for _, c := range cfg.Clusters {
		bundle = c.CertificateAuthorityData
	}
	if len(bundle) == 0 {
		return fmt.Errorf("cluster-info carries no trust bundle")
	}
	if err := n.Manager.Renew(ctx, bundle); err != nil {
		return err
	}
	report := noderenewal.ReportOf(request, n.Manager.Current().Cert, bundle)
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": report.Annotations()}})
	if err != nil {
		return err
	}
	_, err = n.Manager.Client().CoreV1().Nodes().Patch(ctx, n.Manager.cfg.NodeName, types.MergePatchType, patch, metav1.PatchOptions{})
	return err
}
