package cluster

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"net/url"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/carousel-dev/carousel/pkg/pki"
)

// A check that keeps failing on a connection reset gives the same condition
// each time, whatever local port each attempt used: its message names the
// API server, not the connection's local address.
func TestAnUnreachableConditionLeavesOutTheLocalAddress(t *testing.T) {
	reset := func(port int) error {
		return &url.Error{Op: "Get", URL: "https://192.0.2.1:6443/version", Err: &net.OpError{Op: "read", Net: "tcp",
			Source: &net.TCPAddr{IP: net.IPv4(192, 0, 2, 11), Port: port}, Addr: &net.TCPAddr{IP: net.IPv4(192, 0, 2, 1), Port: 6443},
			Err: syscall.ECONNRESET}}
	}
	first, second := unreachable("", reset(54321)).Message, unreachable("", reset(54322)).Message
	if first != second {
		t.Errorf("the messages differ:\n%s\n%s", first, second)
	}
	if want := `Get "https://192.0.2.1:6443/version": read tcp 192.0.2.1:6443: connection reset by peer`; first != want {
		t.Errorf("message %q, want %q", first, want)
	}
	if got := unreachable("not yet: ", errors.New("x509: certificate signed by unknown authority")).Message; got != "not yet: x509: certificate signed by unknown authority" {
		t.Errorf("message %q: an error without a connection is kept as it is", got)
	}
}

// An API server serving a certificate outside its validity fails every
// check with Go's error, which names the current time: the condition names
// the certificate's validity instead, so that a check failing the same way
// writes the status once, not on every poll.
func TestAnUnreachableConditionLeavesOutTheCurrentTime(t *testing.T) {
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	key, err := pki.GenerateKey(pki.ECDSAP256)
	if err != nil {
		t.Fatal(err)
	}
	served, err := pki.NewCA(pki.CATemplate{CommonName: "kube-apiserver", Validity: time.Hour}, key, now)
	if err != nil {
		t.Fatal(err)
	}
	expiredAt := func(at time.Time) error {
		_, err := served.Cert.Verify(x509.VerifyOptions{Roots: pki.NewBundle(served.Cert).CertPool(), CurrentTime: at})
		if err == nil {
			t.Fatal("an expired certificate verified")
		}
		return &url.Error{Op: "Get", URL: "https://192.0.2.1:6443/version", Err: &tls.CertificateVerificationError{Err: err}}
	}
	first, second := unreachable("", expiredAt(now.Add(2*time.Hour))).Message, unreachable("", expiredAt(now.Add(3*time.Hour))).Message
	if first != second {
		t.Errorf("the messages differ:\n%s\n%s", first, second)
	}
	if want := "the certificate served is valid from " + served.Cert.NotBefore.UTC().Format(time.RFC3339) + " until 2026-11-29T13:00:00Z, not now"; !strings.Contains(first, want) {
		t.Errorf("message %q lacks %q", first, want)
	}
}
