package csr

import (
	"crypto/x509"
	"errors"
	"net"
	"slices"
	"testing"

	certificatesv1 "k8s.io/api/certificates/v1"

	"github.com/carousel-dev/carousel/pkg/pki"
)

// TestServingAddresses is the table of the addresses a serving certificate
// may carry under each policy, and of when a pin is taken.
func TestServingAddresses(t *testing.T) {
	first := []string{"10.0.0.7", "worker-1"}
	later := []string{"10.0.0.7", "worker-1", "203.0.113.9"}
	node := func(uid string, addresses []string) NodeInfo { return NodeInfo{UID: uid, Addresses: addresses} }
	pin := func(name, uid string, addresses []string) *AddressPin {
		return &AddressPin{Node: name, UID: uid, Addresses: addresses}
	}
	tests := []struct {
		name        string
		node        NodeInfo
		firstSeen   bool
		pinned      *AddressPin
		wantAllowed []string
		wantRecord  *AddressPin
	}{
		{"NodeStatus: the addresses the Node reports now", node("u1", later), false, nil, later, nil},
		{"NodeStatus ignores a pin", node("u1", later), false, pin("worker-1", "u1", first), later, nil},
		{"FirstSeen, first evaluation: pin the current addresses", node("u1", first), true, nil, first, pin("worker-1", "u1", first)},
		{"FirstSeen, pinned: the pinned addresses, not the ones added since", node("u1", later), true, pin("worker-1", "u1", first), first, nil},
		// The address dropped may be another node's now: NodeStatus does
		// not approve it either.
		{"FirstSeen, pinned, an address dropped since: only the pinned ones it still has", node("u1", []string{"worker-1"}), true, pin("worker-1", "u1", first), []string{"worker-1"}, nil},
		{"FirstSeen, the Node was re-created (new UID): a fresh pin", node("u2", later), true, pin("worker-1", "u1", first), later, pin("worker-1", "u2", later)},
		{"FirstSeen, a pin recorded for another name: a fresh pin", node("u1", later), true, pin("worker-2", "u1", first), later, pin("worker-1", "u1", later)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			allowed, record := ServingAddresses("worker-1", tt.node, tt.firstSeen, tt.pinned)
			if !slices.Equal(allowed, tt.wantAllowed) {
				t.Fatalf("allowed %v, want %v", allowed, tt.wantAllowed)
			}
			if (record == nil) != (tt.wantRecord == nil) ||
				record != nil && (record.Node != tt.wantRecord.Node || record.UID != tt.wantRecord.UID || !slices.Equal(record.Addresses, tt.wantRecord.Addresses)) {
				t.Fatalf("record %+v, want %+v", record, tt.wantRecord)
			}
		})
	}
}

// TestDecideServingAddressPolicies: a node that added an address to its
// own Node after Carousel first saw it gets a serving certificate for it
// under NodeStatus, not under FirstSeen, and the first evaluation pins.
func TestDecideServingAddressPolicies(t *testing.T) {
	ec := key(t, pki.ECDSAP256)
	nodes := []string{NodesGroup}
	signer := certificatesv1.KubeletServingSignerName
	first := &AddressPin{Node: "worker-1", UID: "uid-1", Addresses: []string{"10.0.0.7", "worker-1.example"}}
	current := NodeInfo{UID: "uid-1", Addresses: []string{"10.0.0.7", "worker-1.example", "203.0.113.9"}}
	errRead := errors.New("etcdserver: request timed out")
	tests := []struct {
		name      string
		firstSeen bool
		pinned    *AddressPin
		pinErr    error
		node      NodeInfo
		ips       []string
		want      Verdict
		reason    string
		wantPin   bool
	}{
		{"NodeStatus, an address added since", false, first, nil, current, []string{"203.0.113.9"}, Approve, ReasonApproved, false},
		{"FirstSeen, an address added since", true, first, nil, current, []string{"203.0.113.9"}, Deny, ReasonUnexpectedSANs, false},
		{"FirstSeen, a pinned address", true, first, nil, current, []string{"10.0.0.7"}, Approve, ReasonApproved, false},
		{"FirstSeen, a pinned address however written", true, &AddressPin{Node: "worker-1", UID: "uid-1", Addresses: []string{"fd00::7"}},
			nil, NodeInfo{UID: "uid-1", Addresses: []string{"fd00:0:0:0:0:0:0:7"}}, []string{"fd00::7"}, Approve, ReasonApproved, false},
		{"FirstSeen, a pinned address the Node no longer has", true, first, nil, NodeInfo{UID: "uid-1", Addresses: []string{"10.0.0.9", "worker-1.example"}},
			[]string{"10.0.0.7"}, Deny, ReasonUnexpectedSANs, false},
		{"NodeStatus, an address the Node no longer has", false, first, nil, NodeInfo{UID: "uid-1", Addresses: []string{"10.0.0.9", "worker-1.example"}},
			[]string{"10.0.0.7"}, Deny, ReasonUnexpectedSANs, false},
		{"FirstSeen, not pinned yet: approve and pin", true, nil, nil, current, []string{"203.0.113.9"}, Approve, ReasonApproved, true},
		{"FirstSeen, not pinned yet, a SAN the Node does not have: deny and pin", true, nil, nil, current, []string{"198.51.100.1"}, Deny, ReasonUnexpectedSANs, true},
		{"FirstSeen, re-created Node: approve and pin again", true, first, nil, NodeInfo{UID: "uid-2", Addresses: current.Addresses}, []string{"203.0.113.9"}, Approve, ReasonApproved, true},
		{"FirstSeen, the pin cannot be read: wait", true, nil, errRead, current, []string{"10.0.0.7"}, Ignore, ReasonPinUnavailable, false},
		{"a Node without addresses yet: wait, pin nothing", true, nil, nil, NodeInfo{UID: "uid-1"}, []string{"10.0.0.7"}, Ignore, ReasonNodeWithoutAddresses, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := policy
			p.FirstSeenAddresses = tt.firstSeen
			p.Node = func(string) (NodeInfo, bool) { return tt.node, true }
			asked := false
			p.Pinned = func(node string) (*AddressPin, error) {
				asked = true
				if node != "worker-1" {
					t.Fatalf("asked for the pin of %q", node)
				}
				return tt.pinned, tt.pinErr
			}
			var ips []net.IP
			for _, ip := range tt.ips {
				ips = append(ips, net.ParseIP(ip))
			}
			req := request(t, ec, signer, "system:node:worker-1", nodes, servingUsages, x509.CertificateRequest{Subject: nodeSubject, IPAddresses: ips})
			got := Decide(req, p)
			if got.Verdict != tt.want || got.Reason != tt.reason {
				t.Fatalf("Decide = %+v, want %s/%s", got, tt.want, tt.reason)
			}
			if (got.Pin != nil) != tt.wantPin {
				t.Fatalf("pin %+v, want one: %v", got.Pin, tt.wantPin)
			}
			if got.Pin != nil && (got.Pin.Node != "worker-1" || got.Pin.UID != tt.node.UID || !slices.Equal(got.Pin.Addresses, tt.node.Addresses)) {
				t.Fatalf("pin %+v of node %+v", got.Pin, tt.node)
			}
			if asked != (tt.firstSeen && len(tt.node.Addresses) > 0) {
				t.Fatalf("asked for the pin: %v", asked)
			}
			if (got.Retry != RetryOnUpdate) != (got.Verdict == Ignore) {
				t.Fatalf("Retry = %s for %+v", got.Retry, got)
			}
		})
	}
	t.Run("server auth without digital signature", func(t *testing.T) {
		req := request(t, ec, signer, "system:node:worker-1", nodes, []certificatesv1.KeyUsage{certificatesv1.UsageServerAuth},
			x509.CertificateRequest{Subject: nodeSubject, DNSNames: []string{"worker-1.example"}})
		if got := Decide(req, policy); got.Verdict != Deny || got.Reason != ReasonBadUsages {
			t.Fatalf("Decide = %+v, want a denial for its usages", got)
		}
	})
	t.Run("manual serving approval pins nothing", func(t *testing.T) {
		p := policy
		p.AutoApproveServing, p.FirstSeenAddresses = false, true
		p.Pinned = func(string) (*AddressPin, error) { t.Fatal("asked for a pin"); return nil, nil }
		req := request(t, ec, signer, "system:node:worker-1", nodes, servingUsages, x509.CertificateRequest{Subject: nodeSubject, DNSNames: []string{"worker-1.example"}})
		if got := Decide(req, p); got.Verdict != Ignore || got.Pin != nil {
			t.Fatalf("Decide = %+v", got)
		}
	})
}
