package credentials

import (
	"context"

	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
	"github.com/carousel-dev/carousel/pkg/noderenewal"
	"github.com/carousel-dev/carousel/pkg/pki"
)

// NodeTrust is what the nodes of in-place pools are to trust
// (kube-system/carousel-node-trust, see package noderenewal): the published
// cluster and kubelet CA bundles, except in Aborting, where it is each
// role's CA of before the rotation alone.
//
// An abort can give nodes that trust at once, in the one roll that also
// takes their certificates back to the old CAs: no server certificate, nor
// the API server's client certificate for kubelets, leaves the old CAs
// before Finalizing (rotation.Issuer), and abort is refused in Finalizing.
// The published bundles keep the new CAs until they are deleted, for
// whatever still holds a certificate from them, the kubelets before they
// rolled among them.
func NodeTrust(ctx context.Context, r client.Reader, c *v1alpha1.Cluster, published noderenewal.Trust) (noderenewal.Trust, error) {
	if c.CARotationPhase() != v1alpha1.RotationAborting {
		return published, nil
	}
	oldOnly := func(role v1alpha1.CARole) ([]byte, error) {
		cas, err := ReadCAs(ctx, r, c, role)
		if err != nil {
			return nil, err
		}
		return pki.NewBundle(cas.BeforeRotation().Cert).PEM(), nil
	}
	var trust noderenewal.Trust
	var err error
	if trust.Cluster, err = oldOnly(v1alpha1.CARoleCluster); err != nil {
		return noderenewal.Trust{}, err
	}
	if trust.Kubelet, err = oldOnly(v1alpha1.CARoleKubelet); err != nil {
		return noderenewal.Trust{}, err
	}
	return trust, nil
}
