package managed

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
	"github.com/carousel-dev/carousel/pkg/credentials"
	"github.com/carousel-dev/carousel/pkg/noderenewal"
	"github.com/carousel-dev/carousel/pkg/pki"
)

// InPlaceRollout is the InPlace worker rollout strategy: Carousel asks every
// node of the pool, through an annotation on its Node, to fetch the current
// trust bundle and renew its client certificate; the node agent does so over
// its already-trusted connection and reports back on the Node.
type InPlaceRollout struct {
	Managed    *Reconciler   // reaches the managed clusters
	Management client.Reader // reads the Cluster's CAs and bundles
}

// Rollout implements the cluster controller's WorkerRollout.
func (p *InPlaceRollout) Rollout(ctx context.Context, c *v1alpha1.Cluster, pool v1alpha1.WorkerPool) (bool, string, error) {
	remote, ok := p.Managed.Remote(client.ObjectKeyFromObject(c))
	if !ok {
		return false, fmt.Sprintf("pool %s: waiting to reach the cluster's API server (spec.controlPlane.endpoint)", pool.Name), nil
	}
	clientCAs, err := p.cas(ctx, c, v1alpha1.CARoleClient)
	if err != nil {
		return false, "", err
	}
	rot := c.CARotation()
	switch rot.Phase {
	case v1alpha1.RotationPreparing:
		// Nodes may move only once the API server trusts the new client CA,
		// which is when Carousel's own client certificate moved to it.
		moved, err := p.operatorOnCurrentCA(ctx, c, clientCAs)
		if err != nil || !moved {
			return false, fmt.Sprintf("pool %s: waiting until the API server trusts the new client CA", pool.Name), err
		}
	case v1alpha1.RotationFinalizing:
		if clientCAs.Previous != nil {
			return false, fmt.Sprintf("pool %s: waiting until the old CAs are dropped", pool.Name), nil
		}
	}
	bundle, err := p.bundle(ctx, c)
	if err != nil {
		return false, "", err
	}
	request := noderenewal.RequestFor(rot)
	want := noderenewal.Expected(request, clientCAs.Current.Cert, bundle)

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

func (p *InPlaceRollout) cas(ctx context.Context, c *v1alpha1.Cluster, role v1alpha1.CARole) (*credentials.CAs, error) {
	s := &corev1.Secret{}
	if err := p.Management.Get(ctx, client.ObjectKey{Namespace: c.Namespace, Name: credentials.CASecretName(c.Name, role)}, s); err != nil {
		return nil, err
	}
	return credentials.DecodeCASecret(s)
}

func (p *InPlaceRollout) operatorOnCurrentCA(ctx context.Context, c *v1alpha1.Cluster, cas *credentials.CAs) (bool, error) {
	s := &corev1.Secret{}
	if err := p.Management.Get(ctx, client.ObjectKey{Namespace: c.Namespace, Name: credentials.CertificateSecretName(c.Name, credentials.CertOperator)}, s); err != nil {
		return false, client.IgnoreNotFound(err)
	}
	certs, err := pki.ParseCertificates(s.Data[v1alpha1.DataKeyCertificate])
	if err != nil {
		return false, err
	}
	return certs[0].CheckSignatureFrom(cas.Current.Cert) == nil, nil
}

func (p *InPlaceRollout) bundle(ctx context.Context, c *v1alpha1.Cluster) ([]byte, error) {
	cm := &corev1.ConfigMap{}
	if err := p.Management.Get(ctx, client.ObjectKey{Namespace: c.Namespace, Name: credentials.BundleConfigMapName(c.Name, v1alpha1.CARoleCluster)}, cm); err != nil {
		return nil, err
	}
	return []byte(cm.Data[v1alpha1.DataKeyCABundle]), nil
}
