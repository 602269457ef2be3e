package oldca

import (
	"crypto/sha256"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
)

var t0 = time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)

func at(minutes int) time.Time { return t0.Add(time.Duration(minutes) * time.Minute) }

func TestObserve(t *testing.T) {
	u := &Usage{}
	observe := func(now time.Time, seen ...Credential) (bool, []Credential) { return u.Observe(seen, now, Resolution) }
	if changed, _ := observe(at(1), Credential{User: "b", Fingerprint: "02", FirstSeen: at(0), LastSeen: at(0)},
		Credential{User: "a", Fingerprint: "01", FirstSeen: at(0), LastSeen: at(1)}); !changed {
		t.Fatal("new credentials did not change the record")
	}
	if got := []string{u.Credentials[0].User, u.Credentials[1].User}; !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("record not sorted by user: %v", got)
	}
	soon := Credential{User: "a", Fingerprint: "01", FirstSeen: at(1), LastSeen: at(1).Add(59 * time.Second)}
	if changed, deferred := observe(at(2), soon); changed || len(deferred) != 1 || !u.Credentials[0].LastSeen.Equal(at(1)) {
		t.Fatalf("a credential seen again within the resolution: changed %v, deferred %+v, record %+v; want it deferred", changed, deferred, u.Credentials[0])
	}
	if changed, deferred := u.Observe([]Credential{soon}, at(2), 0); !changed || deferred != nil || !u.Credentials[0].LastSeen.Equal(soon.LastSeen) {
		t.Fatalf("the deferred sighting, written later, did not advance lastSeen: %+v", u.Credentials[0])
	}
	if changed, _ := observe(at(3), Credential{User: "a", Fingerprint: "01", FirstSeen: at(3), LastSeen: at(3)}); !changed || !u.Credentials[0].LastSeen.Equal(at(3)) {
		t.Fatalf("a credential seen a minute later did not advance lastSeen: %+v", u.Credentials[0])
	}
	// A change writes the small advances of the same batch too.
	if changed, deferred := observe(at(3), Credential{User: "a", Fingerprint: "01", FirstSeen: at(3), LastSeen: at(3).Add(time.Second)},
		Credential{User: "c", Fingerprint: "03", FirstSeen: at(3), LastSeen: at(3)}); !changed || deferred != nil || !u.Credentials[0].LastSeen.Equal(at(3).Add(time.Second)) {
		t.Fatalf("a batch with a new credential left a small advance out: %v %+v %+v", changed, deferred, u.Credentials[0])
	}
	// However far back a sighting moves a recorded credential's first
	// sighting (the sender's to choose), it waits for the write a
	// resolution later.
	earlier := Credential{User: "b", Fingerprint: "02", FirstSeen: at(-5), LastSeen: at(-5)}
	if changed, deferred := observe(at(4), earlier); changed || len(deferred) != 1 || !u.Credentials[1].FirstSeen.Equal(at(0)) {
		t.Fatalf("an earlier sighting (a late batch): changed %v, deferred %+v, record %+v; want it deferred", changed, deferred, u.Credentials[1])
	}
	if changed, _ := u.Observe([]Credential{earlier}, at(4), 0); !changed || !u.Credentials[1].FirstSeen.Equal(at(-5)) {
		t.Fatalf("an earlier sighting (a late batch), written later, did not move firstSeen back: %+v", u.Credentials[1])
	}
	if changed, _ := observe(at(4).Add(Retention)); !changed || len(u.Credentials) != 0 {
		t.Fatalf("credentials not seen for the retention were kept: %+v", u.Credentials)
	}
	observe(at(3), Credential{User: "a", Fingerprint: "01", FirstSeen: at(3), LastSeen: at(3)})
	// Times later than now, recorded by a clock ahead, are taken as now.
	ahead := &Usage{Credentials: []Credential{{User: "a", Fingerprint: "01", FirstSeen: at(60), LastSeen: at(90)}}}
	if changed, _ := ahead.Observe(nil, at(3), Resolution); !changed || !ahead.Credentials[0].FirstSeen.Equal(at(3)) || !ahead.Credentials[0].LastSeen.Equal(at(3)) {
		t.Fatalf("a record with times ahead of now: changed %v, %+v; want both times now", changed, ahead.Credentials[0])
	}
	back, err := Parse(u.String())
	if err != nil || back.String() != u.String() {
		t.Fatalf("the record does not survive storage: %v, %s", err, back)
	}
	if _, err := Parse("{"); err == nil {
		t.Fatal("a corrupt record parsed")
	}
}

func TestDependents(t *testing.T) {
	const newCA, oldCA = "aaaaaaaaaaaaaaaaaaaa", "bbbbbbbbbbbbbbbbbbbb"
	base := Facts{
		Started: at(0), Prepared: at(60), WindowStart: at(-60), NewClientIssuer: newCA, OldClientIssuer: oldCA,
		Certificates: []Certificate{
			{Secret: "prod-kcm", User: "system:kube-controller-manager", Fingerprint: "kcm1", FromNewCA: true},
			{Secret: "prod-operator", User: "carousel:operator", Fingerprint: "op1", FromNewCA: true},
		},
	}
	seen := func(user, fp string, first, last int) Credential {
		return Credential{User: user, Fingerprint: fp, FirstSeen: at(first), LastSeen: at(last)}
	}
	tests := []struct {
		name  string
		facts func(f *Facts)
		want  []string // kind/name: message fragment
	}{
		{name: "every client on the new CAs, no audit", facts: func(*Facts) {}},
		{name: "the Nodes could not be read", facts: func(f *Facts) { f.NodesUnreadable = true },
			want: []string{"Cluster/nodes: could not read the managed cluster's Nodes"}},
		{name: "a node reports the old client CA; one reports none; one the new", facts: func(f *Facts) {
			f.Nodes = []Node{{Name: "w2", ClientIssuer: oldCA}, {Name: "w1", ClientIssuer: ""}, {Name: "w0", ClientIssuer: newCA}}
		}, want: []string{"Node/w2: from CA bbbbbbbbbbbbbbbb, not from the new client CA aaaaaaaaaaaaaaaa"}},
		{name: "the Nodes could not be read: the last verdict on them stands", facts: func(f *Facts) {
			f.KeptNodes = []Dependent{{Kind: v1alpha1.OldCADependentNode, Name: "w2", Message: "kept"}}
			f.Usage = &Usage{Credentials: []Credential{seen("system:node:w2", "n0", -10, 70), seen("system:node:w3", "n1", -10, 70)}}
		}, want: []string{"Node/w2: kept", "User/system:node:w3: before the rotation started"}},
		{name: "a node no worker rollout moved, on the new client CA or without a node agent, unless it is offline with a node agent", facts: func(f *Facts) {
			f.Nodes = []Node{{Name: "w1", ClientIssuer: newCA, Unrolled: `its carousel.dev/pool label, "typo", names no worker pool of the Cluster`},
				{Name: "w2", Unrolled: "it has no carousel.dev/pool label"}, {Name: "w3", Unrolled: "it has no carousel.dev/pool label", Offline: true},
				{Name: "w4", ClientIssuer: newCA}, {Name: "w5", ClientIssuer: newCA, Unrolled: "it has no carousel.dev/pool label", Offline: true},
				{Name: "w6", InPlace: true, Unrolled: `its carousel.dev/pool label, "a", names a pool that was not rolled`, Offline: true}, // its agent has not reported yet
				{Name: "w7", Agent: true, Unrolled: "it has no carousel.dev/pool label", Offline: true}}                                    // its agent marked the Node, and has not reported
		}, want: []string{"Node/w1: its carousel.dev/pool label, \"typo\", names no worker pool of the Cluster, so no worker rollout moved its kubelet's trust",
			"Node/w2: it has no carousel.dev/pool label, so no worker rollout",
			"Node/w3: it has no carousel.dev/pool label, so no worker rollout moved its kubelet's trust to the new cluster CA: completing the rotation would lock the kubelet out of the API server. Decommission the node (stop its kubelet, then delete the Node), or complete with force once its kubelet trusts the new cluster CA; a node in a worker pool by the next rotation's start rolls with it; it is offline, and without a node agent"}},
		{name: "a node no worker rollout moved on the old client CA: the client certificate is named first", facts: func(f *Facts) {
			f.Nodes = []Node{{Name: "w1", ClientIssuer: oldCA, Unrolled: "it has no carousel.dev/pool label"}}
		}, want: []string{"Node/w1: from CA bbbbbbbbbbbbbbbb, not from the new client CA"}},
		{name: "an offline node is not counted: its node agent bootstraps again when it is back", facts: func(f *Facts) {
			f.Nodes = []Node{{Name: "w3", ClientIssuer: oldCA, Offline: true}}
		}},
		{name: "a certificate Secret not signed by the new client CA", facts: func(f *Facts) {
			f.Certificates = append(f.Certificates, Certificate{Secret: "prod-scheduler", User: "system:kube-scheduler", Fingerprint: "s0"})
		}, want: []string{"Secret/prod-scheduler: of system:kube-scheduler that the new client CA did not sign"}},
		{name: "audit: the current certificates, used after Prepared", facts: func(f *Facts) {
			f.Usage = &Usage{Credentials: []Credential{seen("carousel:operator", "op1", 10, 90), seen("system:kube-controller-manager", "kcm1", 10, 90)}}
		}},
		{name: "audit: a certificate Secret's user with a stale certificate", facts: func(f *Facts) {
			f.Usage = &Usage{Credentials: []Credential{seen("system:kube-controller-manager", "kcm0", 5, 61), seen("system:kube-controller-manager", "kcm1", 10, 90)}}
		}, want: []string{"User/system:kube-controller-manager: not the one from the new client CA in Secret prod-kcm"}},
		{name: "audit: uses before Prepared of users the rotation moves, and any before the window, do not count", facts: func(f *Facts) {
			f.Usage = &Usage{Credentials: []Credential{seen("system:kube-controller-manager", "kcm0", -100, 59), seen("alice", "x", -100, -61),
				seen("system:node:w5", "n0", -100, 59), seen("carousel:admin:bob", "k0", -100, 59)}}
		}},
		{name: "audit: a user nothing moves, seen before Prepared within the window", facts: func(f *Facts) {
			f.Usage = &Usage{Credentials: []Credential{seen("alice", "x", -100, 59), seen("ci-robot", "r1", 10, 30)}}
		}, want: []string{"User/alice: before the rotation started", "User/ci-robot: Carousel issues this user none"}},
		{name: "audit: a certificate in use before the rotation started", facts: func(f *Facts) {
			f.Usage = &Usage{Credentials: []Credential{seen("carousel:admin:bob", "k0", -30, 70), seen("system:node:w5", "n0", -1, 65)}}
		}, want: []string{"User/carousel:admin:bob: in use before the rotation started", "User/system:node:w5: in use before the rotation started"}},
		{name: "audit: a certificate first used in the second of the start, which lastInitiationTime truncates", facts: func(f *Facts) {
			f.Usage = &Usage{Credentials: []Credential{{User: "carousel:admin:bob", Fingerprint: "k0", FirstSeen: at(0).Add(900 * time.Millisecond), LastSeen: at(70)}}}
		}, want: []string{"User/carousel:admin:bob: in use before the rotation started"}},
		{name: "audit: a certificate from the new client CA that a managed API server's clock behind saw before the start", facts: func(f *Facts) {
			f.Usage = &Usage{Credentials: []Credential{seen("system:kube-controller-manager", "kcm1", -5, 90)}}
		}},
		{name: "audit: kubelets and kubeconfigs first seen after the start cannot be judged by name", facts: func(f *Facts) {
			f.Usage = &Usage{Credentials: []Credential{seen("carousel:admin:bob", "k1", 30, 70), seen("system:node:w5", "n1", 20, 65)}}
		}},
		{name: "audit: a user Carousel issues nothing to", facts: func(f *Facts) {
			f.Usage = &Usage{Credentials: []Credential{seen("ci-robot", "c1", 30, 61), seen("ci-robot", "c2", 40, 80)}}
		}, want: []string{"User/ci-robot: Carousel issues this user none from the new client CA"}},
		{name: "audit: a node listed as a Node is not listed again as a user", facts: func(f *Facts) {
			f.Nodes = []Node{{Name: "w2", ClientIssuer: oldCA}}
			f.Usage = &Usage{Credentials: []Credential{seen("system:node:w2", "n0", -10, 70)}}
		}, want: []string{"Node/w2: not from the new client CA"}},
		{name: "audit: the first minute after Prepared is still being collected", facts: func(f *Facts) {
			f.Usage, f.Now, f.CollectingUntil = &Usage{}, at(61), at(62)
		}, want: []string{"Cluster/audit: still being collected, until 2026-11-26T13:02:00Z"}},
		{name: "audit: collected", facts: func(f *Facts) {
			f.Usage, f.Now, f.CollectingUntil = &Usage{Credentials: []Credential{seen("carousel:operator", "op1", 10, 61)}}, at(62), at(62)
		}},
		{name: "audit: silent for too long", facts: func(f *Facts) {
			f.Usage, f.Now, f.CollectingUntil = &Usage{Credentials: []Credential{seen("carousel:operator", "op1", 10, 61)}}, at(61).Add(Silence+time.Second), at(62)
		}, want: []string{"Cluster/audit: the last audit event Carousel recorded from the API server is from 2026-11-26T13:01:00Z"}},
		{name: "audit: a use recorded by a clock ahead does not keep the record fresh", facts: func(f *Facts) {
			f.Usage = &Usage{Credentials: []Credential{seen("carousel:operator", "op1", 10, 61), seen("carousel:operator", "op2", 10, 600)}}
			f.Now, f.CollectingUntil = at(61).Add(Silence+time.Second), at(62)
		}, want: []string{"Cluster/audit: the last audit event Carousel recorded from the API server is from 2026-11-26T13:01:00Z",
			"User/carousel:operator: not the one from the new client CA"}},
		{name: "usage record: it left sightings out until the retention before the start", facts: func(f *Facts) {
			left := at(0).Add(-Retention)
			f.Usage = &Usage{Credentials: []Credential{seen("carousel:operator", "op1", 10, 90)}, Unrecorded: &left}
		}, want: []string{"Cluster/client-certificate-usage: left some out (it had no room for them, was started over, or a batch of them was refused), the last by 2026-11-25T11:00:00Z, within 25 hours of the rotation's start"}},
		{name: "usage record: it left sightings out after the start", facts: func(f *Facts) {
			left := at(80)
			f.Usage = &Usage{Credentials: []Credential{seen("carousel:operator", "op1", 10, 90)}, Unrecorded: &left}
		}, want: []string{"Cluster/client-certificate-usage: the last by 2026-11-26T13:20:00Z"}},
		{name: "usage record: it left sightings out only longer than the retention before the start", facts: func(f *Facts) {
			left := at(0).Add(-Retention - time.Second)
			f.Usage = &Usage{Credentials: []Credential{seen("carousel:operator", "op1", 10, 90)}, Unrecorded: &left}
		}},
		{name: "usage record: deleted since the start, not created again", facts: func(f *Facts) { f.UsageLost = true },
			want: []string{"Cluster/client-certificate-usage: as it was when the rotation started, was deleted since"}},
		{name: "usage record: created again since the start, and what it holds is still judged", facts: func(f *Facts) {
			left := at(80)
			f.UsageLost = true
			f.Usage = &Usage{Credentials: []Credential{seen("ci-robot", "c1", 85, 90), seen("carousel:admin:bob", "k0", 85, 90)}, Unrecorded: &left}
		}, want: []string{"Cluster/client-certificate-usage: as it was when the rotation started, was deleted since", "User/ci-robot: "}},
		{name: "kubeconfigs: one from the old client CA, unexpired, the user not moved", facts: func(f *Facts) {
			f.Now = at(70)
			f.Kubeconfigs = &Kubeconfigs{Issued: []IssuedCertificate{
				{User: "carousel:admin:alice", Fingerprint: "k0", Issuer: oldCA, IssuedAt: at(-30), NotAfter: at(600)},
				{User: "carousel:admin:bob", Fingerprint: "k1", Issuer: oldCA, IssuedAt: at(-30), NotAfter: at(600)},
				{User: "carousel:admin:bob", Fingerprint: "k2", Issuer: newCA, IssuedAt: at(65), NotAfter: at(600)},
			}}
		}, want: []string{"Kubeconfig/carousel:admin:alice: from client CA bbbbbbbbbbbbbbbb"}},
		{name: "kubeconfigs: the record does not parse", facts: func(f *Facts) { f.KubeconfigsUnreadable = true },
			want: []string{"Cluster/kubeconfigs: repair it, or complete with force once every user of kubectl carousel kubeconfig has taken a new one; do not delete it"}},
		{name: "audit: the record adds what the time of first use cannot tell, and never clears what it does", facts: func(f *Facts) {
			f.Now = at(90)
			f.Kubeconfigs = &Kubeconfigs{Issued: []IssuedCertificate{
				{User: "carousel:admin:bob", Fingerprint: "k1", Issuer: oldCA, IssuedAt: at(30), NotAfter: at(600)},
				{User: "carousel:admin:bob", Fingerprint: "k2", Issuer: newCA, IssuedAt: at(65), NotAfter: at(600)},
				{User: "carousel:admin:carol", Fingerprint: "k3", Issuer: oldCA, IssuedAt: at(30), NotAfter: at(80)},
				{User: "carousel:admin:dan", Fingerprint: "k4", Issuer: newCA, IssuedAt: at(-100), NotAfter: at(600)},
				{User: "carousel:admin:erin", Fingerprint: "k5", Issuer: oldCA, IssuedAt: at(30), NotAfter: at(600)},
			}}
			// bob moved, but his old kubeconfig is still in use; carol's expired; dan's was in use before the start,
			// whatever a hand-edited record says; the entry of erin's fingerprint names another user, which the record
			// cannot vouch for.
			f.Usage = &Usage{Credentials: []Credential{seen("carousel:admin:bob", "k1", 31, 85), seen("carousel:admin:bob", "k2", 66, 86),
				seen("carousel:admin:carol", "k3", 31, 75), seen("carousel:admin:dan", "k4", -90, 85), seen("carousel:admin:frank", "k5", 31, 85)}}
		}, want: []string{"Kubeconfig/carousel:admin:erin: ",
			"User/carousel:admin:bob: a kubeconfig (X509SHA256=k1) that kubectl carousel kubeconfig issued 2026-11-26T12:30:00Z from client CA bbbbbbbbbbbbbbbb",
			"User/carousel:admin:dan: in use before the rotation started"}},
		{name: "audit: a user listed for its kubeconfig is not listed again", facts: func(f *Facts) {
			f.Now = at(86)
			f.Kubeconfigs = &Kubeconfigs{Issued: []IssuedCertificate{{User: "carousel:admin:alice", Fingerprint: "k0", Issuer: oldCA, IssuedAt: at(-30), NotAfter: at(600)}}}
			f.Usage = &Usage{Credentials: []Credential{seen("carousel:admin:alice", "k0", -29, 85)}}
		}, want: []string{"Kubeconfig/carousel:admin:alice: "}},
		{name: "everything at once, in order", facts: func(f *Facts) {
			f.NodesUnreadable = true
			f.Nodes = []Node{{Name: "w2", ClientIssuer: oldCA}}
			f.Certificates = append(f.Certificates, Certificate{Secret: "prod-scheduler", User: "system:kube-scheduler", Fingerprint: "s0"})
			f.Kubeconfigs = &Kubeconfigs{Issued: []IssuedCertificate{{User: "carousel:admin:alice", Fingerprint: "k0", Issuer: oldCA, IssuedAt: at(-30), NotAfter: at(600)}}}
			f.Usage = &Usage{Credentials: []Credential{seen("zed", "z", 30, 61), seen("alice", "a", 30, 61)}}
		}, want: []string{"Cluster/nodes: ", "Node/w2: ", "Secret/prod-scheduler: ", "Kubeconfig/carousel:admin:alice: ", "User/alice: ", "User/zed: "}},
		{name: "kubelets without a node agent: judged by the last certificate Carousel signed them", facts: func(f *Facts) {
			f.Now = at(70)
			f.Nodes = []Node{{Name: "w0"}, {Name: "w1"}, {Name: "w2"}, {Name: "w3"}, {Name: "w4", Offline: true}, {Name: "w5", ClientIssuer: newCA},
				{Name: "w6", InPlace: true, Offline: true}, // an InPlace pool's: its agent bootstraps again when it is back
				{Name: "w7", Agent: true, Offline: true},   // a node agent marked it: the same
				{Name: "w8", Agent: true}}                  // online, its agent has not reported: judged by the record
			f.KubeletCertificates = &KubeletCertificates{Signed: []IssuedCertificate{
				{User: "system:node:w0", Fingerprint: "n0", Issuer: oldCA, IssuedAt: at(-30), NotAfter: at(600)},
				{User: "system:node:w1", Fingerprint: "n1", Issuer: oldCA, IssuedAt: at(-30), NotAfter: at(600)},
				{User: "system:node:w1", Fingerprint: "n2", Issuer: newCA, IssuedAt: at(20), NotAfter: at(600)}, // moved
				{User: "system:node:w2", Fingerprint: "n3", Issuer: oldCA, IssuedAt: at(-30), NotAfter: at(60)}, // expired
				{User: "system:node:w4", Fingerprint: "n4", Issuer: oldCA, IssuedAt: at(-30), NotAfter: at(600)},
				{User: "system:node:w5", Fingerprint: "n5", Issuer: oldCA, IssuedAt: at(-30), NotAfter: at(600)},   // its agent says otherwise
				{User: "system:node:gone", Fingerprint: "n6", Issuer: oldCA, IssuedAt: at(-30), NotAfter: at(600)}, // no Node
				{User: "system:node:w6", Fingerprint: "n7", Issuer: oldCA, IssuedAt: at(-30), NotAfter: at(600)},
				{User: "system:node:w7", Fingerprint: "n8", Issuer: oldCA, IssuedAt: at(-30), NotAfter: at(600)},
				{User: "system:node:w8", Fingerprint: "n9", Issuer: oldCA, IssuedAt: at(-30), NotAfter: at(600)},
			}}
		}, want: []string{"Node/w0: the last one Carousel signed it (X509SHA256=n0, 2026-11-26T11:30:00Z) is from client CA bbbbbbbbbbbbbbbb, valid until 2026-11-26T22:00:00Z",
			// Offline, and without a node agent that would bootstrap it again once it is back.
			"Node/w4: the last one Carousel signed it (X509SHA256=n4, 2026-11-26T11:30:00Z) is from client CA bbbbbbbbbbbbbbbb, valid until 2026-11-26T22:00:00Z; it is offline, and without a node agent",
			"Node/w8: the last one Carousel signed it (X509SHA256=n9, 2026-11-26T11:30:00Z) is from client CA bbbbbbbbbbbbbbbb, valid until 2026-11-26T22:00:00Z"}},
		{name: "audit: a kubelet still on a certificate the record says the old client CA signed", facts: func(f *Facts) {
			f.Now = at(70)
			f.Nodes = []Node{{Name: "w1", ClientIssuer: newCA}}
			f.KubeletCertificates = &KubeletCertificates{Signed: []IssuedCertificate{
				{User: "system:node:w1", Fingerprint: "n1", Issuer: oldCA, IssuedAt: at(20), NotAfter: at(600)},
				{User: "system:node:w1", Fingerprint: "n2", Issuer: newCA, IssuedAt: at(30), NotAfter: at(600)},
			}}
			f.Usage = &Usage{Credentials: []Credential{seen("system:node:w1", "n1", 20, 65), seen("system:node:w1", "n2", 30, 69)}}
		}, want: []string{"User/system:node:w1: a kubelet client certificate (X509SHA256=n1) that Carousel signed 2026-11-26T12:20:00Z from client CA bbbbbbbbbbbbbbbb"}},
		{name: "the record of kubelet certificates does not parse, and a node has no node agent", facts: func(f *Facts) {
			f.Nodes, f.KubeletCertificatesUnreadable = []Node{{Name: "w0"}, {Name: "w1", ClientIssuer: newCA}}, true
		}, want: []string{"Cluster/kubelet-certificates: does not parse"}},
		{name: "the record of kubelet certificates does not parse, and every node has a node agent", facts: func(f *Facts) {
			f.Nodes, f.KubeletCertificatesUnreadable = []Node{{Name: "w0", ClientIssuer: oldCA, Offline: true}, {Name: "w1", ClientIssuer: newCA}}, true
		}},
		{name: "the record of kubelet certificates does not parse, and an offline node has no node agent", facts: func(f *Facts) {
			f.Nodes, f.KubeletCertificatesUnreadable = []Node{{Name: "w0", Offline: true}, {Name: "w1", ClientIssuer: newCA}}, true
		}, want: []string{"Cluster/kubelet-certificates: does not parse"}},
		{name: "the record of kubelet certificates was lost since the start, and a node has no node agent", facts: func(f *Facts) {
			f.Nodes, f.KubeletCertificatesLost, f.KubeletCertificatesUnreadable = []Node{{Name: "w0"}}, true, true
		}, want: []string{"Cluster/kubelet-certificates: that the rotation judges by was deleted since"}},
		{name: "the record of kubelet certificates was lost since the start, and every node has a node agent", facts: func(f *Facts) {
			f.Nodes, f.KubeletCertificatesLost = []Node{{Name: "w0", ClientIssuer: oldCA, Offline: true}, {Name: "w1", ClientIssuer: newCA},
				{Name: "w2", InPlace: true, Offline: true}, {Name: "w3", Agent: true, Offline: true}}, true
		}},
		{name: "kubeconfigs: the record was lost since the start, and another one holds none from the old client CA", facts: func(f *Facts) {
			f.KubeconfigsLost, f.KubeconfigsUnreadable = true, true
			f.Kubeconfigs = &Kubeconfigs{Issued: []IssuedCertificate{{User: "carousel:admin:bob", Fingerprint: "k2", Issuer: newCA, IssuedAt: at(65), NotAfter: at(600)}}}
		}, want: []string{"Cluster/kubeconfigs: that the rotation judges by was deleted since, and what it held with it"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := base
			f.Certificates = slices.Clone(base.Certificates)
			tt.facts(&f)
			got := Dependents(f)
			if len(got) != len(tt.want) {
				t.Fatalf("got %d dependents, want %d: %+v", len(got), len(tt.want), got)
			}
			for i, w := range tt.want {
				id, fragment, _ := strings.Cut(w, ": ")
				if have := string(got[i].Kind) + "/" + got[i].Name; have != id || !strings.Contains(got[i].Message, fragment) {
					t.Errorf("dependent %d = %s: %q, want %s: …%s…", i, have, got[i].Message, id, fragment)
				}
				if (got[i].Kind == v1alpha1.OldCADependentUser) == got[i].LastSeen.IsZero() {
					t.Errorf("dependent %d: lastSeen %v, want it set for users only", i, got[i].LastSeen)
				}
			}
		})
	}
}

func TestUsageStaysWithinItsBound(t *testing.T) {
	kubelet := func(i int) Credential {
		sum := sha256.Sum256([]byte{byte(i), byte(i >> 8)})
		return Credential{User: fmt.Sprintf("system:node:ip-10-0-%d-%d.ec2.internal", i/256, i%256), Fingerprint: fmt.Sprintf("%x", sum),
			FirstSeen: at(0), LastSeen: at(0)}
	}
	var batch []Credential
	for i := range 5000 {
		batch = append(batch, kubelet(i))
	}
	u := &Usage{}
	if changed, _ := u.Observe(batch, at(0), Resolution); !changed {
		t.Fatal("a batch of new credentials did not change the record")
	}
	stored := len(u.String())
	if stored > MaxUsageBytes || stored < MaxUsageBytes*8/10 {
		t.Fatalf("the record holds %d bytes (%d credentials); want at most %d, and not a fifth less", stored, len(u.Credentials), MaxUsageBytes)
	}
	t.Logf("%d kubelet credentials in %d bytes", len(u.Credentials), stored)
	if u.Unrecorded == nil || !u.Unrecorded.Equal(at(0).Add(Resolution)) {
		t.Fatalf("unrecorded %v, want the last sighting left out, a resolution later: %v", u.Unrecorded, at(0).Add(Resolution))
	}
	recorded, left := u.Credentials[0], kubelet(4999)
	if _, found := slices.BinarySearchFunc(u.Credentials, left, compare); found {
		t.Fatalf("the last credential of the batch was recorded past the bound")
	}

	recorded.LastSeen, left.LastSeen = at(2), at(0).Add(30*time.Second)
	if changed, _ := u.Observe([]Credential{recorded, left}, at(2), 0); !changed || !u.Credentials[0].LastSeen.Equal(at(2)) {
		t.Fatalf("a full record did not take a later sighting of a credential it holds: %+v", u.Credentials[0])
	}
	if !u.Unrecorded.Equal(at(1)) {
		t.Fatalf("unrecorded %v after a sighting left out within the resolution of it, want it unchanged", u.Unrecorded)
	}
	left.LastSeen = at(3)
	if changed, _ := u.Observe([]Credential{left}, at(3), Resolution); !changed || !u.Unrecorded.Equal(at(4)) {
		t.Fatalf("a sighting left out a resolution later: changed %v, unrecorded %v; want it written, until %v", changed, u.Unrecorded, at(4))
	}
	future := left
	future.LastSeen = time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC)
	if changed, _ := u.Observe([]Credential{future}, at(3).Add(30*time.Second), Resolution); changed || !u.Unrecorded.Equal(at(4)) {
		t.Fatalf("a sighting left out with a lastSeen in the future moved unrecorded to %v; want it taken as seen by now, within the resolution of %v", u.Unrecorded, at(4))
	}

	fresh := kubelet(6000)
	fresh.FirstSeen, fresh.LastSeen = at(1).Add(Retention), at(1).Add(Retention)
	u.Observe([]Credential{fresh}, fresh.LastSeen, Resolution)
	if len(u.Credentials) != 2 || u.Credentials[1].User != fresh.User {
		t.Fatalf("record %+v: want the credentials that aged out gone, and their room taken by a new one", u.Credentials)
	}
	back, err := Parse(u.String())
	if err != nil || back.String() != u.String() || !back.Unrecorded.Equal(at(4)) {
		t.Fatalf("the record does not survive storage: %v, %s", err, back)
	}
}

func TestUsageCountsTheBytesOfAnyName(t *testing.T) {
	for _, tc := range []struct{ name, user string }{
		{"plain", "carousel:admin:alice"},
		{"escaped by encoding/json", `<a&b>"\` + "\x01"},
		{"multi-byte", "système:nœud:ü\u2028\u2029"},
		{"invalid UTF-8", "\xff\xfe\xc3"},
		{"as long as the receiver keeps", strings.Repeat("<", 248)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u := &Usage{}
			for i := 0; u.Unrecorded == nil; i += 100 {
				var batch []Credential
				for j := i; j < i+100; j++ {
					batch = append(batch, Credential{User: fmt.Sprintf("%s-%d", tc.user, j), Fingerprint: fmt.Sprint(j),
						FirstSeen: time.Date(2026, 1, 2, 3, 4, 5, 999999999, time.FixedZone("", -7*3600)), LastSeen: at(0)})
				}
				u.Observe(batch, at(0), 0)
			}
			if n := len(u.String()); n > MaxUsageBytes {
				t.Fatalf("the record holds %d bytes, more than %d", n, MaxUsageBytes)
			}
		})
	}
}

func TestAUserIsListedOnceWithItsLatestUse(t *testing.T) {
	f := Facts{Started: at(0), Prepared: at(60), Usage: &Usage{Credentials: []Credential{
		{User: "ci-robot", Fingerprint: "c1", FirstSeen: at(-10), LastSeen: at(95)},
		{User: "ci-robot", Fingerprint: "c2", FirstSeen: at(30), LastSeen: at(61)},
	}}}
	got := Dependents(f)
	if len(got) != 1 || !got[0].LastSeen.Equal(at(95)) {
		t.Fatalf("got %+v, want ci-robot once, last seen at +95m", got)
	}
}

func TestKubeconfigsAdd(t *testing.T) {
	k := &Kubeconfigs{}
	k.Add(IssuedCertificate{User: "carousel:admin:a", Fingerprint: "01", IssuedAt: at(0), NotAfter: at(10)}, at(0))
	k.Add(IssuedCertificate{User: "carousel:admin:b", Fingerprint: "02", IssuedAt: at(30), NotAfter: at(90)}, at(30))
	k.Add(IssuedCertificate{User: "carousel:admin:a", Fingerprint: "03", IssuedAt: at(60), NotAfter: at(120)}, at(0).Add(Retention))
	var fps []string
	for _, i := range k.Issued {
		fps = append(fps, i.Fingerprint)
	}
	if !slices.Equal(fps, []string{"02", "03"}) {
		t.Fatalf("record %v: want the one expired a day before the last addition forgotten, the others in order", fps)
	}
	back, err := ParseKubeconfigs(k.String())
	if err != nil || back.String() != k.String() {
		t.Fatalf("the record does not survive storage: %v, %s", err, back)
	}
	if _, found := back.Find("02"); !found {
		t.Fatal("a recorded fingerprint not found")
	}
	if _, found := back.Find("01"); found {
		t.Fatal("a forgotten fingerprint found")
	}
	if _, err := ParseKubeconfigs("["); err == nil {
		t.Fatal("a corrupt record parsed")
	}
	if empty, err := ParseKubeconfigs(""); err != nil || len(empty.Issued) != 0 {
		t.Fatalf("empty data: %v %+v", err, empty)
	}
}

func TestKubeletCertificatesAdd(t *testing.T) {
	signed := func(node, fp, issuer string, from, until int) IssuedCertificate {
		return IssuedCertificate{User: "system:node:" + node, Fingerprint: fp, Issuer: issuer, IssuedAt: at(from), NotAfter: at(until)}
	}
	k := &KubeletCertificates{}
	k.Add([]IssuedCertificate{signed("a", "01", "old", 0, 600), signed("b", "02", "old", 0, 30)}, at(0))
	k.Add([]IssuedCertificate{signed("a", "03", "new", 10, 600), signed("a", "04", "old", 20, 600)}, at(20))
	k.Add(nil, at(30))
	var fps []string
	for _, i := range k.Signed {
		fps = append(fps, i.Fingerprint)
	}
	if !slices.Equal(fps, []string{"03", "04"}) {
		t.Fatalf("record %v: want the last of each node and CA, in the order recorded, without the expired one", fps)
	}
	if why := k.Stranded("a", "old", at(30)); !strings.Contains(why, "X509SHA256=04") {
		t.Fatalf("Stranded(a) = %q: want the last certificate, 04 from the old CA, named", why)
	}
	if why := k.Stranded("a", "new", at(30)); why != "" {
		t.Fatalf("Stranded(a) with the other CA dropped = %q, want nothing: its last certificate is from the CA that stays", why)
	}
	if why := k.Stranded("b", "old", at(30)); why != "" {
		t.Fatalf("Stranded(b) = %q, want nothing: its certificate expired", why)
	}
	if why := (*KubeletCertificates)(nil).Stranded("a", "", at(30)); why != "" {
		t.Fatalf("no record: %q", why)
	}
	back, err := decodeKubeletCertificates(compressKubeletCertificates(k.String()))
	if err != nil || back.String() != k.String() {
		t.Fatalf("the record does not survive storage: %v, %s", err, back)
	}
	if _, found := back.Find("03"); !found {
		t.Fatal("a recorded fingerprint not found")
	}
	if _, found := back.Find("01"); found {
		t.Fatal("a replaced fingerprint found")
	}
	if _, err := ParseKubeletCertificates("{"); err == nil {
		t.Fatal("a corrupt record parsed")
	}
}

// A kubelet's serving certificates are recorded beside its client ones and
// judged apart: the last serving certificate does not stand for the client
// certificate it holds, nor the other way round, and a full record keeps the
// last of each kind.
func TestKubeletServingCertificatesAreRecordedApart(t *testing.T) {
	cert := func(node, fp, issuer string, serving bool) IssuedCertificate {
		return IssuedCertificate{User: "system:node:" + node, Fingerprint: fp, Issuer: issuer, IssuedAt: at(0), NotAfter: at(600), Serving: serving}
	}
	k := &KubeletCertificates{}
	k.Add([]IssuedCertificate{cert("a", "01", "client-old", false), cert("a", "02", "kubelet-new", true), cert("a", "03", "kubelet-old", true)}, at(0))
	if _, holds := k.Holding("a", "client-old", at(1)); !holds {
		t.Error("a's client certificate from the old client CA not held: a serving certificate recorded after it stood for it")
	}
	if _, holds := k.HoldingServing("a", "kubelet-old", at(1)); !holds {
		t.Error("a's last serving certificate, from the old kubelet CA, not held")
	}
	if _, holds := k.HoldingServing("a", "kubelet-new", at(1)); holds {
		t.Error("a serving certificate a replaced is held")
	}
	if _, holds := k.HoldingServing("a", "client-old", at(1)); holds {
		t.Error("a client certificate taken for a serving one")
	}
	k.Add([]IssuedCertificate{cert("a", "04", "kubelet-new", true)}, at(2))
	if last, holds := k.HoldingServing("a", "kubelet-new", at(3)); !holds || last.Fingerprint != "04" {
		t.Errorf("after a renewal from the new kubelet CA: %+v, %t; want 04 held", last, holds)
	}
	back, err := ParseKubeletCertificates(k.String())
	if err != nil || back.String() != k.String() || !back.Signed[len(back.Signed)-1].Serving {
		t.Fatalf("the record does not survive storage: %v, %s", err, back)
	}

	pad := strings.Repeat("x", 3100) // a few hundred entries fill the record
	full := &KubeletCertificates{}
	var batch []IssuedCertificate
	for i := range 100 {
		node := fmt.Sprintf("%s-%03d", pad, i)
		batch = append(batch, cert(node, fmt.Sprint("c", i), "client-old", false), cert(node, fmt.Sprint("s", i), "kubelet-new", true),
			cert(node, fmt.Sprint("t", i), "kubelet-old", true))
	}
	full.Add(batch, at(0))
	if len(full.Signed) != 200 || full.UnrecordedUntil != nil {
		t.Fatalf("a full record: %d entries, unrecorded until %v; want each node's last of each kind, and nothing forgotten", len(full.Signed), full.UnrecordedUntil)
	}
	node := pad + "-000"
	if _, holds := full.Holding(node, "client-old", at(1)); !holds {
		t.Error("a full record kept a node's last serving certificate, not its client one")
	}
	if last, holds := full.HoldingServing(node, "kubelet-old", at(1)); !holds || last.Fingerprint != "t0" {
		t.Errorf("a full record: the node's serving certificate %+v, %t; want its last, t0", last, holds)
	}

	// Past the bound even so, the serving certificates go first: only an
	// abort reads them, and the gate goes on vouching for the client ones.
	var more []IssuedCertificate
	for i := 100; i < 130; i++ {
		node := fmt.Sprintf("%s-%03d", pad, i)
		more = append(more, cert(node, fmt.Sprint("c", i), "client-old", false), cert(node, fmt.Sprint("t", i), "kubelet-old", true))
	}
	full.Add(more, at(1))
	clients := 0
	for _, c := range full.Signed {
		if !c.Serving {
			clients++
		}
	}
	if clients != 130 || full.UnrecordedUntil != nil || full.UnrecordedServingUntil == nil || !full.UnrecordedServingUntil.Equal(at(600)) {
		t.Fatalf("past the bound: %d client entries, unrecorded until %v, serving until %v; want every client one kept, serving ones forgotten",
			clients, full.UnrecordedUntil, full.UnrecordedServingUntil)
	}
	if _, holds := full.HoldingServing(node, "kubelet-old", at(1)); holds {
		t.Error("the oldest serving certificate is still held past the bound")
	}
	if size := len(full.String()); size > MaxKubeletCertificatesBytes {
		t.Errorf("the record holds %d bytes, more than %d", size, MaxKubeletCertificatesBytes)
	}
	full.Add(nil, at(600))
	if full.UnrecordedServingUntil != nil {
		t.Errorf("serving unrecorded until %v after the forgotten certificates expired", full.UnrecordedServingUntil)
	}
}

// TestDecodeKubeletCertificates: no data is an empty record; what is not
// gzip, or decompresses past the bound (the ConfigMap is writable by anyone
// who edits the namespace's ConfigMaps), is an error, not memory spent; the
// digests and node names of a large record compress well.
func TestDecodeKubeletCertificates(t *testing.T) {
	if k, err := decodeKubeletCertificates(nil); err != nil || len(k.Signed) != 0 || k.UnrecordedUntil != nil {
		t.Fatalf("no data: %+v, %v; want an empty record", k, err)
	}
	if _, err := decodeKubeletCertificates([]byte(`{"signed":[]}`)); err == nil {
		t.Fatal("uncompressed JSON decoded")
	}
	padded := func(n int) string { // a record's JSON of n bytes
		const open, end = `{"signed":[],"x":"`, `"}`
		return open + strings.Repeat("0", n-len(open)-len(end)) + end
	}
	if _, err := decodeKubeletCertificates(compressKubeletCertificates(padded(MaxKubeletCertificatesBytes))); err != nil {
		t.Fatalf("a record of the largest size: %v", err)
	}
	bomb := compressKubeletCertificates(padded(MaxKubeletCertificatesBytes + 1))
	if _, err := decodeKubeletCertificates(bomb); err == nil || !strings.Contains(err.Error(), "decompresses to more than") {
		t.Fatalf("%d bytes that decompress past the bound: %v, want refused", len(bomb), err)
	}
	stored := compressKubeletCertificates(`{"signed":[]}`)
	if _, err := decodeKubeletCertificates(stored[:len(stored)-4]); err == nil {
		t.Fatal("a truncated record decoded")
	}
	var signed []IssuedCertificate
	for i := range 1000 {
		signed = append(signed, IssuedCertificate{User: fmt.Sprintf("system:node:worker-%04d", i), Fingerprint: fmt.Sprintf("%x", sha256.Sum256([]byte{byte(i), byte(i >> 8)})),
			Issuer: strings.Repeat("ab", 20), IssuedAt: t0, NotAfter: t0.Add(time.Hour)})
	}
	json := (&KubeletCertificates{}).Add(signed, t0)
	if stored := len(compressKubeletCertificates(json)); stored*3 > len(json) {
		t.Fatalf("1,000 entries: %d bytes stored for %d of JSON, want less than a third", stored, len(json))
	}
}

// TestReadKubeletCertificates: a ConfigMap as development builds wrote it,
// the JSON in data, does not read as an empty record; storing drops it.
func TestReadKubeletCertificates(t *testing.T) {
	data := map[string]string{oldKubeletCertificatesDataKey: `{"signed":[]}`}
	binaryData := map[string][]byte{}
	if _, err := ReadKubeletCertificates(data, binaryData); err == nil {
		t.Fatal("a record in the old format read")
	}
	record := &KubeletCertificates{Signed: []IssuedCertificate{{User: "system:node:a", Fingerprint: "01", Issuer: "x", IssuedAt: t0, NotAfter: t0.Add(time.Hour)}}}
	StoreKubeletCertificates(record.String(), data, binaryData)
	if _, old := data[oldKubeletCertificatesDataKey]; old {
		t.Fatal("the old format kept")
	}
	back, err := ReadKubeletCertificates(data, binaryData)
	if err != nil || back.String() != record.String() {
		t.Fatalf("read back %v, %v; want %s", back, err, record)
	}
}

func TestKubeletCertificatesStayWithinTheirBound(t *testing.T) {
	pad := strings.Repeat("x", 3100) // node names that fill the record with a few hundred entries
	batch := func(issuer string, from, to, until int) []IssuedCertificate {
		var b []IssuedCertificate
		for i := from; i < to; i++ {
			b = append(b, IssuedCertificate{User: fmt.Sprintf("system:node:%s-%03d", pad, i), Fingerprint: fmt.Sprint(i), Issuer: issuer,
				IssuedAt: at(0), NotAfter: at(until)})
		}
		return b
	}
	k := &KubeletCertificates{}
	k.Add(batch("old", 0, 100, 600), at(0))
	k.Add(batch("new", 0, 100, 600), at(1))
	k.Add(batch("new", 100, 150, 600), at(2))
	if len(k.Signed) != 150 || slices.ContainsFunc(k.Signed, func(c IssuedCertificate) bool { return c.Issuer == "old" }) || k.UnrecordedUntil != nil {
		t.Fatalf("past the bound: %d entries, unrecorded until %v; want the 100 superseded old-CA ones forgotten, and nothing else", len(k.Signed), k.UnrecordedUntil)
	}
	k.Add(batch("new", 150, 300, 700), at(3))
	if size := len(k.String()); size > MaxKubeletCertificatesBytes {
		t.Fatalf("the record holds %d bytes, more than %d", size, MaxKubeletCertificatesBytes)
	}
	if last := k.Signed[len(k.Signed)-1]; last.Fingerprint != "299" || k.Signed[0].Fingerprint == "0" {
		t.Fatalf("kept %s to %s: want the oldest forgotten, the newest kept", k.Signed[0].Fingerprint, last.Fingerprint)
	}
	if k.UnrecordedUntil == nil || !k.UnrecordedUntil.Equal(at(600)) {
		t.Fatalf("unrecorded until %v, want the expiry of the last certificate forgotten, %v", k.UnrecordedUntil, at(600))
	}
	deps := Dependents(Facts{Now: at(10), KubeletCertificates: k, Nodes: []Node{{Name: "without-agent"}}})
	if len(deps) != 1 || deps[0].Name != "kubelet-certificates" || !deps[0].Expires.Equal(at(600)) || !strings.Contains(deps[0].Message, "had no room") {
		t.Fatalf("gate %+v: want the record named until the certificates it forgot expire", deps)
	}
	k.Add(nil, at(600))
	if k.UnrecordedUntil != nil {
		t.Fatalf("unrecorded until %v after the forgotten certificates expired", k.UnrecordedUntil)
	}
}

func TestStranded(t *testing.T) {
	const newCA, oldCA, goneCA = "aaaaaaaaaaaaaaaaaaaa", "bbbbbbbbbbbbbbbbbbbb", "cccccccccccccccccccc"
	issued := func(user, fp, issuer string, from, until int) IssuedCertificate {
		return IssuedCertificate{User: "carousel:admin:" + user, Fingerprint: fp, Issuer: issuer, IssuedAt: at(from), NotAfter: at(until)}
	}
	tests := []struct {
		name   string
		issued []IssuedCertificate
		want   []string // name: message fragment
	}{
		{name: "none"},
		{name: "from the CA that stays", issued: []IssuedCertificate{issued("alice", "01", newCA, 0, 600)}},
		{name: "from the CA dropped, unexpired", issued: []IssuedCertificate{issued("alice", "01", oldCA, 0, 600)},
			want: []string{"carousel:admin:alice: (X509SHA256=01) issued 2026-11-26T12:00:00Z from client CA bbbbbbbbbbbbbbbb, valid until 2026-11-26T22:00:00Z: issue it a new one with --name alice"}},
		{name: "from the CA dropped, expired", issued: []IssuedCertificate{issued("alice", "01", oldCA, 0, 100)}},
		{name: "from a CA deleted before: nothing to lose", issued: []IssuedCertificate{issued("alice", "01", goneCA, 0, 600)}},
		{name: "moved: one from the CA that stays recorded after it, even expired", issued: []IssuedCertificate{issued("alice", "01", oldCA, 0, 600), issued("alice", "02", newCA, 10, 20)}},
		{name: "the record's order decides, not the issuing machines' clocks", issued: []IssuedCertificate{issued("alice", "01", oldCA, 0, 600), issued("alice", "02", newCA, -60, 600)}},
		{name: "a newer one for another user moves nobody else", issued: []IssuedCertificate{issued("alice", "01", oldCA, 0, 600), issued("bob", "02", newCA, 10, 600)},
			want: []string{"carousel:admin:alice: X509SHA256=01"}},
		{name: "moved, then took more from the CA dropped: the latest is named, the last to expire gives the time",
			issued: []IssuedCertificate{issued("alice", "01", oldCA, 0, 600), issued("alice", "02", newCA, 10, 600),
				issued("alice", "03", oldCA, 20, 700), issued("alice", "04", oldCA, 30, 650)},
			want: []string{"carousel:admin:alice: (X509SHA256=04) issued 2026-11-26T12:30:00Z from client CA bbbbbbbbbbbbbbbb (and 1 more before it), valid until 2026-11-26T23:40:00Z"}},
		{name: "one per user, by name", issued: []IssuedCertificate{issued("zed", "01", oldCA, 0, 600), issued("alice", "02", oldCA, 5, 600)},
			want: []string{"carousel:admin:alice: X509SHA256=02", "carousel:admin:zed: X509SHA256=01"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := (&Kubeconfigs{Issued: tt.issued}).Stranded(oldCA, newCA, at(120))
			if len(got) != len(tt.want) {
				t.Fatalf("got %d, want %d: %+v", len(got), len(tt.want), got)
			}
			for i, w := range tt.want {
				name, fragment, _ := strings.Cut(w, ": ")
				if got[i].Kind != v1alpha1.OldCADependentKubeconfig || got[i].Name != name || !strings.Contains(got[i].Message, fragment) || got[i].Expires.IsZero() {
					t.Errorf("dependent %d = %+v, want Kubeconfig %s: …%s…, with its expiry", i, got[i], name, fragment)
				}
			}
		})
	}
	if got := (*Kubeconfigs)(nil).Stranded(oldCA, newCA, at(0)); got != nil {
		t.Fatalf("no record: %+v", got)
	}
}

// A kubeconfig recorded by a plugin whose clock runs hours ahead drops no
// other user's kubeconfig that is still valid: the gate still names it.
func TestAClockAheadDropsNoValidKubeconfig(t *testing.T) {
	k := &Kubeconfigs{}
	k.Add(IssuedCertificate{User: "carousel:admin:alice", Fingerprint: "01", Issuer: "old", IssuedAt: at(0), NotAfter: at(24 * 60)}, at(0))
	// At real time +23h, from a laptop two hours ahead.
	k.Add(IssuedCertificate{User: "carousel:admin:carol", Fingerprint: "02", Issuer: "new", IssuedAt: at(25 * 60), NotAfter: at(26 * 60)}, at(25*60))
	stranded := k.Stranded("old", "new", at(23*60))
	if len(stranded) != 1 || !strings.Contains(stranded[0].Name, "alice") {
		t.Errorf("stranded %+v, want alice, whose kubeconfig is valid for another hour", stranded)
	}
	// A day past its expiry, by the writer's clock, it goes.
	k.Add(IssuedCertificate{User: "carousel:admin:carol", Fingerprint: "03", Issuer: "new", IssuedAt: at(48 * 60), NotAfter: at(49 * 60)}, at(48*60))
	if _, found := k.Find("01"); found {
		t.Error("a kubeconfig expired a day before the addition is still recorded")
	}
}

// A Node named only because no rollout moved it changes only by hand: the
// gate need not look at the Nodes again soon for it.
func TestANodeNoRolloutMovedIsNamedForAPerson(t *testing.T) {
	const newCA, oldCA = "aaaaaaaaaaaaaaaaaaaa", "bbbbbbbbbbbbbbbbbbbb"
	deps := Dependents(Facts{NewClientIssuer: newCA, OldClientIssuer: oldCA, Nodes: []Node{
		{Name: "w1", ClientIssuer: newCA, Unrolled: "it has no carousel.dev/pool label"},
		{Name: "w2", ClientIssuer: oldCA, Unrolled: "it has no carousel.dev/pool label"},
	}})
	if len(deps) != 2 || !deps[0].ByHand || deps[1].ByHand {
		t.Fatalf("dependents %+v; want w1 for a person, w2 (on the old client CA, which its agent renews) not", deps)
	}
}
