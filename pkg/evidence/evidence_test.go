package evidence

import (
	"context"
	"encoding/pem"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/carousel-dev/carousel/pkg/pki"
)

// ServesChainTo says that the certificate does not verify only when it does
// not: an API server that cannot be reached is reported as such.
func TestServesChainToTellsAnUnverifiedCertificateFromAnUnreachableServer(t *testing.T) {
	api := httptest.NewTLSServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer api.Close()
	served := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: api.Certificate().Raw})
	key, err := pki.GenerateKey(pki.ECDSAP256)
	if err != nil {
		t.Fatal(err)
	}
	other, err := pki.NewCA(pki.CATemplate{CommonName: "another CA", Validity: time.Hour}, key, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	// An address nothing listens on: a port taken and given back.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "https://" + l.Addr().String()
	_ = l.Close()

	c := Checker{Timeout: 5 * time.Second}
	ctx := context.Background()
	if err := c.ServesChainTo(ctx, api.URL, served); err != nil {
		t.Errorf("against the CA of its certificate: %v", err)
	}
	if err := c.ServesChainTo(ctx, api.URL, other.CertPEM()); err == nil || !strings.Contains(err.Error(), "does not verify against the new cluster CA") {
		t.Errorf("against another CA: %v, want it not to verify", err)
	}
	if err := c.ServesChainTo(ctx, closed, served); err == nil || strings.Contains(err.Error(), "does not verify") ||
		!strings.Contains(err.Error(), "reaching the API server") {
		t.Errorf("nothing listening: %v, want it reported as unreachable, not as a certificate that does not verify", err)
	}
}
