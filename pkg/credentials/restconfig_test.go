package credentials

import (
	"crypto/x509"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	"github.com/carousel-dev/carousel/pkg/pki"
)

func testClientCredentials(t *testing.T) (caPEM, certPEM, keyPEM []byte) {
	t.Helper()
	key, err := pki.GenerateKey(pki.ECDSAP256)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	ca, err := pki.NewCA(pki.CATemplate{CommonName: "test-ca", Validity: time.Hour}, key, now)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := ca.IssueKeyPair(pki.LeafTemplate{CommonName: "carousel", Usages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, Validity: time.Hour},
		pki.ECDSAP256, now)
	if err != nil {
		t.Fatal(err)
	}
	keyPEM, err = leaf.KeyPEM()
	if err != nil {
		t.Fatal(err)
	}
	return ca.CertPEM(), leaf.CertPEM(), keyPEM
}

func TestRESTConfigCarriesOnlyTheGivenData(t *testing.T) {
	caPEM, certPEM, keyPEM := testClientCredentials(t)
	cfg, err := RESTConfig("https://192.0.2.1:6443", caPEM, certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	want := &rest.Config{Host: "https://192.0.2.1:6443", TLSClientConfig: rest.TLSClientConfig{CAData: caPEM, CertData: certPEM, KeyData: keyPEM}}
	if cfg.String() != want.String() || string(cfg.CAData) != string(caPEM) || string(cfg.CertData) != string(certPEM) || string(cfg.KeyData) != string(keyPEM) {
		t.Fatalf("RESTConfig = %s, want %s", cfg, want)
	}
	if cfg.ExecProvider != nil || cfg.AuthProvider != nil || cfg.BearerToken != "" || cfg.BearerTokenFile != "" || cfg.Insecure ||
		cfg.CAFile != "" || cfg.CertFile != "" || cfg.KeyFile != "" || cfg.Username != "" || cfg.Proxy != nil || cfg.Impersonate.UserName != "" {
		t.Fatalf("RESTConfig carries more than the data it was given: %s", cfg)
	}
}

func TestRESTConfigRefusesBadInput(t *testing.T) {
	caPEM, certPEM, keyPEM := testClientCredentials(t)
	_, otherCert, _ := testClientCredentials(t)
	tests := []struct {
		name          string
		endpoint      string
		ca, cert, key []byte
		want          string
	}{
		{"no endpoint", "", caPEM, certPEM, keyPEM, "no endpoint"},
		{"http endpoint", "http://192.0.2.1:6443", caPEM, certPEM, keyPEM, "must be an https URL"},
		{"no host", "https://", caPEM, certPEM, keyPEM, "must name a host"},
		{"user information", "https://me:secret@192.0.2.1", caPEM, certPEM, keyPEM, "must not carry user information"},
		{"not a URL", "https://me:secret@[192.0.2.1", caPEM, certPEM, keyPEM, "not a URL"},
		{"no CA bundle", "https://192.0.2.1", nil, certPEM, keyPEM, "no CA bundle"},
		{"CA bundle of a key", "https://192.0.2.1", keyPEM, certPEM, keyPEM, "CA bundle"},
		{"key of another certificate", "https://192.0.2.1", caPEM, otherCert, keyPEM, "client certificate"},
		{"no client certificate", "https://192.0.2.1", caPEM, nil, nil, "client certificate"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := RESTConfig(tt.endpoint, tt.ca, tt.cert, tt.key)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("RESTConfig error = %v, want one containing %q", err, tt.want)
			}
			if strings.Contains(err.Error(), "secret") {
				t.Fatalf("RESTConfig error %q repeats the endpoint's password", err)
			}
		})
	}
}
