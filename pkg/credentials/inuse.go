package credentials

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
	"github.com/carousel-dev/carousel/pkg/pki"
)

// IssuerInUse reads a role's CAs and the certificate follow, and returns
// the CAs and the one of them that signed follow. During a rotation a
// certificate Carousel issued moves to the new CA only once what checks it
// trusts that CA, so the issuer of the right certificate is the CA a new
// credential of the same kind may be signed with now (ClientCAInUse: client
// certificates; kubelet serving certificates move to the new kubelet CA
// with them, kubeletcsr's signingCA). A certificate signed
// by neither CA (one written by someone else) is an error: nothing is
// signed on its word.
func IssuerInUse(ctx context.Context, r client.Reader, c *v1alpha1.Cluster, role v1alpha1.CARole, follow string) (*CAs, *pki.KeyPair, error) {
	cas, err := ReadCAs(ctx, r, c, role)
	if err != nil {
		return nil, nil, err
	}
	leaf := &corev1.Secret{}
	if err := r.Get(ctx, client.ObjectKey{Namespace: c.Namespace, Name: CertificateSecretName(c.Name, follow)}, leaf); err != nil {
		return nil, nil, fmt.Errorf("reading %s: %w", follow, err)
	}
	certs, err := pki.ParseCertificates(leaf.Data[v1alpha1.DataKeyCertificate])
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", follow, err)
	}
	issuer := cas.Issuer(certs[0])
	if issuer == nil {
		return nil, nil, fmt.Errorf("%s: %w", follow, errNoIssuer)
	}
	return cas, issuer, nil
}

var errNoIssuer = errors.New("signed by neither CA of its role; it is re-issued by the next reconcile")

// ClientCAInUse returns the client CAs and the one the managed API server is
// known to trust now: the issuer of Carousel's own client certificate.
func ClientCAInUse(ctx context.Context, r client.Reader, c *v1alpha1.Cluster) (*CAs, *pki.KeyPair, error) {
	return IssuerInUse(ctx, r, c, v1alpha1.CARoleClient, CertOperator)
}

// ReadCAs reads and decodes the CAs of one of c's roles.
func ReadCAs(ctx context.Context, r client.Reader, c *v1alpha1.Cluster, role v1alpha1.CARole) (*CAs, error) {
	s := &corev1.Secret{}
	if err := r.Get(ctx, client.ObjectKey{Namespace: c.Namespace, Name: CASecretName(c.Name, role)}, s); err != nil {
		return nil, fmt.Errorf("reading the %s CA: %w", role, err)
	}
	return DecodeCASecret(s)
}
