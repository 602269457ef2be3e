package csr

import (
	"crypto/x509"
	"errors"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/carousel-dev/carousel/pkg/pki"
)

// errNotApproved is returned by Sign for a request without the Approved condition.
var errNotApproved = errors.New("the request is not approved")

// RefusedError is Sign's answer to a request its signer never issues,
// whoever approved it: trying again cannot help, the request is to be marked
// Failed. Its message describes the request only. Every other error of Sign
// is a problem of the CA (for example an expired one), not of the request.
type RefusedError struct {
	Reason  string
	Message string
}

func (e *RefusedError) Error() string { return e.Reason + ": " + e.Message }

// MinDuration is the shortest certificate the API server lets a CSR ask for.
const MinDuration = 10 * time.Minute

// Approved reports whether a CSR has the Approved condition and no Denied or
// Failed one.
func Approved(req *certificatesv1.CertificateSigningRequest) bool {
	approved := false
	for _, c := range req.Status.Conditions {
		switch {
		case c.Type == certificatesv1.CertificateApproved:
			approved = true
		case c.Type == certificatesv1.CertificateDenied, Failed(c):
			return false
		}
	}
	return approved
}

// Failed reports whether c is a Failed condition that counts: one that is
// True or has no status, as kube-controller-manager's signer takes it. The
// API server holds Approved and Denied to True, but lets Failed be False or
// Unknown, which says the request did not fail.
func Failed(c certificatesv1.CertificateSigningRequestCondition) bool {
	return c.Type == certificatesv1.CertificateFailed && (c.Status == "" || c.Status == corev1.ConditionTrue)
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
// certificate starts pki.Backdate before now and never outlives ca. A request
// that fails Validate is refused with a *RefusedError.
func Sign(req *certificatesv1.CertificateSigningRequest, ca *pki.KeyPair, maxDuration time.Duration, now time.Time) ([]byte, error) {
	if !Approved(req) {
		return nil, errNotApproved
	}
	parsed, bad := validate(req)
	if bad != nil {
		return nil, &RefusedError{Reason: bad.Reason, Message: bad.Message}
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
