// Package workerrollout holds the worker rollout strategies the Cluster
// controller asks to roll a pool: InPlace (the node agents renew through an
// annotation on their Node; see package noderenewal) and Manual (the user
// reports it).
package workerrollout

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
	"github.com/carousel-dev/carousel/pkg/clustercache"
	"github.com/carousel-dev/carousel/pkg/credentials"
	"github.com/carousel-dev/carousel/pkg/noderenewal"
)

// InPlaceRollout is the InPlace worker rollout strategy: Carousel asks every
// node of the pool, through an annotation on its Node, to fetch the current
// trust bundles (cluster and kubelet), install them and renew its client
// certificate; the node agent does so over its already-trusted connection
// and reports back on the Node, and Carousel compares the report with the
// bundles it published.
type InPlaceRollout struct {
	Connections *clustercache.Cache // reaches the managed clusters
	Management  client.Reader       // reads the Cluster's CAs and bundles
}

// Rollout implements the cluster controller's WorkerRollout.
func (p *InPlaceRollout) Rollout(ctx context.Context, c *v1alpha1.Cluster, pool v1alpha1.WorkerPool) (bool, string, error) {
	remote, ok := p.Connections.Client(client.ObjectKeyFromObject(c))
	if !ok {
		return false, fmt.Sprintf("pool %s: waiting to reach the cluster's API server (spec.controlPlane.endpoint)", pool.Name), nil
	}
	clientCAs, inUse, err := credentials.ClientCAInUse(ctx, p.Management, c)
	if apierrors.IsNotFound(err) {
		return false, fmt.Sprintf("pool %s: waiting for Carousel's credentials to be issued", pool.Name), nil
	}
	if err != nil {
		return false, "", err
	}
	rot := c.CARotation()
	switch rot.Phase {
	case v1alpha1.RotationPreparing:
		// Nodes may move only once the API server trusts the new client CA,
		// which is when Carousel's own client certificate moved to it.
		if inUse != clientCAs.Current {
			return false, fmt.Sprintf("pool %s: waiting until the API server trusts the new client CA", pool.Name), nil
		}
	case v1alpha1.RotationFinalizing:
		if clientCAs.Previous != nil {
			return false, fmt.Sprintf("pool %s: waiting until the old CAs are dropped", pool.Name), nil
		}
	}
	trust, err := p.trust(ctx, c)
	if apierrors.IsNotFound(err) {
		return false, fmt.Sprintf("pool %s: waiting for Carousel's trust bundles to be published", pool.Name), nil
	}
	if err != nil {
		return false, "", err
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
		return false, "", fmt.Errorf("listing the nodes of pool %s: %w", pool.Name, err)
	}
	renewed := 0
	for i := range nodes.Items {
		n := &nodes.Items[i]
		action := noderenewal.Assess(n.Annotations, want)
		switch action {
		case noderenewal.Done:
			renewed++
			continue
		case noderenewal.Wait:
			continue // asked, not answered yet
		}
		patch := client.MergeFrom(n.DeepCopy())
		n.Annotations = noderenewal.Annotate(n.Annotations, action, request)
		if err := remote.Patch(ctx, n, patch); err != nil {
			return false, "", fmt.Errorf("asking node %s to renew: %w", n.Name, err)
		}
	}
	if renewed == len(nodes.Items) {
		return true, "", nil
	}
	return false, fmt.Sprintf("pool %s: %d of %d nodes renewed their credentials", pool.Name, renewed, len(nodes.Items)), nil
}

// trust reads the bundles a node of c must end up with from the management
// cluster: the cluster CA bundle (the kubelet's kubeconfigs) and the kubelet
// CA bundle (the kubelet's clientCAFile).
func (p *InPlaceRollout) trust(ctx context.Context, c *v1alpha1.Cluster) (noderenewal.Trust, error) {
	cluster, err := p.bundle(ctx, c, v1alpha1.CARoleCluster)
	if err != nil {
		return noderenewal.Trust{}, err
	}
	kubelet, err := p.bundle(ctx, c, v1alpha1.CARoleKubelet)
	if err != nil {
		return noderenewal.Trust{}, err
	}
	return noderenewal.Trust{Cluster: cluster, Kubelet: kubelet}, nil
}

func (p *InPlaceRollout) bundle(ctx context.Context, c *v1alpha1.Cluster, role v1alpha1.CARole) ([]byte, error) {
	cm := &corev1.ConfigMap{}
	if err := p.Management.Get(ctx, client.ObjectKey{Namespace: c.Namespace, Name: credentials.BundleConfigMapName(c.Name, role)}, cm); err != nil {
		return nil, err
	}
	return []byte(cm.Data[v1alpha1.DataKeyCABundle]), nil
}
