package csr

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/pem"
	"errors"
	"net"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	"k8s.io/utils/ptr"

	"github.com/carousel-dev/carousel/pkg/pki"
)

// The fuzz targets build a request from fuzzed fields and sign it with a key
// chosen among fixed ones, so that most inputs get past the signature check
// and reach the decisions; a raw mode feeds the bytes to the parser instead.

// Keys a fuzzed request may be signed with.
const (
	fuzzKeyECDSA = iota
	fuzzKeyRSA
	fuzzKeyP224
	fuzzKeyEd25519
	fuzzKeys
)

// Extensions a fuzzed request may ask for, to try to smuggle CA rights,
// other key usages, name constraints or SANs past the signer.
var fuzzExtensions = []asn1.ObjectIdentifier{
	nil,
	{2, 5, 29, 19},                   // basic constraints
	{2, 5, 29, 15},                   // key usage
	{2, 5, 29, 37},                   // extended key usage
	{2, 5, 29, 30},                   // name constraints
	{2, 5, 29, 17},                   // subject alternative name
	{1, 3, 6, 1, 4, 1, 99999, 1},     // unknown
	{1, 3, 6, 1, 5, 5, 7, 1, 1},      // authority information access
	{2, 16, 840, 1, 113730, 1, 1, 0}, // unknown, Netscape-like
}

// DER values for the seeds.
var (
	extCATrue       = []byte{0x30, 0x03, 0x01, 0x01, 0xff}                                       // basicConstraints CA:TRUE
	extCertSign     = []byte{0x03, 0x02, 0x02, 0x04}                                             // keyUsage keyCertSign
	extAnyUsage     = []byte{0x30, 0x06, 0x06, 0x04, 0x55, 0x1d, 0x25, 0x00}                     // extKeyUsage anyExtendedKeyUsage
	extPermitted    = []byte{0x30, 0x0a, 0xa0, 0x08, 0x30, 0x06, 0x82, 0x04, 'e', 'v', 'i', 'l'} // nameConstraints permitted dNSName "evil"
	extSANMallory   = []byte{0x30, 0x09, 0x82, 0x07, 'm', 'a', 'l', 'l', 'o', 'r', 'y'}          // subjectAltName dNSName "mallory"
	clientUsageList = "digital signature,client auth"
	serveUsageList  = "digital signature,server auth"
)

type fuzzSigners [fuzzKeys]crypto.Signer

func newFuzzSigners(f *testing.F) fuzzSigners {
	ec, err := pki.GenerateKey(pki.ECDSAP256)
	if err != nil {
		f.Fatal(err)
	}
	rsaKey, err := pki.GenerateKey(pki.RSA2048)
	if err != nil {
		f.Fatal(err)
	}
	p224, err := ecdsa.GenerateKey(elliptic.P224(), rand.Reader)
	if err != nil {
		f.Fatal(err)
	}
	_, ed, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		f.Fatal(err)
	}
	return fuzzSigners{ec, rsaKey, p224, ed}
}

// fuzzRequest is the request part of a fuzz input.
type fuzzRequest struct {
	signer        uint8  // 0 client, 1 serving, else another signer
	cn, orgs, ous string // orgs and ous: comma-separated
	dns           string // comma-separated
	ips           []byte // 4-byte chunks
	emails, uris  string // comma-separated
	user, groups  string // groups: comma-separated
	usages        string // comma-separated
	key           uint8
	ext           uint8
	extValue      []byte
	extCritical   bool
	raw           []byte // with rawMode 1 the request as is, 2 wrapped in PEM
	rawMode       uint8
}

func list(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}

func (in fuzzRequest) signerName() string {
	switch in.signer % 3 {
	case 0:
		return certificatesv1.KubeAPIServerClientKubeletSignerName
	case 1:
		return certificatesv1.KubeletServingSignerName
	}
	return "example.com/other"
}

// build returns the CSR object, or false when the fields make no request.
func (in fuzzRequest) build(keys fuzzSigners) (*certificatesv1.CertificateSigningRequest, bool) {
	obj := &certificatesv1.CertificateSigningRequest{Spec: certificatesv1.CertificateSigningRequestSpec{
		SignerName: in.signerName(), Username: in.user, Groups: list(in.groups),
	}}
	for _, u := range list(in.usages) {
		obj.Spec.Usages = append(obj.Spec.Usages, certificatesv1.KeyUsage(u))
	}
	switch in.rawMode % 3 {
	case 1:
		obj.Spec.Request = in.raw
		return obj, true
	case 2:
		obj.Spec.Request = pki.EncodeCertificateRequest(in.raw)
		return obj, true
	}
	tmpl := &x509.CertificateRequest{
		Subject:  pkix.Name{CommonName: in.cn, Organization: list(in.orgs), OrganizationalUnit: list(in.ous)},
		DNSNames: list(in.dns), EmailAddresses: list(in.emails),
	}
	for i := 0; i+4 <= len(in.ips) && i < 16; i += 4 {
		tmpl.IPAddresses = append(tmpl.IPAddresses, net.IP(slices.Clone(in.ips[i:i+4])))
	}
	for _, u := range list(in.uris) {
		parsed, err := url.Parse(u)
		if err != nil {
			return nil, false
		}
		tmpl.URIs = append(tmpl.URIs, parsed)
	}
	if oid := fuzzExtensions[int(in.ext)%len(fuzzExtensions)]; oid != nil {
		tmpl.ExtraExtensions = []pkix.Extension{{Id: oid, Critical: in.extCritical, Value: in.extValue}}
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, tmpl, keys[int(in.key)%fuzzKeys])
	if err != nil {
		return nil, false
	}
	obj.Spec.Request = pki.EncodeCertificateRequest(der)
	return obj, true
}

func requestSANs(t *testing.T, obj *certificatesv1.CertificateSigningRequest) (*x509.CertificateRequest, []string) {
	t.Helper()
	parsed, bad := validate(obj)
	if bad != nil {
		t.Fatalf("approved or signed a request that does not validate: %+v", bad)
	}
	return parsed, append(append([]string{}, parsed.DNSNames...), ipStrings(parsed.IPAddresses)...)
}

// FuzzDecide checks the approver's invariants on any request: it never
// approves what Validate refuses or what the signer would refuse; it
// approves a client certificate only for one of Carousel's bootstrap tokens
// or the node renewing its own identity, a serving certificate only for the
// node itself and only for addresses the policy allows; with manual
// approval, or for another signer, it decides nothing; a pin comes only from
// a FirstSeen evaluation and records the Node as it is; only a request left
// pending is retried, and exactly for the reasons that always were
// (legacyTransient); and it is deterministic.
func FuzzDecide(f *testing.F) {
	keys := newFuzzSigners(f)
	bootstrapGroups := "system:bootstrappers," + group + ",system:authenticated"
	nodeGroups := NodesGroup + ",system:authenticated"
	addresses := "10.0.0.7,worker-1.example"
	validReq, _ := fuzzRequest{signer: 0, cn: "system:node:worker-1", orgs: NodesGroup}.build(keys)
	block, _ := pem.Decode(validReq.Spec.Request)
	// Arguments: signer, cn, orgs, ous, dns, ips, emails, uris, user, groups,
	// usages, key, ext, extValue, extCritical, raw, rawMode, flags (1 client
	// auto, 2 serving auto, 4 FirstSeen, 8 the Node exists), node UID, node
	// addresses, pin mode (0 none, 1 same UID, 2 another UID, 3 unreadable),
	// pinned addresses.
	type seed struct {
		in             fuzzRequest
		flags          uint8
		uid, nodeAddrs string
		pinMode        uint8
		pinned         string
	}
	seeds := []seed{
		{fuzzRequest{signer: 0, cn: "system:node:worker-1", orgs: NodesGroup, user: "system:bootstrap:abcdef", groups: bootstrapGroups, usages: clientUsageList}, 1, "", "", 0, ""},
		{fuzzRequest{signer: 0, cn: "system:node:worker-1", orgs: NodesGroup, user: "system:node:worker-1", groups: nodeGroups, usages: clientUsageList}, 1, "", "", 0, ""},
		{fuzzRequest{signer: 0, cn: "system:node:worker-1", orgs: NodesGroup, user: "system:bootstrap:zzzzzz", groups: bootstrapGroups, usages: clientUsageList}, 1, "", "", 0, ""},
		{fuzzRequest{signer: 0, cn: "system:node:worker-2", orgs: NodesGroup, user: "system:node:worker-1", groups: nodeGroups, usages: clientUsageList}, 1, "", "", 0, ""},
		{fuzzRequest{signer: 0, cn: "system:node:worker-1", orgs: NodesGroup + ",system:masters", user: "system:bootstrap:abcdef", groups: bootstrapGroups, usages: clientUsageList}, 1, "", "", 0, ""},
		{fuzzRequest{signer: 0, cn: "system:node:worker-1", orgs: "system:masters", user: "system:bootstrap:abcdef", groups: bootstrapGroups, usages: clientUsageList}, 0, "", "", 0, ""},
		{fuzzRequest{signer: 0, cn: "system:node:worker-1", orgs: NodesGroup, user: "system:bootstrap:abcdef", groups: bootstrapGroups, usages: clientUsageList + ",server auth"}, 1, "", "", 0, ""},
		{fuzzRequest{signer: 0, cn: "system:node:worker-1", orgs: NodesGroup, user: "system:node:worker-1", groups: nodeGroups, usages: clientUsageList + ",key encipherment", key: fuzzKeyRSA}, 1, "", "", 0, ""},
		{fuzzRequest{signer: 0, cn: "system:node:worker-1", orgs: NodesGroup, user: "system:node:worker-1", groups: nodeGroups, usages: clientUsageList, key: fuzzKeyEd25519}, 1, "", "", 0, ""},
		{fuzzRequest{signer: 0, cn: "system:node:worker-1", orgs: NodesGroup, user: "system:node:worker-1", groups: nodeGroups, usages: clientUsageList, key: fuzzKeyP224}, 1, "", "", 0, ""},
		{fuzzRequest{signer: 0, cn: "system:node:worker-1", orgs: NodesGroup, user: "system:node:worker-1", groups: nodeGroups, usages: clientUsageList, ext: 1, extValue: extCATrue, extCritical: true}, 1, "", "", 0, ""},
		{fuzzRequest{signer: 1, cn: "system:node:worker-1", orgs: NodesGroup, dns: "worker-1.example", ips: []byte{10, 0, 0, 7}, user: "system:node:worker-1", groups: nodeGroups, usages: serveUsageList}, 2, "uid-1", addresses, 0, ""},
		{fuzzRequest{signer: 1, cn: "system:node:worker-1", orgs: NodesGroup, dns: "evil.example", user: "system:node:worker-1", groups: nodeGroups, usages: serveUsageList}, 2 | 8, "uid-1", addresses, 0, ""},
		{fuzzRequest{signer: 1, cn: "system:node:worker-1", orgs: NodesGroup, ips: []byte{10, 0, 0, 7}, user: "system:node:worker-1", groups: nodeGroups, usages: serveUsageList}, 2 | 4 | 8, "uid-1", addresses, 0, ""},
		{fuzzRequest{signer: 1, cn: "system:node:worker-1", orgs: NodesGroup, ips: []byte{203, 0, 113, 9}, user: "system:node:worker-1", groups: nodeGroups, usages: serveUsageList}, 2 | 4 | 8, "uid-1", addresses + ",203.0.113.9", 1, addresses},
		{fuzzRequest{signer: 1, cn: "system:node:worker-9", orgs: NodesGroup, dns: "worker-9", user: "system:node:worker-9", groups: nodeGroups, usages: serveUsageList}, 2 | 4, "uid-9", "worker-9", 0, ""},
		{fuzzRequest{signer: 1, cn: "system:node:worker-1", orgs: NodesGroup, dns: "worker-1", user: "system:node:worker-1", groups: nodeGroups, usages: serveUsageList}, 2 | 4 | 8, "uid-1", "", 0, ""},
		{fuzzRequest{signer: 1, cn: "system:node:worker-1", orgs: NodesGroup, ips: []byte{203, 0, 113, 9}, user: "system:node:worker-1", groups: nodeGroups, usages: serveUsageList}, 2 | 4 | 8, "uid-2", addresses + ",203.0.113.9", 2, addresses},
		{fuzzRequest{signer: 1, cn: "system:node:worker-1", orgs: NodesGroup, dns: "worker-1.example", user: "system:node:worker-1", groups: nodeGroups, usages: serveUsageList}, 2 | 4 | 8, "uid-1", addresses, 3, ""},
		{fuzzRequest{signer: 1, cn: "system:node:worker-1", orgs: NodesGroup, dns: "worker-1.example", emails: "root@example.com", user: "system:node:worker-1", groups: nodeGroups, usages: serveUsageList}, 2 | 8, "uid-1", addresses, 0, ""},
		{fuzzRequest{signer: 1, cn: "system:node:worker-1", orgs: NodesGroup, dns: "worker-1.example", user: "system:node:worker-1", groups: nodeGroups, usages: serveUsageList, ext: 5, extValue: extSANMallory}, 2 | 8, "uid-1", addresses, 0, ""},
		{fuzzRequest{signer: 1, cn: "system:node:worker-1", orgs: NodesGroup, dns: "worker-1.example", user: "system:node:worker-1", groups: nodeGroups, usages: serveUsageList}, 0, "uid-1", addresses, 0, ""},
		{fuzzRequest{signer: 2, cn: "system:node:worker-1", orgs: NodesGroup, user: "system:node:worker-1", groups: nodeGroups, usages: clientUsageList}, 3, "", "", 0, ""},
		{fuzzRequest{raw: block.Bytes, rawMode: 2, user: "system:node:worker-1", groups: nodeGroups, usages: clientUsageList}, 1, "", "", 0, ""},
		{fuzzRequest{raw: []byte("garbage"), rawMode: 1, user: "system:node:worker-1", groups: nodeGroups, usages: clientUsageList}, 1, "", "", 0, ""},
		{fuzzRequest{raw: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: block.Bytes}), rawMode: 1, user: "system:node:worker-1", groups: nodeGroups}, 1, "", "", 0, ""},
	}
	for _, s := range seeds {
		in := s.in
		f.Add(in.signer, in.cn, in.orgs, in.ous, in.dns, in.ips, in.emails, in.uris, in.user, in.groups, in.usages, in.key, in.ext, in.extValue, in.extCritical,
			in.raw, in.rawMode, s.flags, s.uid, s.nodeAddrs, s.pinMode, s.pinned)
	}
	ca, err := pki.NewCA(pki.CATemplate{CommonName: "fuzz-ca", Validity: 48 * time.Hour}, keys[fuzzKeyECDSA], time.Now())
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, signer uint8, cn, orgs, ous, dns string, ips []byte, emails, uris, user, groups, usages string, keySel, ext uint8, extValue []byte,
		extCritical bool, raw []byte, rawMode, flags uint8, uid, nodeAddrs string, pinMode uint8, pinned string) {
		in := fuzzRequest{signer, cn, orgs, ous, dns, ips, emails, uris, user, groups, usages, keySel, ext, extValue, extCritical, raw, rawMode}
		obj, ok := in.build(keys)
		if !ok {
			return
		}
		firstSeen := flags&4 != 0
		var pin *AddressPin
		switch pinMode % 4 {
		case 1:
			pin = &AddressPin{Node: "worker-1", UID: uid, Addresses: list(pinned)}
		case 2:
			pin = &AddressPin{Node: "worker-1", UID: uid + "-earlier", Addresses: list(pinned)}
		}
		node := NodeInfo{UID: uid, Addresses: list(nodeAddrs)}
		p := Policy{
			BootstrapGroup:     group,
			IsCarouselToken:    func(id string) bool { return id == "abcdef" },
			AutoApproveClient:  flags&1 != 0,
			AutoApproveServing: flags&2 != 0,
			Node: func(name string) (NodeInfo, bool) {
				return node, flags&8 != 0 || name == "worker-1"
			},
			FirstSeenAddresses: firstSeen,
			Pinned: func(name string) (*AddressPin, error) {
				if pinMode%4 == 3 {
					return nil, errors.New("unreadable")
				}
				if name != "worker-1" {
					return nil, nil
				}
				return pin, nil
			},
		}
		d := Decide(obj, p)
		if again := Decide(obj, p); again.Verdict != d.Verdict || again.Reason != d.Reason || again.Message != d.Message || again.Retry != d.Retry || (again.Pin == nil) != (d.Pin == nil) {
			t.Fatalf("not deterministic: %+v, then %+v", d, again)
		}
		if d.Reason == "" || d.Message == "" {
			t.Fatalf("a decision without a reason or message: %+v", d)
		}
		if d.Verdict == Deny && !strings.HasPrefix(d.Reason, "Carousel") {
			t.Fatalf("a denial with a reason not Carousel's: %+v", d)
		}
		if (d.Retry != RetryOnUpdate) != legacyTransient(d) || d.Retry != RetryOnUpdate && d.Verdict != Ignore {
			t.Fatalf("Retry %s for %+v; the reason-text rule said transient: %v", d.Retry, d, legacyTransient(d))
		}
		serving := obj.Spec.SignerName == certificatesv1.KubeletServingSignerName
		manual := obj.Spec.SignerName == certificatesv1.KubeAPIServerClientKubeletSignerName && !p.AutoApproveClient ||
			serving && !p.AutoApproveServing
		if (manual || !serving && obj.Spec.SignerName != certificatesv1.KubeAPIServerClientKubeletSignerName) && (d.Verdict != Ignore || d.Pin != nil) {
			t.Fatalf("decided a request it must leave to an administrator: %+v", d)
		}
		if d.Pin != nil {
			if !serving || !firstSeen || NodeUserPrefix+d.Pin.Node != obj.Spec.Username ||
				d.Pin.UID != node.UID || !slices.Equal(d.Pin.Addresses, node.Addresses) || len(d.Pin.Addresses) == 0 {
				t.Fatalf("pin %+v (node %+v, FirstSeen %v, %s)", d.Pin, node, firstSeen, obj.Spec.SignerName)
			}
			if pin != nil && pinMode%4 == 1 && d.Pin.Node == "worker-1" {
				t.Fatalf("pinned again over a pin of the same Node: %+v", d.Pin)
			}
		}
		if d.Verdict != Approve {
			return
		}
		if err := Validate(obj); err != nil {
			t.Fatalf("approved a request that does not validate: %v", err)
		}
		parsed, sans := requestSANs(t, obj)
		cnOK := parsed.Subject.CommonName == obj.Spec.Username && slices.Contains(obj.Spec.Groups, NodesGroup)
		switch obj.Spec.SignerName {
		case certificatesv1.KubeAPIServerClientKubeletSignerName:
			token := obj.Spec.Username == BootstrapUserPrefix+"abcdef" && slices.Contains(obj.Spec.Groups, group)
			if !token && !cnOK {
				t.Fatalf("approved a client certificate for %q requested by %q %v", parsed.Subject.CommonName, obj.Spec.Username, obj.Spec.Groups)
			}
		case certificatesv1.KubeletServingSignerName:
			if !cnOK {
				t.Fatalf("approved a serving certificate for %q requested by %q %v", parsed.Subject.CommonName, obj.Spec.Username, obj.Spec.Groups)
			}
			// A SAN must be an address the Node has now and, pinned, one it
			// had when pinned.
			name := strings.TrimPrefix(parsed.Subject.CommonName, NodeUserPrefix)
			pinned := firstSeen && name == "worker-1" && pinMode%4 == 1
			for _, san := range sans {
				// The same string, or the same IP however written.
				in := func(addresses []string) bool {
					return slices.ContainsFunc(addresses, func(a string) bool { ip := net.ParseIP(san); return a == san || ip != nil && ip.Equal(net.ParseIP(a)) })
				}
				if !in(node.Addresses) || pinned && !in(pin.Addresses) {
					t.Fatalf("approved SAN %q, the Node's addresses %v, pinned %v (FirstSeen %v)", san, node.Addresses, pin.Addresses, pinned)
				}
			}
		}
		// What the approver approves, the signer signs.
		obj.Status.Conditions = []certificatesv1.CertificateSigningRequestCondition{{Type: certificatesv1.CertificateApproved}}
		if _, err := Sign(obj, ca, time.Hour, time.Now()); err != nil {
			t.Fatalf("approved, but the signer refuses: %v", err)
		}
	})
}

// FuzzSign checks the signer's invariants on any approved request and any
// CA lifetime: it signs exactly what Validate accepts (any other request is
// refused with a RefusedError, and the only other errors are the CA's); a
// signed certificate is never a CA and cannot sign, carries exactly the
// validated subject (O=system:nodes, CN=system:node:<name>, nothing else),
// only the extensions and the one extended usage of its signer, only SANs
// the request had and only for serving, chains to the CA, starts
// pki.Backdate before now and ends within maxDuration and never after the
// CA.
func FuzzSign(f *testing.F) {
	keys := newFuzzSigners(f)
	validReq, _ := fuzzRequest{signer: 1, cn: "system:node:worker-1", orgs: NodesGroup, dns: "worker-1"}.build(keys)
	block, _ := pem.Decode(validReq.Spec.Request)
	// Arguments: signer, cn, orgs, ous, dns, ips, emails, uris, usages, key,
	// ext, extValue, extCritical, raw, rawMode, approved, expiration seconds
	// (negative: none), maxDuration and CA validity and CA age in minutes.
	type seed struct {
		in                    fuzzRequest
		approved              bool
		expiration            int64
		maxMin, caMin, ageMin uint32
	}
	year := uint32(365 * 24 * 60)
	client := func(mod func(*fuzzRequest)) fuzzRequest {
		in := fuzzRequest{signer: 0, cn: "system:node:worker-1", orgs: NodesGroup, usages: clientUsageList}
		if mod != nil {
			mod(&in)
		}
		return in
	}
	serving := func(mod func(*fuzzRequest)) fuzzRequest {
		in := fuzzRequest{signer: 1, cn: "system:node:worker-1", orgs: NodesGroup, dns: "worker-1.example", ips: []byte{10, 0, 0, 7}, usages: serveUsageList}
		if mod != nil {
			mod(&in)
		}
		return in
	}
	seeds := []seed{
		{client(nil), true, -1, year, 10 * year, 60},
		{client(nil), false, -1, year, 10 * year, 60},
		{client(nil), true, 3600, year, 10 * year, 60},
		{client(nil), true, 60, year, 10 * year, 60},               // shorter than the minimum
		{client(nil), true, int64(1<<31 - 1), year, 10 * year, 60}, // longer than the maximum
		{client(nil), true, -1, year, 24 * 60, 23 * 60},            // the CA expires in an hour
		{client(nil), true, -1, year, 24 * 60, 25 * 60},            // the CA has expired
		{client(nil), true, -1, 5, 10 * year, 60},                  // a maximum below the minimum
		{client(func(in *fuzzRequest) { in.orgs = "system:masters" }), true, -1, year, 10 * year, 60},
		{client(func(in *fuzzRequest) { in.ous = "system:masters" }), true, -1, year, 10 * year, 60},
		{client(func(in *fuzzRequest) { in.cn = "admin" }), true, -1, year, 10 * year, 60},
		{client(func(in *fuzzRequest) { in.dns = "worker-1" }), true, -1, year, 10 * year, 60},
		{client(func(in *fuzzRequest) { in.usages += ",server auth" }), true, -1, year, 10 * year, 60},
		{client(func(in *fuzzRequest) { in.usages += ",cert sign" }), true, -1, year, 10 * year, 60},
		{client(func(in *fuzzRequest) { in.usages += ",key encipherment"; in.key = fuzzKeyRSA }), true, -1, year, 10 * year, 60},
		{client(func(in *fuzzRequest) { in.key = fuzzKeyEd25519 }), true, -1, year, 10 * year, 60},
		{client(func(in *fuzzRequest) { in.key = fuzzKeyP224 }), true, -1, year, 10 * year, 60},
		{client(func(in *fuzzRequest) { in.ext, in.extValue, in.extCritical = 1, extCATrue, true }), true, -1, year, 10 * year, 60},
		{client(func(in *fuzzRequest) { in.ext, in.extValue = 2, extCertSign }), true, -1, year, 10 * year, 60},
		{client(func(in *fuzzRequest) { in.ext, in.extValue = 3, extAnyUsage }), true, -1, year, 10 * year, 60},
		{client(func(in *fuzzRequest) { in.ext, in.extValue, in.extCritical = 4, extPermitted, true }), true, -1, year, 10 * year, 60},
		{client(func(in *fuzzRequest) { in.ext, in.extValue = 6, []byte{0x05, 0x00} }), true, -1, year, 10 * year, 60},
		{serving(nil), true, -1, year, 10 * year, 60},
		{serving(func(in *fuzzRequest) { in.key, in.usages = fuzzKeyRSA, serveUsageList+",key encipherment" }), true, -1, year, 10 * year, 60},
		{serving(func(in *fuzzRequest) { in.emails = "root@example.com" }), true, -1, year, 10 * year, 60},
		{serving(func(in *fuzzRequest) { in.uris = "spiffe://cluster/ns/kube-system" }), true, -1, year, 10 * year, 60},
		{serving(func(in *fuzzRequest) { in.dns, in.ips = "", nil }), true, -1, year, 10 * year, 60},
		{serving(func(in *fuzzRequest) { in.dns = "*.nodes.example" }), true, -1, year, 10 * year, 60},
		{serving(func(in *fuzzRequest) { in.ext, in.extValue = 5, extSANMallory }), true, -1, year, 10 * year, 60},
		{serving(func(in *fuzzRequest) { in.ext, in.extValue, in.extCritical = 1, extCATrue, true }), true, -1, year, 10 * year, 60},
		{serving(func(in *fuzzRequest) { in.usages = clientUsageList }), true, -1, year, 10 * year, 60},
		{client(func(in *fuzzRequest) { in.signer = 2 }), true, -1, year, 10 * year, 60},
		{fuzzRequest{signer: 1, raw: block.Bytes, rawMode: 2, usages: serveUsageList}, true, -1, year, 10 * year, 60},
		{fuzzRequest{signer: 0, raw: []byte("garbage"), rawMode: 1, usages: clientUsageList}, true, -1, year, 10 * year, 60},
	}
	for _, s := range seeds {
		in := s.in
		f.Add(in.signer, in.cn, in.orgs, in.ous, in.dns, in.ips, in.emails, in.uris, in.usages, in.key, in.ext, in.extValue, in.extCritical,
			in.raw, in.rawMode, s.approved, s.expiration, s.maxMin, s.caMin, s.ageMin)
	}
	now := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, signer uint8, cn, orgs, ous, dns string, ips []byte, emails, uris, usages string, keySel, ext uint8, extValue []byte,
		extCritical bool, raw []byte, rawMode uint8, approved bool, expiration int64, maxMin, caMin, ageMin uint32) {
		in := fuzzRequest{signer: signer, cn: cn, orgs: orgs, ous: ous, dns: dns, ips: ips, emails: emails, uris: uris, user: "system:node:worker-1",
			groups: NodesGroup, usages: usages, key: keySel, ext: ext, extValue: extValue, extCritical: extCritical, raw: raw, rawMode: rawMode}
		obj, ok := in.build(keys)
		if !ok {
			return
		}
		if approved {
			obj.Status.Conditions = []certificatesv1.CertificateSigningRequestCondition{{Type: certificatesv1.CertificateApproved}}
		}
		if expiration >= 0 {
			obj.Spec.ExpirationSeconds = ptr.To(int32(min(expiration, 1<<31-1)))
		}
		maxDuration := time.Duration(maxMin%(2*365*24*60)+1) * time.Minute
		caValidity := time.Duration(caMin%(20*365*24*60)+1) * time.Minute
		caCreated := now.Add(-time.Duration(ageMin%(20*365*24*60)) * time.Minute)
		ca, err := pki.NewCA(pki.CATemplate{CommonName: "fuzz-ca", Validity: caValidity}, keys[fuzzKeyECDSA], caCreated)
		if err != nil {
			t.Fatal(err)
		}
		out, err := Sign(obj, ca, maxDuration, now)
		invalid := Validate(obj)
		var refused *RefusedError
		switch {
		case !approved:
			if err == nil || errors.As(err, &refused) {
				t.Fatalf("an unapproved request: %v, want an error that is no refusal", err)
			}
			return
		case invalid != nil:
			if !errors.As(err, &refused) {
				t.Fatalf("a request that does not validate (%v): %v, want a refusal", invalid, err)
			}
			return
		case err != nil:
			if errors.As(err, &refused) {
				t.Fatalf("refused a request that validates: %v", err)
			}
			if now.Before(ca.Cert.NotAfter) {
				t.Fatalf("failed to sign with a valid CA: %v", err)
			}
			return
		}
		if !now.Before(ca.Cert.NotAfter) {
			t.Fatal("signed with an expired CA")
		}
		certs, err := pki.ParseCertificates(out)
		if err != nil || len(certs) != 1 {
			t.Fatalf("the signed certificate: %v (%d)", err, len(certs))
		}
		cert := certs[0]
		parsed, sans := requestSANs(t, obj)

		if cert.IsCA || !cert.BasicConstraintsValid {
			t.Fatal("a kubelet certificate that is (or may be) a CA")
		}
		if cert.KeyUsage&^(x509.KeyUsageDigitalSignature|x509.KeyUsageKeyEncipherment) != 0 {
			t.Fatalf("key usage %b", cert.KeyUsage)
		}
		want := pkix.Name{CommonName: parsed.Subject.CommonName, Organization: []string{NodesGroup}}
		wantRaw, err := asn1.Marshal(want.ToRDNSequence())
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(cert.RawSubject, wantRaw) || !strings.HasPrefix(cert.Subject.CommonName, NodeUserPrefix) || cert.Subject.CommonName == NodeUserPrefix {
			t.Fatalf("subject %s, want exactly %s", cert.Subject, want)
		}
		wantUsage := x509.ExtKeyUsageClientAuth
		if obj.Spec.SignerName == certificatesv1.KubeletServingSignerName {
			wantUsage = x509.ExtKeyUsageServerAuth
		}
		if !slices.Equal(cert.ExtKeyUsage, []x509.ExtKeyUsage{wantUsage}) || len(cert.UnknownExtKeyUsage) > 0 {
			t.Fatalf("extended key usages %v %v, want only %v", cert.ExtKeyUsage, cert.UnknownExtKeyUsage, wantUsage)
		}
		allowedExts := []string{"2.5.29.15", "2.5.29.37", "2.5.29.19", "2.5.29.14", "2.5.29.35"}
		if wantUsage == x509.ExtKeyUsageServerAuth {
			allowedExts = append(allowedExts, "2.5.29.17")
		}
		for _, e := range cert.Extensions {
			if !slices.Contains(allowedExts, e.Id.String()) {
				t.Fatalf("extension %s in a kubelet certificate", e.Id)
			}
		}
		if i := slices.IndexFunc(cert.DNSNames, notAHostName); i >= 0 {
			t.Fatalf("DNS SAN %q, no host name, in a kubelet certificate", cert.DNSNames[i])
		}
		if len(cert.EmailAddresses)+len(cert.URIs) > 0 || len(cert.PermittedDNSDomains)+len(cert.ExcludedDNSDomains) > 0 {
			t.Fatal("e-mail or URI SANs, or name constraints")
		}
		certSANs := append(append([]string{}, cert.DNSNames...), ipStrings(cert.IPAddresses)...)
		if wantUsage == x509.ExtKeyUsageClientAuth && len(certSANs) > 0 {
			t.Fatalf("SANs %v in a client certificate", certSANs)
		}
		for _, san := range certSANs {
			if !slices.Contains(sans, san) {
				t.Fatalf("SAN %q that the request did not have (%v)", san, sans)
			}
		}
		if !cert.NotBefore.Equal(now.Add(-pki.Backdate)) || cert.NotAfter.After(ca.Cert.NotAfter) || cert.NotAfter.Sub(now) > maxDuration {
			t.Fatalf("validity %s..%s (now %s, max %s, CA until %s)", cert.NotBefore, cert.NotAfter, now, maxDuration, ca.Cert.NotAfter)
		}
		if err := pki.Verify(cert, pki.NewBundle(ca.Cert), wantUsage, now); err != nil {
			t.Fatal(err)
		}
	})
}

// ipStrings are ips as strings.
func ipStrings(ips []net.IP) []string {
	out := make([]string, 0, len(ips))
	for _, ip := range ips {
		out = append(out, ip.String())
	}
	return out
}
