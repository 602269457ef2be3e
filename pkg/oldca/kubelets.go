package oldca

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"slices"
	"time"
)

// KubeletCertificates is the record of the kubelet certificates Carousel
// signed on CSRs: for each user (system:node:<name>) and CA, the last client
// certificate, and the last serving one, in the order they were recorded.
// The CSR signer keeps it in a ConfigMap per Cluster
// (credentials.KubeletCertificatesConfigMapName), key
// KubeletCertificatesDataKey, and records each certificate before it posts
// it, so that a kubelet that has no node agent to report its certificate
// is judged by what it was given.
//
// A kubelet uses the last certificate of each kind it got, so the last entry
// of a user of that kind is the one it holds; the last one of each other CA
// stays for the audit events, which may show the kubelet still on it. An
// entry goes once expired.
//
// The record never grows past MaxKubeletCertificatesBytes: a full record
// could not be written, and the CSRs could not be signed. Past it, it keeps
// only the last entry of each user and kind, and past that it forgets the
// oldest serving entries, which only an abort reads, and then the oldest
// client ones; until the last of those expires (UnrecordedUntil) it does not
// vouch for the kubelets without a node agent, nor for the kubelets' serving
// certificates until the last serving one does (UnrecordedServingUntil).
type KubeletCertificates struct {
	Signed []IssuedCertificate `json:"signed"`
	// UnrecordedUntil is when the last client certificate the record had no
	// room for expires; nil when it forgot none that is still valid.
	UnrecordedUntil *time.Time `json:"unrecordedUntil,omitempty"`
	// UnrecordedServingUntil is UnrecordedUntil of serving certificates.
	UnrecordedServingUntil *time.Time `json:"unrecordedServingUntil,omitempty"`
}

// MaxKubeletCertificatesBytes bounds the record's JSON, so that even
// uncompressed it stays under the 1 MiB of a ConfigMap with room to spare:
// some 3,500 certificates.
const MaxKubeletCertificatesBytes = 768 << 10

// KubeletCertificatesDataKey is the key, in binaryData, of the kubelet
// certificate record's ConfigMap that holds the record: its JSON (String),
// gzip-compressed (compressKubeletCertificates).
const KubeletCertificatesDataKey = "kubelets.json.gz"

// ReadKubeletCertificates reads the record from its ConfigMap's data and
// binaryData. A ConfigMap that has the JSON of development builds before
// 0.1.0 (data key kubelets.json) and no record as stored now is an error:
// read as empty, it would vouch for kubelets it forgot.
func ReadKubeletCertificates(data map[string]string, binaryData map[string][]byte) (*KubeletCertificates, error) {
	if _, old := data[oldKubeletCertificatesDataKey]; old && len(binaryData[KubeletCertificatesDataKey]) == 0 {
		return nil, fmt.Errorf("%s is stored as a development build stored it (data key %s)", kubeletCertificatesWhat, oldKubeletCertificatesDataKey)
	}
	return decodeKubeletCertificates(binaryData[KubeletCertificatesDataKey])
}

// oldKubeletCertificatesDataKey is where development builds before 0.1.0
// stored the record's JSON, in data.
const oldKubeletCertificatesDataKey = "kubelets.json"

// StoreKubeletCertificates puts record, the JSON of a record (String, or
// what Add returns), into data and binaryData as ReadKubeletCertificates
// reads it, and drops what development builds stored.
func StoreKubeletCertificates(record string, data map[string]string, binaryData map[string][]byte) {
	delete(data, oldKubeletCertificatesDataKey)
	binaryData[KubeletCertificatesDataKey] = compressKubeletCertificates(record)
}

// kubeletCertificatesWhat names the record in errors.
const kubeletCertificatesWhat = "the record of signed kubelet certificates"

// ParseKubeletCertificates reads a record's JSON (String); empty data is an
// empty record.
func ParseKubeletCertificates(data string) (*KubeletCertificates, error) {
	return parseRecord[KubeletCertificates](data, kubeletCertificatesWhat)
}

// decodeKubeletCertificates reads a record as stored; no data is an empty
// record. What decompresses past MaxKubeletCertificatesBytes is refused
// unread: the record never grows past it, and the ConfigMap is writable by
// whoever may edit ConfigMaps in the Cluster's namespace.
func decodeKubeletCertificates(stored []byte) (*KubeletCertificates, error) {
	if len(stored) == 0 {
		return &KubeletCertificates{}, nil
	}
	zr, err := gzip.NewReader(bytes.NewReader(stored))
	if err != nil {
		return nil, fmt.Errorf("decompressing %s: %w", kubeletCertificatesWhat, err)
	}
	data, err := io.ReadAll(io.LimitReader(zr, MaxKubeletCertificatesBytes+1))
	if err != nil {
		return nil, fmt.Errorf("decompressing %s: %w", kubeletCertificatesWhat, err)
	}
	if len(data) > MaxKubeletCertificatesBytes {
		return nil, fmt.Errorf("%s decompresses to more than %d bytes", kubeletCertificatesWhat, MaxKubeletCertificatesBytes)
	}
	return ParseKubeletCertificates(string(data))
}

// compressKubeletCertificates is a record's JSON (String, or what Add
// returns) as stored: gzip-compressed. The record is rewritten whole on each
// batch of CSRs signed; compressed, its hex digests and node names take
// about a fifth of the bytes, and the management cluster's API server and
// etcd handle a fifth of them on each write.
func compressKubeletCertificates(record string) []byte {
	var buf bytes.Buffer
	zw, err := gzip.NewWriterLevel(&buf, gzip.BestSpeed)
	if err == nil {
		_, err = zw.Write([]byte(record))
	}
	if err == nil {
		err = zw.Close()
	}
	if err != nil {
		panic(err) // a valid level, written to memory
	}
	return buf.Bytes()
}

// String is the record's JSON.
func (k *KubeletCertificates) String() string { return storedRecord(k) }

// Add records signed, in order, each replacing the entry of its user, kind
// and CA, forgets every certificate expired at now, and keeps the record
// within MaxKubeletCertificatesBytes. It returns the record's JSON (String),
// which it had to encode to measure it.
func (k *KubeletCertificates) Add(signed []IssuedCertificate, now time.Time) string {
	for _, s := range signed {
		k.Signed = append(slices.DeleteFunc(k.Signed, func(i IssuedCertificate) bool {
			return i.User == s.User && i.Serving == s.Serving && i.Issuer == s.Issuer
		}), s)
	}
	k.Signed = slices.DeleteFunc(k.Signed, func(i IssuedCertificate) bool { return !now.Before(i.NotAfter) })
	for _, until := range []**time.Time{&k.UnrecordedUntil, &k.UnrecordedServingUntil} {
		if *until != nil && !now.Before(**until) {
			*until = nil
		}
	}
	if stored := k.String(); len(stored) <= MaxKubeletCertificatesBytes {
		return stored
	}
	type holder struct {
		user    string
		serving bool
	}
	last := map[holder]int{}
	for i, c := range k.Signed {
		last[holder{c.User, c.Serving}] = i
	}
	var kept []IssuedCertificate
	for i, c := range k.Signed {
		if last[holder{c.User, c.Serving}] == i {
			kept = append(kept, c)
		}
	}
	k.Signed = kept
	// Counted entry by entry (each with its comma), then checked whole:
	// the unrecorded times may have come in.
	over := len(k.String()) - MaxKubeletCertificatesBytes
	forgotten := make([]bool, len(k.Signed))
	for _, serving := range []bool{true, false} {
		for i, c := range k.Signed {
			if over > 0 && c.Serving == serving {
				forgotten[i] = true
				over -= len(storedRecord(c)) + 1
				k.unrecorded(c)
			}
		}
	}
	kept = k.Signed[:0]
	for i, c := range k.Signed {
		if !forgotten[i] {
			kept = append(kept, c)
		}
	}
	k.Signed = kept
	for {
		stored := k.String()
		if len(k.Signed) == 0 || len(stored) <= MaxKubeletCertificatesBytes {
			return stored
		}
		i := max(slices.IndexFunc(k.Signed, func(c IssuedCertificate) bool { return c.Serving }), 0)
		k.unrecorded(k.Signed[i])
		k.Signed = slices.Delete(k.Signed, i, i+1)
	}
}

// unrecorded notes that the record forgot c, valid until its NotAfter.
func (k *KubeletCertificates) unrecorded(c IssuedCertificate) {
	until := &k.UnrecordedUntil
	if c.Serving {
		until = &k.UnrecordedServingUntil
	}
	if *until == nil || c.NotAfter.After(**until) {
		*until = &c.NotAfter
	}
}

// Find returns the recorded certificate that has fingerprint (a client
// certificate, when a client authenticated with it: a serving one has no
// client usage).
func (k *KubeletCertificates) Find(fingerprint string) (IssuedCertificate, bool) {
	if k == nil {
		return IssuedCertificate{}, false
	}
	return find(k.Signed, fingerprint)
}

// Holding returns the last client certificate recorded for the kubelet of
// node, and whether it is from the client CA issuer (its subject key
// identifier in hex) and has not expired at now: that kubelet loses access
// when issuer is deleted, unless it renews first.
func (k *KubeletCertificates) Holding(node, issuer string, now time.Time) (IssuedCertificate, bool) {
	return k.holding(node, false, issuer, now)
}

// HoldingServing returns the last serving certificate recorded for the
// kubelet of node, and whether it is from the kubelet CA issuer and has not
// expired at now: the API server no longer verifies that kubelet (logs,
// exec, port-forward) once issuer leaves its kubelet bundle, until the
// kubelet renews it.
func (k *KubeletCertificates) HoldingServing(node, issuer string, now time.Time) (IssuedCertificate, bool) {
	return k.holding(node, true, issuer, now)
}

func (k *KubeletCertificates) holding(node string, serving bool, issuer string, now time.Time) (IssuedCertificate, bool) {
	if k == nil {
		return IssuedCertificate{}, false
	}
	var last IssuedCertificate
	for _, i := range k.Signed {
		if i.User == nodeUserPrefix+node && i.Serving == serving {
			last = i
		}
	}
	return last, last.Issuer != "" && last.Issuer == issuer && now.Before(last.NotAfter)
}

// Stranded says why the kubelet of node loses access when the client CA
// dropped is deleted, or "" when it does not, or the record cannot tell: the
// last certificate recorded for it is from dropped and has not expired at now.
func (k *KubeletCertificates) Stranded(node, dropped string, now time.Time) string {
	last, holds := k.Holding(node, dropped, now)
	if !holds {
		return ""
	}
	return fmt.Sprintf("no node agent reports its kubelet's client certificate, and the last one Carousel signed it (X509SHA256=%s, %s) "+
		"is from client CA %s, valid until %s", short(last.Fingerprint), formatTime(last.IssuedAt), short(dropped), formatTime(last.NotAfter))
}
