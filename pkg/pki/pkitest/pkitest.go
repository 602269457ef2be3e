// Package pkitest makes the certificate authorities tests need.
package pkitest

import (
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
