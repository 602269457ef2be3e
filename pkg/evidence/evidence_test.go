package evidence

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/carousel-dev/carousel/pkg/bounded"
	"github.com/carousel-dev/carousel/pkg/pki"
	"github.com/carousel-dev/carousel/pkg/pki/pkitest"
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

// A cluster that trimmed system:basic-user refuses the SelfSubjectReview
// (403), and RBAC's refusal names the user the API server authenticated:
// the certificate's, anonymous, or another.
func TestARefusedSelfSubjectReviewNamesTheUser(t *testing.T) {
	ca := pkitest.NewCA(t, "client CA")
	certPEM, keyPEM := clientPair(t, ca, "carousel:trust-probe")
	refusal := func(message string) string {
		return `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"Forbidden","code":403,"message":` + strconv.Quote(message) + `}`
	}
	rbac := func(user string) string {
		return refusal(`selfsubjectreviews.authentication.k8s.io is forbidden: User "` + user +
			`" cannot create resource "selfsubjectreviews" in API group "authentication.k8s.io" at the cluster scope`)
	}
	c := Checker{Timeout: 5 * time.Second}
	for _, tt := range []struct {
		name, answer           string
		accepted, rejected     bool
		acceptedErr, rejectErr string
	}{
		{"the certificate's user", rbac("carousel:trust-probe"), true, false, "", "still accepts"},
		{"anonymous", rbac("system:anonymous"), false, true, `took the client certificate "carousel:trust-probe" for "system:anonymous"`, ""},
		{"another user", rbac("someone"), false, false, `for "someone"`, "still accepts"},
		{"an admission webhook's refusal", refusal(`selfsubjectreviews.authentication.k8s.io is forbidden: denied`), false, false, "answered 403", "answered 403"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			api := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusForbidden)
				_, _ = w.Write([]byte(tt.answer))
			}))
			defer api.Close()
			trust := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: api.Certificate().Raw})
			err := c.ClientAccepted(context.Background(), api.URL, trust, certPEM, keyPEM)
			if tt.accepted != (err == nil) || !tt.accepted && !strings.Contains(err.Error(), tt.acceptedErr) {
				t.Errorf("ClientAccepted: %v, want accepted %t (%q)", err, tt.accepted, tt.acceptedErr)
			}
			err = c.ClientRejected(context.Background(), api.URL, trust, certPEM, keyPEM)
			if tt.rejected != (err == nil) || !tt.rejected && !strings.Contains(err.Error(), tt.rejectErr) {
				t.Errorf("ClientRejected: %v, want rejected %t (%q)", err, tt.rejected, tt.rejectErr)
			}
		})
	}
}

// An answer past bounded.MaxResponseBytes fails the check that read it.
func TestAnAnswerPastTheBoundFailsTheCheck(t *testing.T) {
	ca := pkitest.NewCA(t, "client CA")
	certPEM, keyPEM := clientPair(t, ca, "carousel:operator")
	api := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"kind":"NamespaceList","apiVersion":"v1","metadata":{},"items":[]`))
		_, _ = w.Write([]byte(strings.Repeat(" ", bounded.MaxResponseBytes)))
		_, _ = w.Write([]byte(`}`))
	}))
	defer api.Close()
	trust := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: api.Certificate().Raw})
	behind, err := Checker{Timeout: 10 * time.Second}.KubeRootCABehind(context.Background(), api.URL, trust, certPEM, keyPEM, ca.CertPEM())
	if want := "larger than 16 MiB"; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("KubeRootCABehind = %v, %v; want an error saying %q", behind, err, want)
	}
}

// clientPair is a client certificate of ca for cn, and its key, in PEM.
func clientPair(t *testing.T, ca *pki.KeyPair, cn string) (certPEM, keyPEM []byte) {
	t.Helper()
	pair, err := ca.IssueKeyPair(pki.LeafTemplate{CommonName: cn, Usages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		Validity: time.Hour}, pki.ECDSAP256, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	keyPEM, err = pair.KeyPEM()
	if err != nil {
		t.Fatal(err)
	}
	return pair.CertPEM(), keyPEM
}
