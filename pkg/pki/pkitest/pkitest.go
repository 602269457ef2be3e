// Package pkitest makes the certificate authorities tests need.
package pkitest

import (
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"testing"
	"time"

	"github.com/carousel-dev/carousel/pkg/pki"
)

// NewCA is a new self-signed ECDSA P-256 CA named name, valid for an hour
// from now.
func NewCA(t testing.TB, name string) *pki.KeyPair {
	t.Helper()
	key, err := pki.GenerateKey(pki.ECDSAP256)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := pki.NewCA(pki.CATemplate{CommonName: name, Validity: time.Hour}, key, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

// NewCAThatMayNotSign is a self-signed ECDSA P-256 certificate named name,
// valid for an hour from now, that says it is a CA (CA:TRUE) but whose key
// usage lacks certSign: what verifies a certificate it signs refuses it.
func NewCAThatMayNotSign(t testing.TB, name string, now time.Time) *pki.KeyPair {
	t.Helper()
	key, err := pki.GenerateKey(pki.ECDSAP256)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: now.Add(-time.Minute), NotAfter: now.Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, BasicConstraintsValid: true, IsCA: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &pki.KeyPair{Cert: cert, Key: key}
}
