package csr

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"github.com/carousel-dev/carousel/pkg/pki"
)

const group = "system:bootstrappers:carousel:prod"

func key(t *testing.T, alg pki.KeyAlgorithm) crypto.Signer {
	t.Helper()
	k, err := pki.GenerateKey(alg)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// request builds a CSR object for a key and subject.
func request(t *testing.T, k crypto.Signer, signer, user string, groups []string, usages []certificatesv1.KeyUsage, tmpl x509.CertificateRequest) *certificatesv1.CertificateSigningRequest {
	t.Helper()
	der, err := x509.CreateCertificateRequest(rand.Reader, &tmpl, k)
	if err != nil {
		t.Fatal(err)
	}
	return &certificatesv1.CertificateSigningRequest{Spec: certificatesv1.CertificateSigningRequestSpec{
		Request: pki.EncodeCertificateRequest(der), SignerName: signer,
		Username: user, Groups: groups, Usages: usages,
	}}
}

var (
	clientUsages  = []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageClientAuth}
	servingUsages = []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageServerAuth}
	nodeSubject   = pkix.Name{CommonName: "system:node:worker-1", Organization: []string{NodesGroup}}
	policy        = Policy{
		BootstrapGroup:    group,
		IsCarouselToken:   func(id string) bool { return id == "abcdef" },
		AutoApproveClient: true, AutoApproveServing: true,
		Node: func(node string) (NodeInfo, bool) {
			return NodeInfo{UID: "uid-1", Addresses: []string{"10.0.0.7", "worker-1.example", "*.nodes.example"}}, node == "worker-1"
		},
	}
)

func TestDecideClient(t *testing.T) {
	ec := key(t, pki.ECDSAP256)
	rsaKey := key(t, pki.RSA2048)
	p224, _ := ecdsa.GenerateKey(elliptic.P224(), rand.Reader)
	bootstrap := []string{"system:bootstrappers", group, "system:authenticated"}
	nodes := []string{NodesGroup, "system:authenticated"}
	signer := certificatesv1.KubeAPIServerClientKubeletSignerName
	tests := []struct {
		name    string
		key     crypto.Signer
		user    string
		groups  []string
		usages  []certificatesv1.KeyUsage
		subject pkix.Name
		sans    []net.IP
		manual  bool
		want    Verdict
		reason  string
	}{
		{"first bootstrap with a Carousel token", ec, "system:bootstrap:abcdef", bootstrap, clientUsages, nodeSubject, nil, false, Approve, ReasonApproved},
		{"renewal by the node itself", ec, "system:node:worker-1", nodes, clientUsages, nodeSubject, nil, false, Approve, ReasonApproved},
		{"RSA with key encipherment", rsaKey, "system:node:worker-1", nodes,
			append(clientUsages, certificatesv1.UsageKeyEncipherment), nodeSubject, nil, false, Approve, ReasonApproved},
		{"someone else's bootstrap token", ec, "system:bootstrap:zzzzzz", bootstrap, clientUsages, nodeSubject, nil, false, Ignore, "ForeignBootstrapToken"},
		{"a Carousel token ID without Carousel's group", ec, "system:bootstrap:abcdef", []string{"system:bootstrappers"}, clientUsages, nodeSubject, nil, false, Ignore, ReasonOtherBootstrapToken},
		{"an ordinary user", ec, "alice", []string{"system:authenticated"}, clientUsages, nodeSubject, nil, false, Ignore, "OtherRequester"},
		{"another node's identity", ec, "system:node:worker-2", nodes, clientUsages, nodeSubject, nil, false, Deny, ReasonIdentityMismatch},
		{"manual approval", ec, "system:bootstrap:abcdef", bootstrap, clientUsages, nodeSubject, nil, true, Ignore, "ManualApproval"},
		{"manual approval leaves bad requests to the administrator too", ec, "system:bootstrap:abcdef", bootstrap, clientUsages,
			pkix.Name{CommonName: "worker-1"}, nil, true, Ignore, "ManualApproval"},
		{"wrong organization", ec, "system:bootstrap:abcdef", bootstrap, clientUsages,
			pkix.Name{CommonName: "system:node:worker-1", Organization: []string{"system:masters"}}, nil, false, Deny, ReasonBadSubject},
		{"two organizations", ec, "system:bootstrap:abcdef", bootstrap, clientUsages,
			pkix.Name{CommonName: "system:node:worker-1", Organization: []string{NodesGroup, "system:masters"}}, nil, false, Deny, ReasonBadSubject},
		{"common name without the node prefix", ec, "system:bootstrap:abcdef", bootstrap, clientUsages,
			pkix.Name{CommonName: "worker-1", Organization: []string{NodesGroup}}, nil, false, Deny, ReasonBadSubject},
		{"empty node name", ec, "system:bootstrap:abcdef", bootstrap, clientUsages,
			pkix.Name{CommonName: "system:node:", Organization: []string{NodesGroup}}, nil, false, Deny, ReasonBadSubject},
		{"IP SAN", ec, "system:bootstrap:abcdef", bootstrap, clientUsages, nodeSubject, []net.IP{net.ParseIP("10.0.0.7")}, false, Deny, ReasonUnexpectedSANs},
		{"server auth usage", ec, "system:bootstrap:abcdef", bootstrap,
			append(clientUsages, certificatesv1.UsageServerAuth), nodeSubject, nil, false, Deny, ReasonBadUsages},
		{"no client auth", ec, "system:bootstrap:abcdef", bootstrap,
			[]certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature}, nodeSubject, nil, false, Deny, ReasonBadUsages},
		{"client auth without digital signature", ec, "system:bootstrap:abcdef", bootstrap,
			[]certificatesv1.KeyUsage{certificatesv1.UsageClientAuth}, nodeSubject, nil, false, Deny, ReasonBadUsages},
		{"RSA with key encipherment and no digital signature", rsaKey, "system:node:worker-1", nodes,
			[]certificatesv1.KeyUsage{certificatesv1.UsageKeyEncipherment, certificatesv1.UsageClientAuth}, nodeSubject, nil, false, Deny, ReasonBadUsages},
		{"key encipherment on an ECDSA key", ec, "system:bootstrap:abcdef", bootstrap,
			append(clientUsages, certificatesv1.UsageKeyEncipherment), nodeSubject, nil, false, Deny, ReasonBadUsages},
		{"P-224 key", p224, "system:bootstrap:abcdef", bootstrap, clientUsages, nodeSubject, nil, false, Deny, ReasonUnsupportedKey},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := policy
			p.AutoApproveClient = !tt.manual
			req := request(t, tt.key, signer, tt.user, tt.groups, tt.usages, x509.CertificateRequest{Subject: tt.subject, IPAddresses: tt.sans})
			got := Decide(req, p)
			if got.Verdict != tt.want || got.Reason != tt.reason {
				t.Fatalf("Decide = %+v, want %s/%s", got, tt.want, tt.reason)
			}
		})
	}
}

func TestDecideMalformedAndForeign(t *testing.T) {
	req := &certificatesv1.CertificateSigningRequest{Spec: certificatesv1.CertificateSigningRequestSpec{
		SignerName: certificatesv1.KubeAPIServerClientKubeletSignerName, Request: []byte("garbage"),
	}}
	if got := Decide(req, policy); got.Verdict != Deny || got.Reason != ReasonBadRequest {
		t.Fatalf("garbage request: %+v", got)
	}
	req.Spec.SignerName = "example.com/other"
	if got := Decide(req, policy); got.Verdict != Ignore {
		t.Fatalf("another signer: %+v", got)
	}
}

func TestDecideServing(t *testing.T) {
	ec := key(t, pki.ECDSAP256)
	nodes := []string{NodesGroup}
	signer := certificatesv1.KubeletServingSignerName
	tests := []struct {
		name   string
		user   string
		dns    []string
		ips    []net.IP
		optIn  bool
		want   Verdict
		reason string
	}{
		{"every SAN an address of the node", "system:node:worker-1", []string{"worker-1.example"}, []net.IP{net.ParseIP("10.0.0.7")}, true, Approve, ReasonApproved},
		{"not opted in", "system:node:worker-1", []string{"worker-1.example"}, nil, false, Ignore, "ManualApproval"},
		{"a SAN the node does not have", "system:node:worker-1", []string{"evil.example"}, nil, true, Deny, ReasonUnexpectedSANs},
		{"an IP the node does not have", "system:node:worker-1", nil, []net.IP{net.ParseIP("10.0.0.8")}, true, Deny, ReasonUnexpectedSANs},
		{"no SANs", "system:node:worker-1", nil, nil, true, Deny, ReasonUnexpectedSANs},
		{"a wildcard its Node reports", "system:node:worker-1", []string{"*.nodes.example"}, nil, true, Deny, ReasonUnexpectedSANs},
		{"an IP address as a DNS SAN", "system:node:worker-1", []string{"10.0.0.7"}, nil, true, Deny, ReasonUnexpectedSANs},
		{"requested by another node", "system:node:worker-2", []string{"worker-1.example"}, nil, true, Deny, ReasonIdentityMismatch},
		{"requested by an ordinary user", "alice", []string{"worker-1.example"}, nil, true, Ignore, "OtherRequester"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := policy
			p.AutoApproveServing = tt.optIn
			groups := nodes
			if !strings.HasPrefix(tt.user, NodeUserPrefix) {
				groups = []string{"system:authenticated"}
			}
			req := request(t, ec, signer, tt.user, groups, servingUsages, x509.CertificateRequest{Subject: nodeSubject, DNSNames: tt.dns, IPAddresses: tt.ips})
			if got := Decide(req, p); got.Verdict != tt.want || got.Reason != tt.reason {
				t.Fatalf("Decide = %+v, want %s/%s", got, tt.want, tt.reason)
			}
		})
	}
	// An IPv6 address the Node reports written out in full is the one a CSR
	// writes short.
	p := policy
	p.AutoApproveServing = true
	p.Node = func(node string) (NodeInfo, bool) {
		return NodeInfo{UID: "uid-1", Addresses: []string{"fd00:0:0:0:0:0:0:1", "worker-1.example"}}, node == "worker-1"
	}
	req := request(t, ec, signer, "system:node:worker-1", nodes, servingUsages, x509.CertificateRequest{Subject: nodeSubject,
		DNSNames: []string{"worker-1.example"}, IPAddresses: []net.IP{net.ParseIP("fd00::1")}})
	if got := Decide(req, p); got.Verdict != Approve {
		t.Errorf("an IPv6 address written another way: %+v, want it approved", got)
	}
	req = request(t, ec, signer, "system:node:worker-9", nodes, servingUsages, x509.CertificateRequest{
		Subject: pkix.Name{CommonName: "system:node:worker-9", Organization: []string{NodesGroup}}, DNSNames: []string{"w9"}})
	if got := Decide(req, policy); got.Verdict != Ignore || got.Reason != "UnknownNode" {
		t.Fatalf("unregistered node: %+v", got)
	}
}

// TestApproved: a request is approved with the Approved condition and
// neither Denied nor a Failed that counts (True, or without a status; the
// API server lets Failed be False or Unknown).
func TestApproved(t *testing.T) {
	c := func(typ certificatesv1.RequestConditionType, status corev1.ConditionStatus) certificatesv1.CertificateSigningRequestCondition {
		return certificatesv1.CertificateSigningRequestCondition{Type: typ, Status: status}
	}
	approved := c(certificatesv1.CertificateApproved, corev1.ConditionTrue)
	for _, tt := range []struct {
		name       string
		conditions []certificatesv1.CertificateSigningRequestCondition
		want       bool
	}{
		{"pending", nil, false},
		{"approved", []certificatesv1.CertificateSigningRequestCondition{approved}, true},
		{"approved, then denied", []certificatesv1.CertificateSigningRequestCondition{approved, c(certificatesv1.CertificateDenied, corev1.ConditionTrue)}, false},
		{"approved and failed", []certificatesv1.CertificateSigningRequestCondition{approved, c(certificatesv1.CertificateFailed, corev1.ConditionTrue)}, false},
		{"approved and failed, without a status", []certificatesv1.CertificateSigningRequestCondition{approved, c(certificatesv1.CertificateFailed, "")}, false},
		{"approved, Failed False", []certificatesv1.CertificateSigningRequestCondition{approved, c(certificatesv1.CertificateFailed, corev1.ConditionFalse)}, true},
		{"approved, Failed Unknown", []certificatesv1.CertificateSigningRequestCondition{approved, c(certificatesv1.CertificateFailed, corev1.ConditionUnknown)}, true},
		{"only Failed False", []certificatesv1.CertificateSigningRequestCondition{c(certificatesv1.CertificateFailed, corev1.ConditionFalse)}, false},
	} {
		req := &certificatesv1.CertificateSigningRequest{Status: certificatesv1.CertificateSigningRequestStatus{Conditions: tt.conditions}}
		if got := Approved(req); got != tt.want {
			t.Errorf("%s: Approved = %t, want %t", tt.name, got, tt.want)
		}
	}
}

func TestSign(t *testing.T) {
	now := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	ca, err := pki.NewCA(pki.CATemplate{CommonName: "client-ca", Validity: 48 * time.Hour}, key(t, pki.ECDSAP256), now)
	if err != nil {
		t.Fatal(err)
	}
	req := request(t, key(t, pki.ECDSAP256), certificatesv1.KubeAPIServerClientKubeletSignerName, "system:node:worker-1", nil, clientUsages,
		x509.CertificateRequest{Subject: nodeSubject})
	if _, err := Sign(req, ca, 24*time.Hour, now); err == nil {
		t.Fatal("signed a request that is not approved")
	}
	req.Status.Conditions = []certificatesv1.CertificateSigningRequestCondition{{Type: certificatesv1.CertificateApproved}}
	tests := []struct {
		name      string
		requested *int32
		max       time.Duration
		want      time.Duration
	}{
		{"no request: the maximum", nil, 24 * time.Hour, 24 * time.Hour},
		{"a shorter request is honoured", ptr.To[int32](3600), 24 * time.Hour, time.Hour},
		{"a longer request is capped", ptr.To[int32](7 * 24 * 3600), 24 * time.Hour, 24 * time.Hour},
		{"never past the CA", nil, 100 * time.Hour, 48 * time.Hour},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req.Spec.ExpirationSeconds = tt.requested
			out, err := Sign(req, ca, tt.max, now)
			if err != nil {
				t.Fatal(err)
			}
			certs, err := pki.ParseCertificates(out)
			if err != nil {
				t.Fatal(err)
			}
			cert := certs[0]
			if !cert.NotAfter.Equal(now.Add(tt.want)) || !cert.NotBefore.Equal(now.Add(-pki.Backdate)) {
				t.Fatalf("validity %s..%s, want until %s", cert.NotBefore, cert.NotAfter, now.Add(tt.want))
			}
			if cert.Subject.CommonName != "system:node:worker-1" || cert.Subject.Organization[0] != NodesGroup {
				t.Fatalf("subject %s", cert.Subject)
			}
			if err := pki.Verify(cert, pki.NewBundle(ca.Cert), x509.ExtKeyUsageClientAuth, now); err != nil {
				t.Fatal(err)
			}
		})
	}
	masters := request(t, key(t, pki.ECDSAP256), certificatesv1.KubeAPIServerClientKubeletSignerName, "alice", nil, clientUsages,
		x509.CertificateRequest{Subject: pkix.Name{CommonName: "system:node:worker-1", Organization: []string{"system:masters"}}})
	masters.Status.Conditions = req.Status.Conditions
	var refused *RefusedError
	if _, err := Sign(masters, ca, time.Hour, now); !errors.As(err, &refused) || refused.Reason != ReasonBadSubject {
		t.Fatalf("signing a kubelet client certificate for system:masters because someone approved it: %v, want a refusal", err)
	}
	clientAuthOnly := request(t, key(t, pki.ECDSAP256), certificatesv1.KubeAPIServerClientKubeletSignerName, "alice", nil,
		[]certificatesv1.KeyUsage{certificatesv1.UsageClientAuth}, x509.CertificateRequest{Subject: nodeSubject})
	clientAuthOnly.Status.Conditions = req.Status.Conditions
	if _, err := Sign(clientAuthOnly, ca, time.Hour, now); !errors.As(err, &refused) || refused.Reason != ReasonBadUsages {
		t.Fatalf("signing a request without digital signature because someone approved it: %v, want a refusal", err)
	}
	if _, err := Sign(req, ca, time.Hour, now.Add(49*time.Hour)); err == nil || errors.As(err, &refused) {
		t.Fatalf("signing with an expired CA: %v, want an error that is not the request's", err)
	}
	req.Status.Conditions = append(req.Status.Conditions, certificatesv1.CertificateSigningRequestCondition{Type: certificatesv1.CertificateDenied})
	if Approved(req) {
		t.Fatal("a denied request counts as approved")
	}
}
