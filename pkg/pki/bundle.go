package pki

import (
	"bytes"
	"crypto/sha256"
	"crypto/x509"
	"slices"
	"time"
)

// Bundle is a set of trusted CA certificates without duplicates, in a stable
// order: oldest NotBefore first, ties broken by fingerprint. Encoding the same
// set of certificates therefore always gives the same bytes, so a bundle can
// be compared and written only when it changed.
type Bundle []*x509.Certificate

// NewBundle returns the certificates as a Bundle.
func NewBundle(certs ...*x509.Certificate) Bundle {
	b := make(Bundle, 0, len(certs))
	for _, c := range certs {
		if !b.Contains(c) {
			b = append(b, c)
		}
	}
	slices.SortFunc(b, func(x, y *x509.Certificate) int {
		if c := x.NotBefore.Compare(y.NotBefore); c != 0 {
			return c
		}
		return bytes.Compare(fingerprintBytes(x), fingerprintBytes(y))
	})
	return b
}

// ParseBundle parses PEM-encoded certificates into a Bundle.
func ParseBundle(data []byte) (Bundle, error) {
	certs, err := ParseCertificates(data)
	if err != nil {
		return nil, err
	}
	return NewBundle(certs...), nil
}

// PEM encodes the bundle.
func (b Bundle) PEM() []byte { return EncodeCertificates(b...) }

// Contains reports whether the bundle holds the certificate.
func (b Bundle) Contains(cert *x509.Certificate) bool {
	return slices.ContainsFunc(b, func(c *x509.Certificate) bool { return c.Equal(cert) })
}

// Unexpired returns the certificates still valid at now.
func (b Bundle) Unexpired(now time.Time) Bundle {
	return slices.DeleteFunc(slices.Clone(b), func(c *x509.Certificate) bool { return now.After(c.NotAfter) })
}

// CertPool returns the bundle as a pool of roots for TLS and verification.
func (b Bundle) CertPool() *x509.CertPool {
	pool := x509.NewCertPool()
	for _, c := range b {
		pool.AddCert(c)
	}
	return pool
}

func fingerprintBytes(c *x509.Certificate) []byte {
	sum := sha256.Sum256(c.Raw)
	return sum[:]
}
