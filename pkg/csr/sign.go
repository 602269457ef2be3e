package csr

import (
	"crypto/x509"
	"errors"
	"fmt"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"

	"github.com/carousel-dev/carousel/pkg/pki"
)

// errNotApproved is returned by Sign for a request without the Approved condition.
var errNotApproved = errors.New("the request is not approved")

// MinDuration is the shortest certificate the API server lets a CSR ask for.
const MinDuration = 10 * time.Minute

// Approved reports whether a CSR has the Approved condition and no Denied or Failed one.
func Approved(req *certificatesv1.CertificateSigningRequest) bool {
	approved := false
	for _, c := range req.Status.Conditions {
		switch c.Type {
		case certificatesv1.CertificateApproved:
			approved = true
		case certificatesv1.CertificateDenied, certificatesv1.CertificateFailed:
			return false
		}
	}
	return approved
}

// Duration is the validity a signed certificate gets: the requested
// spec.expirationSeconds within [MinDuration, maxDuration], or maxDuration.
func Duration(req *certificatesv1.CertificateSigningRequest, maxDuration time.Duration) time.Duration {
	if req.Spec.ExpirationSeconds == nil {
		return maxDuration
	}
	d := time.Duration(*req.Spec.ExpirationSeconds) * time.Second
	return min(max(d, MinDuration), maxDuration)
}

// Sign issues the certificate of an approved request with ca. The
// certificate starts pki.Backdate before now and never outlives ca.
func Sign(req *certificatesv1.CertificateSigningRequest, ca *pki.KeyPair, maxDuration time.Duration, now time.Time) ([]byte, error) {
	if !Approved(req) {
		return nil, errNotApproved
	}
	parsed, bad := validate(req)
	if bad != nil {
		return nil, fmt.Errorf("%s: %s", bad.Reason, bad.Message)
	}
	var usages []x509.ExtKeyUsage
	for _, u := range req.Spec.Usages {
		switch u {
		case certificatesv1.UsageClientAuth:
			usages = append(usages, x509.ExtKeyUsageClientAuth)
		case certificatesv1.UsageServerAuth:
			usages = append(usages, x509.ExtKeyUsageServerAuth)
		}
	}
	cert, err := ca.Issue(pki.LeafTemplate{
		CommonName: parsed.Subject.CommonName, Organization: parsed.Subject.Organization,
		DNSNames: parsed.DNSNames, IPAddresses: parsed.IPAddresses,
		Usages: usages, Validity: Duration(req, maxDuration),
	}, parsed.PublicKey, now)
	if err != nil {
		return nil, err
	}
	return pki.EncodeCertificates(cert), nil
}
