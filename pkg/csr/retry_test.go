package csr

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"net"
	"strings"
	"testing"

	certificatesv1 "k8s.io/api/certificates/v1"

	"github.com/carousel-dev/carousel/pkg/pki"
)

// legacyTransient is Decision.Transient as it was before Decision.Retry: the
// retry chosen by comparing reason strings. It is kept here only as the
// reference that Retry must agree with.
func legacyTransient(d Decision) bool {
	switch d.Reason {
	case ReasonForeignToken, ReasonUnknownNode, ReasonNodeWithoutAddresses, ReasonPinUnavailable:
		return d.Verdict == Ignore
	}
	return false
}

// allReasons is every reason Decide gives; TestDecisionRetry covers each.
var allReasons = []string{
	ReasonApproved, ReasonBadRequest, ReasonBadSubject, ReasonBadUsages, ReasonUnexpectedSANs, ReasonUnsupportedKey, ReasonIdentityMismatch,
	ReasonForeignToken, ReasonUnknownNode, ReasonNodeWithoutAddresses, ReasonPinUnavailable, ReasonOtherBootstrapToken,
	"ManualApproval", "OtherRequester", "OtherSigner",
}

// TestDecisionRetry is the table of every reason Decide gives and when the
// request is looked at again: Retry, set where the decision is made, keeps
// the retry each reason had when it was chosen from the reason text
// (legacyTransient) — soon for a token, a Node or addresses not seen yet,
// with backoff for unreadable pinned addresses, never for anything else.
func TestDecisionRetry(t *testing.T) {
	ec := key(t, pki.ECDSAP256)
	p224, err := ecdsa.GenerateKey(elliptic.P224(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	client, serving := certificatesv1.KubeAPIServerClientKubeletSignerName, certificatesv1.KubeletServingSignerName
	bootstrap := []string{"system:bootstrappers", group}
	nodes := []string{NodesGroup}
	worker1 := NodeInfo{UID: "uid-1", Addresses: []string{"10.0.0.7", "worker-1.example"}}
	tests := []struct {
		name   string
		signer string
		user   string
		groups []string
		usages []certificatesv1.KeyUsage
		tmpl   x509.CertificateRequest
		garble bool // spec.request is not a PEM request
		p224   bool
		policy func(*Policy)
		want   Verdict
		reason string
		retry  Retry
		legacy bool // what Transient() said for this decision
	}{
		{"client approved", client, "system:bootstrap:abcdef", bootstrap, clientUsages, x509.CertificateRequest{Subject: nodeSubject}, false, false, nil,
			Approve, ReasonApproved, RetryOnUpdate, false},
		{"serving approved", serving, "system:node:worker-1", nodes, servingUsages, x509.CertificateRequest{Subject: nodeSubject, DNSNames: []string{"worker-1.example"}}, false, false, nil,
			Approve, ReasonApproved, RetryOnUpdate, false},
		{"not a PEM request", client, "system:node:worker-1", nodes, clientUsages, x509.CertificateRequest{}, true, false, nil,
			Deny, ReasonBadRequest, RetryOnUpdate, false},
		{"bad subject", client, "system:bootstrap:abcdef", bootstrap, clientUsages, x509.CertificateRequest{Subject: pkix.Name{CommonName: "worker-1", Organization: []string{NodesGroup}}}, false, false, nil,
			Deny, ReasonBadSubject, RetryOnUpdate, false},
		{"bad usages", client, "system:bootstrap:abcdef", bootstrap, servingUsages, x509.CertificateRequest{Subject: nodeSubject}, false, false, nil,
			Deny, ReasonBadUsages, RetryOnUpdate, false},
		{"client with SANs", client, "system:bootstrap:abcdef", bootstrap, clientUsages, x509.CertificateRequest{Subject: nodeSubject, IPAddresses: []net.IP{net.ParseIP("10.0.0.7")}}, false, false, nil,
			Deny, ReasonUnexpectedSANs, RetryOnUpdate, false},
		{"serving SAN the node lacks", serving, "system:node:worker-1", nodes, servingUsages, x509.CertificateRequest{Subject: nodeSubject, DNSNames: []string{"evil.example"}}, false, false, nil,
			Deny, ReasonUnexpectedSANs, RetryOnUpdate, false},
		{"unsupported key", client, "system:bootstrap:abcdef", bootstrap, clientUsages, x509.CertificateRequest{Subject: nodeSubject}, false, true, nil,
			Deny, ReasonUnsupportedKey, RetryOnUpdate, false},
		{"client identity mismatch", client, "system:node:worker-2", nodes, clientUsages, x509.CertificateRequest{Subject: nodeSubject}, false, false, nil,
			Deny, ReasonIdentityMismatch, RetryOnUpdate, false},
		{"serving identity mismatch", serving, "system:node:worker-2", nodes, servingUsages, x509.CertificateRequest{Subject: nodeSubject, DNSNames: []string{"worker-1.example"}}, false, false, nil,
			Deny, ReasonIdentityMismatch, RetryOnUpdate, false},
		{"foreign bootstrap token", client, "system:bootstrap:zzzzzz", bootstrap, clientUsages, x509.CertificateRequest{Subject: nodeSubject}, false, false, nil,
			Ignore, ReasonForeignToken, RetrySoon, true},
		// Its groups come from its token's Secret: no cache catching up makes
		// it Carousel's, so it is not looked at again every few seconds.
		{"a token outside Carousel's group", client, "system:bootstrap:abcdef", []string{"system:bootstrappers", "system:bootstrappers:kubeadm:default-node-token"},
			clientUsages, x509.CertificateRequest{Subject: nodeSubject}, false, false, nil, Ignore, ReasonOtherBootstrapToken, RetryOnUpdate, false},
		{"no token check configured", client, "system:bootstrap:abcdef", bootstrap, clientUsages, x509.CertificateRequest{Subject: nodeSubject}, false, false,
			func(p *Policy) { p.IsCarouselToken = nil }, Ignore, ReasonForeignToken, RetrySoon, true},
		{"unknown node", serving, "system:node:worker-1", nodes, servingUsages, x509.CertificateRequest{Subject: nodeSubject, DNSNames: []string{"worker-1.example"}}, false, false,
			func(p *Policy) { p.Node = func(string) (NodeInfo, bool) { return NodeInfo{}, false } }, Ignore, ReasonUnknownNode, RetrySoon, true},
		{"node without addresses", serving, "system:node:worker-1", nodes, servingUsages, x509.CertificateRequest{Subject: nodeSubject, DNSNames: []string{"worker-1.example"}}, false, false,
			func(p *Policy) { p.Node = func(string) (NodeInfo, bool) { return NodeInfo{UID: "uid-1"}, true } }, Ignore, ReasonNodeWithoutAddresses, RetrySoon, true},
		{"pinned addresses unreadable", serving, "system:node:worker-1", nodes, servingUsages, x509.CertificateRequest{Subject: nodeSubject, DNSNames: []string{"worker-1.example"}}, false, false,
			func(p *Policy) {
				p.FirstSeenAddresses = true
				p.Pinned = func(string) (*AddressPin, error) { return nil, errors.New("etcdserver: request timed out") }
			}, Ignore, ReasonPinUnavailable, RetryWithBackoff, true},
		{"manual client approval", client, "system:bootstrap:abcdef", bootstrap, clientUsages, x509.CertificateRequest{Subject: nodeSubject}, false, false,
			func(p *Policy) { p.AutoApproveClient = false }, Ignore, "ManualApproval", RetryOnUpdate, false},
		{"manual serving approval", serving, "system:node:worker-1", nodes, servingUsages, x509.CertificateRequest{Subject: nodeSubject, DNSNames: []string{"worker-1.example"}}, false, false,
			func(p *Policy) { p.AutoApproveServing = false }, Ignore, "ManualApproval", RetryOnUpdate, false},
		{"another requester", client, "alice", []string{"system:authenticated"}, clientUsages, x509.CertificateRequest{Subject: nodeSubject}, false, false, nil,
			Ignore, "OtherRequester", RetryOnUpdate, false},
		{"another signer", "example.com/signer", "system:node:worker-1", nodes, clientUsages, x509.CertificateRequest{Subject: nodeSubject}, false, false, nil,
			Ignore, "OtherSigner", RetryOnUpdate, false},
	}
	covered := map[string]bool{}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := policy
			p.Node = func(name string) (NodeInfo, bool) { return worker1, name == "worker-1" }
			if tt.policy != nil {
				tt.policy(&p)
			}
			k := ec
			if tt.p224 {
				k = p224
			}
			req := request(t, k, tt.signer, tt.user, tt.groups, tt.usages, tt.tmpl)
			if tt.garble {
				req.Spec.Request = []byte("garbage")
			}
			got := Decide(req, p)
			if got.Verdict != tt.want || got.Reason != tt.reason {
				t.Fatalf("Decide = %+v, want %s/%s", got, tt.want, tt.reason)
			}
			if got.Retry != tt.retry {
				t.Fatalf("Retry = %s, want %s", got.Retry, tt.retry)
			}
			if legacy := legacyTransient(got); legacy != tt.legacy || (got.Retry != RetryOnUpdate) != legacy {
				t.Fatalf("Retry %s, but the reason-text rule said transient: %v (table: %v)", got.Retry, legacy, tt.legacy)
			}
			if got.Verdict != Ignore && got.Retry != RetryOnUpdate {
				t.Fatalf("a %s with Retry %s", got.Verdict, got.Retry)
			}
			// The token a request waits for is named, for the controller to
			// tell one not in the cache yet from one gone since.
			if wantToken := strings.TrimPrefix(tt.user, BootstrapUserPrefix); (got.Reason == ReasonForeignToken) != (got.UnknownToken != "") ||
				got.UnknownToken != "" && got.UnknownToken != wantToken {
				t.Fatalf("UnknownToken %q with reason %s, requested by %s", got.UnknownToken, got.Reason, tt.user)
			}
			covered[got.Reason] = true
		})
	}
	for _, reason := range allReasons {
		if !covered[reason] {
			t.Errorf("no case gives reason %s", reason)
		}
	}
}
