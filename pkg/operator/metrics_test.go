package operator

import (
	"crypto/tls"
	"testing"
)

// The metrics endpoint serves the certificate of --metrics-cert-dir, or else
// the self-issued webhook certificate it is given, or else none of its own
// (controller-runtime's self-signed one); plain HTTP serves none.
func TestMetricsServerOptionsServeTheWebhookCertificateWithoutACertDir(t *testing.T) {
	webhook := &tls.Certificate{}
	served := func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return webhook, nil }
	servedBy := func(t *testing.T, certDir string, secure bool, served func(*tls.ClientHelloInfo) (*tls.Certificate, error)) *tls.Certificate {
		t.Helper()
		cfg := &tls.Config{}
		for _, opt := range MetricsServerOptions(":8443", secure, certDir, served).TLSOpts {
			opt(cfg)
		}
		if cfg.GetCertificate == nil {
			return nil
		}
		c, err := cfg.GetCertificate(nil)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	if got := servedBy(t, "", true, served); got != webhook {
		t.Error("without --metrics-cert-dir the endpoint does not serve the webhook's certificate")
	}
	if got := servedBy(t, "/etc/carousel/webhook-certs", true, served); got != nil {
		t.Error("with --metrics-cert-dir the endpoint serves the webhook's certificate instead of the directory's")
	}
	if got := servedBy(t, "", true, nil); got != nil {
		t.Error("without a webhook certificate the endpoint serves a certificate of its own")
	}
	if opts := MetricsServerOptions(":8443", false, "", served); opts.SecureServing || len(opts.TLSOpts) > 0 {
		t.Error("plain HTTP serves a certificate")
	}
}
