package oldca

import (
	"fmt"
	"slices"
	"time"
)

// KubeletCertificates is the record of the kubelet client certificates
// Carousel signed on CSRs: for each user (system:node:<name>) and client CA,
// the last one, in the order they were recorded. The CSR signer keeps it in a
// ConfigMap per Cluster (credentials.KubeletCertificatesConfigMapName), key
// KubeletCertificatesDataKey, and records each certificate before it posts
// it, so that a kubelet that has no node agent to report its certificate
// is judged by what it was given.
//
// A kubelet uses the last certificate it got, so the last entry of a user is
// the one it holds; the last one of each other CA stays for the audit
// events, which may show the kubelet still on it. An entry goes once expired.
type KubeletCertificates struct {
	Signed []IssuedCertificate `json:"signed"`
}

// KubeletCertificatesDataKey is the key of the kubelet certificate record's
// ConfigMap that holds the record.
const KubeletCertificatesDataKey = "kubelets.json"

// ParseKubeletCertificates reads a record; empty data is an empty record.
func ParseKubeletCertificates(data string) (*KubeletCertificates, error) {
	return parseRecord[KubeletCertificates](data, "the record of signed kubelet client certificates")
}

// String is the record as stored.
func (k *KubeletCertificates) String() string { return storedRecord(k) }

// Add records signed, in order, each replacing the entry of its user and
// CA, and forgets every certificate expired at now.
func (k *KubeletCertificates) Add(signed []IssuedCertificate, now time.Time) {
	for _, s := range signed {
		k.Signed = append(slices.DeleteFunc(k.Signed, func(i IssuedCertificate) bool { return i.User == s.User && i.Issuer == s.Issuer }), s)
	}
	k.Signed = slices.DeleteFunc(k.Signed, func(i IssuedCertificate) bool { return !now.Before(i.NotAfter) })
}

// Find returns the recorded certificate that has fingerprint.
func (k *KubeletCertificates) Find(fingerprint string) (IssuedCertificate, bool) {
	if k == nil {
		return IssuedCertificate{}, false
	}
	return find(k.Signed, fingerprint)
}

// Stranded says why the kubelet of node loses access when the client CA
// dropped is deleted, or "" when it does not, or the record cannot tell: the
// last certificate recorded for it is from dropped and has not expired at now.
func (k *KubeletCertificates) Stranded(node, dropped string, now time.Time) string {
	if k == nil {
		return ""
	}
	var last IssuedCertificate
	for _, i := range k.Signed {
		if i.User == nodeUserPrefix+node {
			last = i
		}
	}
	if last.Issuer == "" || last.Issuer != dropped || !now.Before(last.NotAfter) {
		return ""
	}
	return fmt.Sprintf("no node agent reports its kubelet's client certificate, and the last one Carousel signed it (X509SHA256=%s, %s) "+
		"is from client CA %s, valid until %s", short(last.Fingerprint), formatTime(last.IssuedAt), short(dropped), formatTime(last.NotAfter))
}
