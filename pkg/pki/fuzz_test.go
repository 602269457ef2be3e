package pki

import (
	"bytes"
	"testing"
	"time"
)

// FuzzParseBundle feeds arbitrary bytes to the bundle parser: it must never
// panic, and whatever it accepts must encode to a canonical form that parses
// back to the same bundle.
func FuzzParseBundle(f *testing.F) {
	a := testCA(f, ECDSAP256, time.Hour)
	b := testCA(f, RSA2048, time.Hour)
	f.Add(NewBundle(a.Cert, b.Cert).PEM())
	f.Add(append(b.CertPEM(), a.CertPEM()...))
	f.Add([]byte("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"))
	f.Add([]byte("garbage"))
	f.Fuzz(func(t *testing.T, data []byte) {
		bundle, err := ParseBundle(data)
		if err != nil {
			return
		}
		encoded := bundle.PEM()
		again, err := ParseBundle(encoded)
		if err != nil {
			t.Fatalf("re-parsing an encoded bundle: %v", err)
		}
		if !bytes.Equal(again.PEM(), encoded) {
			t.Fatal("encoding is not canonical")
		}
	})
}
