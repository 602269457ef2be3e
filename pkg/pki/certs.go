package pki

import (
	"bytes"
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/binary"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"time"
)

// Backdate is how far before "now" a certificate's validity starts, so that
// a peer whose clock runs a little behind already accepts it.
const Backdate = 5 * time.Minute

// serialLimit bounds serial numbers to 128 random bits.
var serialLimit = new(big.Int).Lsh(big.NewInt(1), 128)

// KeyPair is a certificate with its private key.
type KeyPair struct {
	Cert *x509.Certificate
	Key  crypto.Signer
}

// CertPEM returns the certificate as a PEM block.
func (kp *KeyPair) CertPEM() []byte { return EncodeCertificates(kp.Cert) }

// KeyPEM returns the private key as a PKCS #8 PEM block.
func (kp *KeyPair) KeyPEM() ([]byte, error) { return EncodePrivateKey(kp.Key) }

// ParseKeyPair parses a PEM certificate and private key and checks that they
// belong together.
func ParseKeyPair(certPEM, keyPEM []byte) (*KeyPair, error) {
	certs, err := ParseCertificates(certPEM)
	if err != nil {
		return nil, err
	}
	key, err := ParsePrivateKey(keyPEM)
	if err != nil {
		return nil, err
	}
	if !PublicKeysEqual(key.Public(), certs[0].PublicKey) {
		return nil, errors.New("private key does not match the certificate's public key")
	}
	return &KeyPair{Cert: certs[0], Key: key}, nil
}

// ParsePairedCertificate is ParseKeyPair's certificate, for a caller that
// needs the pair checked but not its key. That the key matches is remembered
// by the SHA-256 of both PEMs, so an unchanged pair's key is parsed once:
// parsing an ECDSA key computes its public key, which costs more than the
// rest of the check together.
func ParsePairedCertificate(certPEM, keyPEM []byte) (*x509.Certificate, error) {
	key := Digest(certPEM, keyPEM)
	if _, matched := matchedPairs.get(key); matched {
		certs, err := ParseCertificates(certPEM)
		if err != nil {
			return nil, err
		}
		return certs[0], nil
	}
	kp, err := ParseKeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, err
	}
	matchedPairs.add(key, struct{}{})
	return kp.Cert, nil
}

// matchedPairs holds the digests of the certificate and key pairs that
// ParsePairedCertificate found to match: room for every leaf certificate of
// a thousand Clusters through a rotation in its younger half.
var matchedPairs = newMemo[struct{}](1 << 16)

// Digest is the SHA-256 of fields, each preceded by its length, so that two
// different lists of fields never share a digest by where they split.
func Digest(fields ...[]byte) [sha256.Size]byte {
	h := sha256.New()
	for _, field := range fields {
		_ = binary.Write(h, binary.BigEndian, uint64(len(field))) // a hash.Hash's Write never fails
		_, _ = h.Write(field)
	}
	return [sha256.Size]byte(h.Sum(nil))
}

// CATemplate describes a self-signed certificate authority.
type CATemplate struct {
	CommonName   string
	Organization []string
	Validity     time.Duration
}

// NewCA self-signs a CA certificate for key, valid from now-Backdate for
// Validity. The certificate may sign certificates (not other CAs) and CRLs.
func NewCA(tmpl CATemplate, key crypto.Signer, now time.Time) (*KeyPair, error) {
	if tmpl.CommonName == "" {
		return nil, errors.New("a CA needs a common name")
	}
	if tmpl.Validity <= 0 {
		return nil, fmt.Errorf("CA validity must be positive, got %s", tmpl.Validity)
	}
	ski, err := subjectKeyID(key.Public())
	if err != nil {
		return nil, err
	}
	serial, err := randomSerial()
	if err != nil {
		return nil, err
	}
	template := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: tmpl.CommonName, Organization: tmpl.Organization},
		NotBefore:             now.Add(-Backdate).UTC(),
		NotAfter:              now.Add(tmpl.Validity).UTC(),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLen:            0,
		MaxPathLenZero:        true,
		SubjectKeyId:          ski,
	}
	cert, err := createCertificate(template, template, key.Public(), key)
	if err != nil {
		return nil, err
	}
	return &KeyPair{Cert: cert, Key: key}, nil
}

// LeafTemplate describes a certificate signed by a CA.
type LeafTemplate struct {
	CommonName   string
	Organization []string
	DNSNames     []string
	IPAddresses  []net.IP
	// Usages are the extended key usages: x509.ExtKeyUsageClientAuth,
	// x509.ExtKeyUsageServerAuth or both.
	Usages   []x509.ExtKeyUsage
	Validity time.Duration
}

// Issue signs a leaf certificate for pub. Its validity starts at now-Backdate
// and ends after Validity, but never after the CA's own NotAfter.
func (kp *KeyPair) Issue(tmpl LeafTemplate, pub crypto.PublicKey, now time.Time) (*x509.Certificate, error) {
	if err := CheckCA(kp.Cert); err != nil {
		return nil, err
	}
	if tmpl.CommonName == "" {
		return nil, errors.New("a certificate needs a common name")
	}
	if tmpl.Validity <= 0 {
		return nil, fmt.Errorf("certificate validity must be positive, got %s", tmpl.Validity)
	}
	if len(tmpl.Usages) == 0 {
		return nil, errors.New("a certificate needs at least one extended key usage")
	}
	for _, u := range tmpl.Usages {
		if u != x509.ExtKeyUsageClientAuth && u != x509.ExtKeyUsageServerAuth {
			return nil, fmt.Errorf("unsupported extended key usage %d", u)
		}
	}
	if _, err := AlgorithmOf(pub); err != nil {
		return nil, err
	}
	notBefore := now.Add(-Backdate).UTC()
	notAfter := now.Add(tmpl.Validity).UTC()
	if notAfter.After(kp.Cert.NotAfter) {
		notAfter = kp.Cert.NotAfter
	}
	if !notAfter.After(now) {
		return nil, fmt.Errorf("CA %q expired at %s", kp.Cert.Subject.CommonName, kp.Cert.NotAfter.Format(time.RFC3339))
	}
	keyUsage := x509.KeyUsageDigitalSignature
	if _, isRSA := pub.(*rsa.PublicKey); isRSA && hasUsage(tmpl.Usages, x509.ExtKeyUsageServerAuth) {
		// TLS 1.2 RSA key exchange encrypts the premaster secret to the server's key.
		keyUsage |= x509.KeyUsageKeyEncipherment
	}
	ski, err := subjectKeyID(pub)
	if err != nil {
		return nil, err
	}
	serial, err := randomSerial()
	if err != nil {
		return nil, err
	}
	template := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: tmpl.CommonName, Organization: tmpl.Organization},
		DNSNames:              tmpl.DNSNames,
		IPAddresses:           tmpl.IPAddresses,
		NotBefore:             notBefore,
		NotAfter:              notAfter,
		KeyUsage:              keyUsage,
		ExtKeyUsage:           tmpl.Usages,
		BasicConstraintsValid: true,
		SubjectKeyId:          ski,
	}
	return createCertificate(template, kp.Cert, pub, kp.Key)
}

// IssueKeyPair generates a key of the given algorithm and issues a leaf
// certificate for it. The operator keeps the pairs it issues and asks
// SignedBy of them at every reconcile, so the verdict on the new
// certificate is remembered from the start (not so for Issue, whose
// certificates, a kubelet's for one, are not asked about).
func (kp *KeyPair) IssueKeyPair(tmpl LeafTemplate, alg KeyAlgorithm, now time.Time) (*KeyPair, error) {
	key, err := GenerateKey(alg)
	if err != nil {
		return nil, err
	}
	cert, err := kp.Issue(tmpl, key.Public(), now)
	if err != nil {
		return nil, err
	}
	if mayCertify(kp.Cert) {
		// CreateCertificate checked that kp.Key matches kp.Cert's public
		// key and that the signature it made verifies with it.
		signatureVerdicts.add(Digest(cert.Raw, kp.Cert.Raw), true)
	}
	return &KeyPair{Cert: cert, Key: key}, nil
}

// CheckCA says why cert may not sign certificates, or nil when it may: a
// certificate of another kind stored as a CA would have every leaf it signs
// refused, by its peers and by SignedBy, and so issued again at every pass.
func CheckCA(cert *x509.Certificate) error {
	switch {
	case !cert.BasicConstraintsValid || !cert.IsCA:
		return fmt.Errorf("%q is not a CA certificate (basic constraints CA:TRUE)", cert.Subject.CommonName)
	case cert.KeyUsage != 0 && cert.KeyUsage&x509.KeyUsageCertSign == 0:
		return fmt.Errorf("%q may not sign certificates: its key usage lacks certSign", cert.Subject.CommonName)
	}
	return nil
}

// mayCertify reports whether CheckSignatureFrom accepts ca as an issuer
// whatever the signature: a parsed CA certificate (with its DER and public
// key) whose key usage, if it has one, allows signing certificates, with a
// public key of a known algorithm.
func mayCertify(ca *x509.Certificate) bool {
	return len(ca.Raw) > 0 && ca.PublicKey != nil && CheckCA(ca) == nil &&
		ca.PublicKeyAlgorithm != x509.UnknownPublicKeyAlgorithm
}

func createCertificate(template, parent *x509.Certificate, pub crypto.PublicKey, signer crypto.Signer) (*x509.Certificate, error) {
	der, err := x509.CreateCertificate(rand.Reader, template, parent, pub, signer)
	if err != nil {
		return nil, fmt.Errorf("signing certificate %q: %w", template.Subject.CommonName, err)
	}
	return x509.ParseCertificate(der)
}

func randomSerial() (*big.Int, error) {
	for {
		n, err := rand.Int(rand.Reader, serialLimit)
		if err != nil {
			return nil, fmt.Errorf("generating serial number: %w", err)
		}
		if n.Sign() > 0 {
			return n, nil
		}
	}
}

// subjectKeyID derives a key identifier from the public key's bits (RFC 7093
// section 2, method 1: the leftmost 160 bits of their SHA-256 digest).
func subjectKeyID(pub crypto.PublicKey) ([]byte, error) {
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return nil, fmt.Errorf("encoding public key: %w", err)
	}
	var spki struct {
		Algorithm pkix.AlgorithmIdentifier
		PublicKey asn1.BitString
	}
	if _, err := asn1.Unmarshal(der, &spki); err != nil {
		return nil, fmt.Errorf("decoding public key: %w", err)
	}
	sum := sha256.Sum256(spki.PublicKey.Bytes)
	return sum[:20], nil
}

func hasUsage(usages []x509.ExtKeyUsage, u x509.ExtKeyUsage) bool {
	for _, have := range usages {
		if have == u {
			return true
		}
	}
	return false
}

// Fingerprint returns the lowercase hex SHA-256 digest of a certificate's DER.
func Fingerprint(cert *x509.Certificate) string {
	sum := sha256.Sum256(cert.Raw)
	return hex.EncodeToString(sum[:])
}

// ShortFingerprint is the start of a fingerprint, enough to tell it apart
// in a message.
func ShortFingerprint(fingerprint string) string {
	if len(fingerprint) > 16 {
		return fingerprint[:16]
	}
	return fingerprint
}

// EncodeCertificates encodes certificates as consecutive PEM blocks, into
// one buffer sized for them all (see appendPEM).
func EncodeCertificates(certs ...*x509.Certificate) []byte {
	size := 0
	for _, c := range certs {
		size += pemSize(pemTypeCertificate, len(c.Raw))
	}
	out := make([]byte, 0, size)
	for _, c := range certs {
		out = appendPEM(out, pemTypeCertificate, c.Raw)
	}
	return out
}

// ParseCertificates parses every PEM block in data. Text between blocks is
// ignored; a block of another type, a block that does not parse, or no
// certificate at all is an error. So is a block that does not decode (bad
// base64, no END line), which encoding/pem skips: a bundle of two CAs whose
// second is cut off must not pass for a bundle of the first alone.
func ParseCertificates(data []byte) ([]*x509.Certificate, error) {
	begun := bytes.Count(data, []byte("-----BEGIN "))
	var certs []*x509.Certificate
	for {
		var block *pem.Block
		block, data = pem.Decode(data)
		if block == nil {
			break
		}
		if block.Type != pemTypeCertificate {
			return nil, fmt.Errorf("unexpected PEM block %q where a certificate was expected", block.Type)
		}
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("parsing certificate %d: %w", len(certs)+1, err)
		}
		certs = append(certs, cert)
	}
	if len(certs) == 0 {
		return nil, errors.New("no certificate PEM block found")
	}
	if begun != len(certs) {
		return nil, fmt.Errorf("%d of %d PEM blocks do not decode (bad base64, or no END line)", begun-len(certs), begun)
	}
	return certs, nil
}

// Verify checks that cert chains to one of roots and may be used for usage at
// the time now.
func Verify(cert *x509.Certificate, roots Bundle, usage x509.ExtKeyUsage, now time.Time) error {
	_, err := cert.Verify(x509.VerifyOptions{
		Roots:       roots.CertPool(),
		CurrentTime: now,
		KeyUsages:   []x509.ExtKeyUsage{usage},
	})
	return err
}

// SignedBy reports whether ca signed cert: the certificate names the CA's
// key as its authority and the CA's signature on it checks. The signature's
// verdict is remembered by the Digest of both certificates: the operator asks it
// of the same unchanged certificates on every reconcile, and hashing them
// costs a fraction of checking an ECDSA or RSA signature. A certificate
// IssueKeyPair made is remembered as signed from the start.
func SignedBy(cert, ca *x509.Certificate) bool {
	if !bytes.Equal(cert.AuthorityKeyId, ca.SubjectKeyId) {
		return false
	}
	key := Digest(cert.Raw, ca.Raw)
	if verdict, ok := signatureVerdicts.get(key); ok {
		return verdict
	}
	verdict := cert.CheckSignatureFrom(ca) == nil
	signatureVerdicts.add(key, verdict)
	return verdict
}

// signatureVerdicts holds SignedBy's last verdicts: in its younger half,
// enough for every leaf certificate of a thousand Clusters against both CAs
// of a rotation.
var signatureVerdicts = newMemo[bool](1 << 17)
