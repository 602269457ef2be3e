package pki

import (
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"strings"
	"testing"
	"time"
)

func TestCertificateRequestRoundTrip(t *testing.T) {
	key := testKey(t, ECDSAP256)
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
		Subject: pkix.Name{CommonName: "system:node:worker-1", Organization: []string{"system:nodes"}}}, key)
	if err != nil {
		t.Fatal(err)
	}
	req, err := ParseCertificateRequest(EncodeCertificateRequest(der))
	if err != nil {
		t.Fatalf("ParseCertificateRequest: %v", err)
	}
	if req.Subject.CommonName != "system:node:worker-1" || !PublicKeysEqual(req.PublicKey, key.Public()) {
		t.Fatalf("parsed %q with another key, want the request that was encoded", req.Subject.CommonName)
	}
}

func TestParseCertificateRequestErrors(t *testing.T) {
	ca := testCA(t, ECDSAP256, 24*time.Hour)
	for name, tc := range map[string]struct {
		data []byte
		want string
	}{
		"empty":         {nil, "no PEM block"},
		"not PEM":       {[]byte("a request"), "no PEM block"},
		"a certificate": {ca.CertPEM(), `unexpected PEM block "CERTIFICATE"`},
		"not a request": {EncodeCertificateRequest([]byte("garbage")), "asn1"},
		"truncated":     {EncodeCertificateRequest(ca.Cert.Raw[:10]), "asn1"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := ParseCertificateRequest(tc.data)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("ParseCertificateRequest = %v, want an error containing %q", err, tc.want)
			}
		})
	}
}
