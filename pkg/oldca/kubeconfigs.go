package oldca

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
)

// IssuedCertificate is one client certificate Carousel issued outside its
// Secrets, in a kubeconfig of kubectl carousel kubeconfig or to a kubelet: the
// user it names, its fingerprint, the client CA that signed it, and when it
// was issued and expires. Each is recorded before it is handed out (the
// kubeconfig printed, the certificate posted on its CSR), so that the gate
// knows of it whether or not it is used.
type IssuedCertificate struct {
	User string `json:"user"`
	// Fingerprint is the hex SHA-256 of the certificate's DER, as in Credential.
	Fingerprint string `json:"sha256"`
	// Issuer is the hex subject key identifier of the client CA that signed
	// it; of the kubelet CA for a serving certificate.
	Issuer   string    `json:"issuer"`
	IssuedAt time.Time `json:"issuedAt"`
	NotAfter time.Time `json:"notAfter"`
	// Serving marks a kubelet's serving certificate, in the kubelet record:
	// it authenticates nobody, and the API server verifies the kubelet with it.
	Serving bool `json:"serving,omitempty"`
}

// Kubeconfigs is the record of the kubeconfigs issued, in the order they were
// recorded, until ExpiredKubeconfigKept past their expiry. The plugin keeps
// it in a ConfigMap per Cluster (credentials.IssuedKubeconfigsConfigMapName),
// key KubeconfigsDataKey. An entry outlives its kubeconfig. Dropping by
// expiry may leave an earlier, longer-lived entry of a user after a later
// one is gone: that user then counts as holding it (Stranded), the side that
// keeps a client from being locked out.
type Kubeconfigs struct {
	Issued []IssuedCertificate `json:"issued"`
}

// KubeconfigsDataKey is the key of the kubeconfig record's ConfigMap that
// holds the record.
const KubeconfigsDataKey = "kubeconfigs.json"

// ParseKubeconfigs reads a record; empty data is an empty record.
func ParseKubeconfigs(data string) (*Kubeconfigs, error) {
	return parseRecord[Kubeconfigs](data, "the record of issued kubeconfigs")
}

// String is the record as stored.
func (k *Kubeconfigs) String() string { return storedRecord(k) }

// ExpiredKubeconfigKept is how long past its expiry a kubeconfig stays in the
// record. now is the clock of whoever writes the record, the plugin on
// someone's workstation: a day lets that clock run up to a day ahead without
// dropping a kubeconfig that is still valid, which the gate would then not
// see.
const ExpiredKubeconfigKept = 24 * time.Hour

// Add records issued and forgets every kubeconfig that expired
// ExpiredKubeconfigKept or longer before now.
func (k *Kubeconfigs) Add(issued IssuedCertificate, now time.Time) {
	cutoff := now.Add(-ExpiredKubeconfigKept)
	k.Issued = append(slices.DeleteFunc(k.Issued, func(i IssuedCertificate) bool { return !i.NotAfter.After(cutoff) }), issued)
}

// Find returns the recorded kubeconfig whose certificate has fingerprint.
func (k *Kubeconfigs) Find(fingerprint string) (IssuedCertificate, bool) {
	if k == nil {
		return IssuedCertificate{}, false
	}
	return find(k.Issued, fingerprint)
}

// find returns the certificate of issued that has fingerprint.
func find(issued []IssuedCertificate, fingerprint string) (IssuedCertificate, bool) {
	i := slices.IndexFunc(issued, func(i IssuedCertificate) bool { return i.Fingerprint == fingerprint })
	if i < 0 {
		return IssuedCertificate{}, false
	}
	return issued[i], true
}

// Stranded are the users who lose access when the client CA dropped is
// deleted, one Dependent each: a user holding a kubeconfig from dropped
// that has not expired at now, and none from stays recorded after it. A
// user who took a kubeconfig from stays is taken to have moved to it, even
// once that one expired: its name (--name) is how the record tells users
// apart. The message names the latest such kubeconfig, and Expires is when
// the last of them expires.
func (k *Kubeconfigs) Stranded(dropped, stays string, now time.Time) []Dependent {
	if k == nil {
		return nil
	}
	type held struct {
		latest IssuedCertificate
		count  int
		until  time.Time
	}
	byUser := map[string]*held{}
	for _, i := range k.Issued {
		switch {
		case i.Issuer == stays:
			delete(byUser, i.User)
		case i.Issuer == dropped && now.Before(i.NotAfter):
			h := byUser[i.User]
			if h == nil {
				h = &held{}
				byUser[i.User] = h
			}
			h.latest, h.count = i, h.count+1
			if i.NotAfter.After(h.until) {
				h.until = i.NotAfter
			}
		}
	}
	deps := make([]Dependent, 0, len(byUser))
	for user, h := range byUser {
		many := ""
		if h.count > 1 {
			many = fmt.Sprintf(" (and %d more before it)", h.count-1)
		}
		deps = append(deps, Dependent{Kind: v1alpha1.OldCADependentKubeconfig, Name: user, Expires: h.until, Message: fmt.Sprintf(
			"holds a kubeconfig from kubectl carousel kubeconfig (X509SHA256=%s) issued %s from client CA %s%s, valid until %s: "+
				"issue it a new one with --name %s, or wait until then",
			short(h.latest.Fingerprint), formatTime(h.latest.IssuedAt), short(dropped), many, formatTime(h.until), strings.TrimPrefix(user, adminUserPrefix))})
	}
	slices.SortFunc(deps, func(a, b Dependent) int { return cmp.Compare(a.Name, b.Name) })
	return deps
}
