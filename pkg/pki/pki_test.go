package pki

import (
	"bytes"
	"crypto"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

var (
	now      = time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	keyCache sync.Map // KeyAlgorithm -> crypto.Signer; RSA-4096 takes seconds to generate
)

func testKey(t testing.TB, alg KeyAlgorithm) crypto.Signer {
	t.Helper()
	if k, ok := keyCache.Load(alg); ok {
		return k.(crypto.Signer)
	}
	k, err := GenerateKey(alg)
	if err != nil {
		t.Fatalf("GenerateKey(%s): %v", alg, err)
	}
	keyCache.Store(alg, k)
	return k
}

func testCA(t testing.TB, alg KeyAlgorithm, validity time.Duration) *KeyPair {
	t.Helper()
	ca, err := NewCA(CATemplate{CommonName: "test-ca", Organization: []string{"carousel"}, Validity: validity}, testKey(t, alg), now)
	if err != nil {
		t.Fatalf("NewCA: %v", err)
	}
	return ca
}

func TestGenerateKeyEveryAlgorithm(t *testing.T) {
	for _, alg := range KeyAlgorithms() {
		t.Run(string(alg), func(t *testing.T) {
			key := testKey(t, alg)
			got, err := AlgorithmOf(key.Public())
			if err != nil || got != alg {
				t.Fatalf("AlgorithmOf = %q, %v; want %q", got, err, alg)
			}
			encoded, err := EncodePrivateKey(key)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.HasPrefix(encoded, []byte("-----BEGIN PRIVATE KEY-----")) {
				t.Fatalf("not a PKCS #8 PEM block: %.40q", encoded)
			}
			parsed, err := ParsePrivateKey(encoded)
			if err != nil {
				t.Fatal(err)
			}
			if !PublicKeysEqual(parsed.Public(), key.Public()) {
				t.Fatal("parsed key differs from the generated one")
			}
		})
	}
}

func TestGenerateKeyRefusesUnknownAlgorithm(t *testing.T) {
	if _, err := GenerateKey("DSA-1024"); err == nil {
		t.Fatal("want an error for an unknown algorithm")
	}
}

func TestAlgorithmOfRefusesOtherKeys(t *testing.T) {
	pub, _, _ := ed25519.GenerateKey(rand.Reader)
	if _, err := AlgorithmOf(pub); err == nil {
		t.Fatal("want an error for an Ed25519 key")
	}
}

func TestParsePrivateKeyErrors(t *testing.T) {
	cert := testCA(t, ECDSAP256, time.Hour).CertPEM()
	for name, data := range map[string][]byte{
		"empty":            nil,
		"certificate only": cert,
		"corrupt PKCS8":    []byte("-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n"),
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := ParsePrivateKey(data); err == nil {
				t.Fatal("want an error")
			}
		})
	}
}

func TestNewCA(t *testing.T) {
	for _, alg := range KeyAlgorithms() {
		t.Run(string(alg), func(t *testing.T) {
			ca := testCA(t, alg, 24*time.Hour)
			c := ca.Cert
			if !c.IsCA || !c.BasicConstraintsValid || c.MaxPathLen != 0 || !c.MaxPathLenZero {
				t.Errorf("not a path-length-0 CA: IsCA=%v MaxPathLen=%d", c.IsCA, c.MaxPathLen)
			}
			if c.KeyUsage&x509.KeyUsageCertSign == 0 || c.KeyUsage&x509.KeyUsageCRLSign == 0 {
				t.Errorf("key usage %b lacks certSign or cRLSign", c.KeyUsage)
			}
			if len(c.SubjectKeyId) != 20 {
				t.Errorf("subject key id has %d bytes, want 20", len(c.SubjectKeyId))
			}
			if !c.NotBefore.Equal(now.Add(-Backdate)) || !c.NotAfter.Equal(now.Add(24*time.Hour)) {
				t.Errorf("validity %s..%s", c.NotBefore, c.NotAfter)
			}
			if err := c.CheckSignatureFrom(c); err != nil {
				t.Errorf("not self-signed: %v", err)
			}
			if c.SerialNumber.Sign() <= 0 || c.SerialNumber.BitLen() > 128 {
				t.Errorf("serial %s is not a positive 128-bit number", c.SerialNumber)
			}
		})
	}
}

func TestNewCARefusesBadTemplates(t *testing.T) {
	key := testKey(t, ECDSAP256)
	for name, tmpl := range map[string]CATemplate{
		"no common name": {Validity: time.Hour},
		"zero validity":  {CommonName: "ca"},
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := NewCA(tmpl, key, now); err == nil {
				t.Fatal("want an error")
			}
		})
	}
}

func TestSerialsDiffer(t *testing.T) {
	a, b := testCA(t, ECDSAP256, time.Hour), testCA(t, ECDSAP256, time.Hour)
	if a.Cert.SerialNumber.Cmp(b.Cert.SerialNumber) == 0 {
		t.Fatal("two CAs got the same serial number")
	}
}

func TestIssue(t *testing.T) {
	client := []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	server := []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
	both := []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth, x509.ExtKeyUsageServerAuth}
	tests := []struct {
		name             string
		caAlg, leafAlg   KeyAlgorithm
		usages           []x509.ExtKeyUsage
		validity         time.Duration
		wantNotAfter     time.Time
		wantEncipherment bool
	}{
		{"ecdsa client", ECDSAP256, ECDSAP256, client, time.Hour, now.Add(time.Hour), false},
		{"ecdsa server", ECDSAP384, ECDSAP256, server, time.Hour, now.Add(time.Hour), false},
		{"rsa server gets key encipherment", ECDSAP256, RSA2048, server, time.Hour, now.Add(time.Hour), true},
		{"rsa client has none", RSA2048, RSA2048, client, time.Hour, now.Add(time.Hour), false},
		{"client and server", RSA3072, ECDSAP256, both, time.Hour, now.Add(time.Hour), false},
		{"capped at the CA's NotAfter", ECDSAP256, ECDSAP256, client, 48 * time.Hour, now.Add(24 * time.Hour), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ca := testCA(t, tt.caAlg, 24*time.Hour)
			leaf, err := ca.Issue(LeafTemplate{
				CommonName:   "system:node:worker-1",
				Organization: []string{"system:nodes"},
				DNSNames:     []string{"worker-1.example"},
				IPAddresses:  []net.IP{net.ParseIP("10.0.0.7")},
				Usages:       tt.usages,
				Validity:     tt.validity,
			}, testKey(t, tt.leafAlg).Public(), now)
			if err != nil {
				t.Fatal(err)
			}
			if leaf.IsCA {
				t.Error("leaf is a CA")
			}
			if !leaf.NotBefore.Equal(now.Add(-Backdate)) || !leaf.NotAfter.Equal(tt.wantNotAfter) {
				t.Errorf("validity %s..%s, want %s..%s", leaf.NotBefore, leaf.NotAfter, now.Add(-Backdate), tt.wantNotAfter)
			}
			if got := leaf.KeyUsage&x509.KeyUsageKeyEncipherment != 0; got != tt.wantEncipherment {
				t.Errorf("keyEncipherment = %v, want %v", got, tt.wantEncipherment)
			}
			if leaf.Subject.CommonName != "system:node:worker-1" || leaf.Subject.Organization[0] != "system:nodes" {
				t.Errorf("subject %s", leaf.Subject)
			}
			if leaf.DNSNames[0] != "worker-1.example" || !leaf.IPAddresses[0].Equal(net.ParseIP("10.0.0.7")) {
				t.Errorf("SANs %v %v", leaf.DNSNames, leaf.IPAddresses)
			}
			if !bytes.Equal(leaf.AuthorityKeyId, ca.Cert.SubjectKeyId) {
				t.Error("authority key id does not name the CA")
			}
			for _, u := range tt.usages {
				if err := Verify(leaf, NewBundle(ca.Cert), u, now); err != nil {
					t.Errorf("does not verify for usage %d: %v", u, err)
				}
			}
			otherKey, err := GenerateKey(ECDSAP256) // same subject, different key
			if err != nil {
				t.Fatal(err)
			}
			other, err := NewCA(CATemplate{CommonName: "test-ca", Organization: []string{"carousel"}, Validity: 24 * time.Hour}, otherKey, now)
			if err != nil {
				t.Fatal(err)
			}
			if err := Verify(leaf, NewBundle(other.Cert), tt.usages[0], now); err == nil {
				t.Error("verifies against a CA that did not sign it")
			}
			if err := Verify(leaf, NewBundle(ca.Cert), tt.usages[0], now.Add(25*time.Hour)); err == nil {
				t.Error("verifies after it expired")
			}
		})
	}
}

func TestVerifyChecksUsage(t *testing.T) {
	ca := testCA(t, ECDSAP256, time.Hour)
	leaf, err := ca.IssueKeyPair(LeafTemplate{CommonName: "c", Usages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, Validity: time.Minute}, ECDSAP256, now)
	if err != nil {
		t.Fatal(err)
	}
	if err := Verify(leaf.Cert, NewBundle(ca.Cert), x509.ExtKeyUsageServerAuth, now); err == nil {
		t.Fatal("a client certificate verifies as a server certificate")
	}
}

func TestIssueRefuses(t *testing.T) {
	ca := testCA(t, ECDSAP256, time.Hour)
	leaf, err := ca.IssueKeyPair(LeafTemplate{CommonName: "leaf", Usages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, Validity: time.Minute}, ECDSAP256, now)
	if err != nil {
		t.Fatal(err)
	}
	edPub, _, _ := ed25519.GenerateKey(rand.Reader)
	good := LeafTemplate{CommonName: "x", Usages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, Validity: time.Hour}
	pub := testKey(t, ECDSAP256).Public()
	tests := []struct {
		name   string
		issuer *KeyPair
		tmpl   func(LeafTemplate) LeafTemplate
		pub    crypto.PublicKey
		at     time.Time
		want   string
	}{
		{"issuer is not a CA", leaf, nil, pub, now, "not a CA"},
		{"no common name", ca, func(l LeafTemplate) LeafTemplate { l.CommonName = ""; return l }, pub, now, "common name"},
		{"no validity", ca, func(l LeafTemplate) LeafTemplate { l.Validity = 0; return l }, pub, now, "validity"},
		{"no usages", ca, func(l LeafTemplate) LeafTemplate { l.Usages = nil; return l }, pub, now, "usage"},
		{"code signing", ca, func(l LeafTemplate) LeafTemplate {
			l.Usages = []x509.ExtKeyUsage{x509.ExtKeyUsageCodeSigning}
			return l
		}, pub, now, "usage"},
		{"unsupported key", ca, nil, edPub, now, "unsupported"},
		{"expired CA", ca, nil, pub, now.Add(2 * time.Hour), "expired"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tmpl := good
			if tt.tmpl != nil {
				tmpl = tt.tmpl(good)
			}
			_, err := tt.issuer.Issue(tmpl, tt.pub, tt.at)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want one mentioning %q", err, tt.want)
			}
		})
	}
}

func TestParseKeyPair(t *testing.T) {
	ca := testCA(t, ECDSAP256, time.Hour)
	keyPEM, err := ca.KeyPEM()
	if err != nil {
		t.Fatal(err)
	}
	got, err := ParseKeyPair(ca.CertPEM(), keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	if !got.Cert.Equal(ca.Cert) {
		t.Fatal("round trip changed the certificate")
	}
	otherKey, _ := EncodePrivateKey(testKey(t, ECDSAP384))
	if _, err := ParseKeyPair(ca.CertPEM(), otherKey); err == nil || !strings.Contains(err.Error(), "does not match") {
		t.Fatalf("mismatched key: err = %v", err)
	}
}

// TestParsePairedCertificate checks that a remembered match is one of both
// PEMs: another key with the same certificate is refused after it.
func TestParsePairedCertificate(t *testing.T) {
	ca := testCA(t, ECDSAP256, time.Hour)
	keyPEM, err := ca.KeyPEM()
	if err != nil {
		t.Fatal(err)
	}
	otherKey, err := EncodePrivateKey(testKey(t, ECDSAP384))
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name    string
		key     []byte
		wantErr string
	}{
		{"its key", keyPEM, ""},
		{"its key again", keyPEM, ""},
		{"another key", otherKey, "does not match"},
		{"no key", nil, "no private key"},
	} {
		got, err := ParsePairedCertificate(ca.CertPEM(), tt.key)
		switch {
		case tt.wantErr == "" && (err != nil || !got.Equal(ca.Cert)):
			t.Errorf("%s: got %v, %v; want the certificate", tt.name, got, err)
		case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
			t.Errorf("%s: err = %v, want one with %q", tt.name, err, tt.wantErr)
		}
	}
}

func TestDigest(t *testing.T) {
	fields := func(f ...string) [][]byte {
		out := make([][]byte, len(f))
		for i := range f {
			out[i] = []byte(f[i])
		}
		return out
	}
	for _, tt := range []struct {
		name string
		a, b [][]byte
		same bool
	}{
		{"the same fields", fields("ab", "c"), fields("ab", "c"), true},
		{"split elsewhere", fields("ab", "c"), fields("a", "bc"), false},
		{"an empty field more", fields("ab", "c"), fields("ab", "c", ""), false},
		{"in another order", fields("ab", "c"), fields("c", "ab"), false},
	} {
		if same := Digest(tt.a...) == Digest(tt.b...); same != tt.same {
			t.Errorf("%s: equal digests = %v, want %v", tt.name, same, tt.same)
		}
	}
}

func TestBundle(t *testing.T) {
	older, err := NewCA(CATemplate{CommonName: "old", Validity: time.Hour}, testKey(t, ECDSAP256), now.Add(-30*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	newer := testCA(t, ECDSAP256, 2*time.Hour)
	sameTimeA, sameTimeB := testCA(t, ECDSAP256, 2*time.Hour), testCA(t, ECDSAP256, 2*time.Hour)

	b := NewBundle(newer.Cert, older.Cert, newer.Cert)
	if len(b) != 2 || !b[0].Equal(older.Cert) || !b[1].Equal(newer.Cert) {
		t.Fatalf("want [old new] without duplicates, got %d certificates", len(b))
	}
	if !bytes.Equal(NewBundle(sameTimeA.Cert, sameTimeB.Cert).PEM(), NewBundle(sameTimeB.Cert, sameTimeA.Cert).PEM()) {
		t.Fatal("the encoding depends on the input order")
	}
	parsed, err := ParseBundle(append([]byte("# comment between blocks\n"), b.PEM()...))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(parsed.PEM(), b.PEM()) {
		t.Fatal("parse and encode do not round-trip")
	}
	if u := b.Unexpired(now.Add(45 * time.Minute)); len(u) != 1 || !u[0].Equal(newer.Cert) {
		t.Fatalf("Unexpired kept %d certificates", len(u))
	}
	if len(b) != 2 {
		t.Fatal("Unexpired changed its receiver")
	}
	if !b.Contains(older.Cert) || b.Contains(sameTimeA.Cert) {
		t.Fatal("Contains is wrong")
	}
}

func TestParseBundleErrors(t *testing.T) {
	key, _ := EncodePrivateKey(testKey(t, ECDSAP256))
	valid := testCA(t, ECDSAP256, time.Hour).CertPEM()
	if _, err := ParseBundle(slices.Concat(valid, valid)); err != nil {
		t.Fatalf("a bundle of two valid certificates: %v", err)
	}
	for name, data := range map[string][]byte{
		"empty":         nil,
		"text":          []byte("not a pem"),
		"private key":   key,
		"corrupt block": []byte("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"),
		// encoding/pem skips a block that does not decode: the bundle
		// would pass for its valid certificates alone.
		"a block of bad base64 between two certificates": slices.Concat(valid, []byte("-----BEGIN CERTIFICATE-----\n!!!!\n-----END CERTIFICATE-----\n"), valid),
		"a certificate cut off after a valid one":        slices.Concat(valid, valid[:len(valid)/2]),
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := ParseBundle(data); err == nil {
				t.Fatal("want an error")
			}
		})
	}
}

func TestFingerprint(t *testing.T) {
	ca := testCA(t, ECDSAP256, time.Hour)
	fp := Fingerprint(ca.Cert)
	if len(fp) != 64 || strings.ToLower(fp) != fp {
		t.Fatalf("fingerprint %q is not 64 lowercase hex digits", fp)
	}
	if fp == Fingerprint(testCA(t, ECDSAP256, time.Hour).Cert) {
		t.Fatal("two CAs share a fingerprint")
	}
}

func TestKeysGeneratedCounts(t *testing.T) {
	before := KeysGenerated()
	if _, err := GenerateKey(ECDSAP256); err != nil {
		t.Fatal(err)
	}
	_, _ = GenerateKey("unknown")
	if got := KeysGenerated() - before; got != 1 {
		t.Fatalf("KeysGenerated grew by %d, want 1", got)
	}
}

func TestSignedBy(t *testing.T) {
	ca := testCA(t, ECDSAP256, 24*time.Hour)
	otherKey, err := GenerateKey(ECDSAP256) // testCA's keys are cached: one key per algorithm
	if err != nil {
		t.Fatal(err)
	}
	other, err := NewCA(CATemplate{CommonName: "other-ca", Validity: 24 * time.Hour}, otherKey, now)
	if err != nil {
		t.Fatal(err)
	}
	// Issue, not IssueKeyPair: SignedBy checks this one's signature itself.
	leafKey, err := GenerateKey(ECDSAP256)
	if err != nil {
		t.Fatal(err)
	}
	leafCert, err := ca.Issue(LeafTemplate{CommonName: "leaf", Usages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, Validity: time.Hour}, leafKey.Public(), now)
	if err != nil {
		t.Fatal(err)
	}
	leaf := &KeyPair{Cert: leafCert, Key: leafKey}
	// Same key identifier as ca, but another key: only the signature tells them apart.
	impostor := *other.Cert
	impostor.SubjectKeyId = ca.Cert.SubjectKeyId
	// The leaf with its last signature byte changed, asked after the leaf's
	// own verdict was remembered: verdicts are remembered by content.
	tamperedDER := slices.Clone(leaf.Cert.Raw)
	tamperedDER[len(tamperedDER)-1] ^= 0xff
	tampered, err := x509.ParseCertificate(tamperedDER)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name string
		leaf *x509.Certificate
		ca   *x509.Certificate
		want bool
	}{
		{"its CA", leaf.Cert, ca.Cert, true},
		{"its CA again", leaf.Cert, ca.Cert, true},
		{"another CA", leaf.Cert, other.Cert, false},
		{"another CA claiming the same key identifier", leaf.Cert, &impostor, false},
		{"its CA, signature changed", tampered, ca.Cert, false},
	} {
		if got := SignedBy(tt.leaf, tt.ca); got != tt.want {
			t.Errorf("%s: SignedBy = %v, want %v", tt.name, got, tt.want)
		}
	}
}

// TestIssueKeyPairRemembersItsSignature: a certificate IssueKeyPair made is
// known to SignedBy without a second check of its signature, unless the
// issuer is a certificate CheckSignatureFrom would refuse as a CA whatever
// the signature: then SignedBy still says no. Issue's certificates (a
// kubelet's) are not remembered: SignedBy is not asked about them.
func TestIssueKeyPairRemembersItsSignature(t *testing.T) {
	tmpl := LeafTemplate{CommonName: "leaf", Usages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, Validity: time.Hour}
	remembered := func(cert, ca *x509.Certificate) bool {
		verdict, ok := signatureVerdicts.get(Digest(cert.Raw, ca.Raw))
		return ok && verdict
	}
	ca := testCA(t, ECDSAP256, 24*time.Hour)
	leaf, err := ca.IssueKeyPair(tmpl, ECDSAP256, now)
	if err != nil {
		t.Fatal(err)
	}
	if !remembered(leaf.Cert, ca.Cert) {
		t.Error("the verdict on a certificate IssueKeyPair just made is not remembered")
	}
	kubelet, err := ca.Issue(tmpl, testKey(t, ECDSAP256).Public(), now)
	if err != nil {
		t.Fatal(err)
	}
	if remembered(kubelet, ca.Cert) {
		t.Error("the verdict on a certificate Issue made for another's key is remembered")
	}

	// A CA certificate that may not sign certificates (no keyCertSign).
	key := testKey(t, ECDSAP256)
	noCertSign := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "no-cert-sign"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, BasicConstraintsValid: true, IsCA: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, noCertSign, noCertSign, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	parsed, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	issuer := &KeyPair{Cert: parsed, Key: key}
	if _, err := issuer.IssueKeyPair(tmpl, ECDSAP256, now); err == nil || !strings.Contains(err.Error(), "lacks certSign") {
		t.Errorf("a CA whose key usage forbids signing certificates issued a certificate (error %v)", err)
	}
	signed, err := createCertificate(&x509.Certificate{SerialNumber: big.NewInt(3), Subject: pkix.Name{CommonName: "signed-anyway"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour)}, parsed, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	if SignedBy(signed, issuer.Cert) {
		t.Error("SignedBy accepts a certificate issued by a CA whose key usage forbids signing certificates")
	}

	// A CA certificate never parsed: no DER to remember it by, no public key
	// that CreateCertificate would have compared with the signer's.
	unparsed := &KeyPair{Cert: &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "unparsed"}, SubjectKeyId: []byte{1, 2, 3},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour), PublicKeyAlgorithm: x509.ECDSA,
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true, IsCA: true,
	}, Key: key}
	leaf, err = unparsed.IssueKeyPair(tmpl, ECDSAP256, now)
	if err != nil {
		t.Fatal(err)
	}
	if remembered(leaf.Cert, unparsed.Cert) {
		t.Error("the verdict on a certificate issued by a CA never parsed is remembered")
	}
}

// TestAppendPEM: appendPEM writes encoding/pem's bytes, whatever the
// length, pemSize says how many, and EncodeCertificates puts the blocks one
// after the other.
func TestAppendPEM(t *testing.T) {
	var certs []*x509.Certificate
	var want []byte
	for n := range 1500 {
		der := bytes.Repeat([]byte{byte(n)}, n)
		for _, typ := range []string{"CERTIFICATE", "PRIVATE KEY"} {
			block := pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
			if got := appendPEM([]byte("before"), typ, der); !bytes.Equal(got, append([]byte("before"), block...)) {
				t.Fatalf("%s of %d bytes:\n%s\nwant\n%s", typ, n, got, block)
			}
			if pemSize(typ, n) != len(block) {
				t.Fatalf("pemSize(%s, %d) = %d, want %d", typ, n, pemSize(typ, n), len(block))
			}
		}
		if n%97 == 0 {
			cert := &x509.Certificate{Raw: der}
			certs, want = append(certs, cert), append(want, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})...)
		}
	}
	if got := EncodeCertificates(certs...); !bytes.Equal(got, want) {
		t.Fatalf("EncodeCertificates of %d certificates differs from their PEM blocks", len(certs))
	}
	if got := EncodeCertificates(); len(got) != 0 {
		t.Fatalf("no certificates encode to %q", got)
	}
}
