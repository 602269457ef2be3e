package oldca

import (
	"cmp"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
)

// Kubeconfig is one kubeconfig that kubectl carousel kubeconfig issued: the
// user its certificate names, the certificate, the client CA that signed it,
// and when it was issued and expires. The plugin records it before it prints
// the kubeconfig, so that the gate knows of it whether or not it is used.
type Kubeconfig struct {
	User string `json:"user"`
	// Fingerprint is the hex SHA-256 of the certificate's DER, as in Credential.
	Fingerprint string `json:"sha256"`
	// Issuer is the hex subject key identifier of the client CA that signed it.
	Issuer   string    `json:"issuer"`
	IssuedAt time.Time `json:"issuedAt"`
	NotAfter time.Time `json:"notAfter"`
}

// Kubeconfigs is the record of the kubeconfigs issued that have not
// expired, in the order they were issued. The plugin keeps it in a ConfigMap
// per Cluster (credentials.IssuedKubeconfigsConfigMapName), key
// KubeconfigsDataKey. No kubeconfig lives longer than a day, so it holds a
// day of them at most.
type Kubeconfigs struct {
	Issued []Kubeconfig `json:"issued"`
}

// KubeconfigsDataKey is the key of the kubeconfig record's ConfigMap that
// holds the record.
const KubeconfigsDataKey = "kubeconfigs.json"

// ParseKubeconfigs reads a record; empty data is an empty record.
func ParseKubeconfigs(data string) (*Kubeconfigs, error) {
	k := &Kubeconfigs{}
	if data == "" {
		return k, nil
	}
	if err := json.Unmarshal([]byte(data), k); err != nil {
		return nil, fmt.Errorf("parsing the record of issued kubeconfigs: %w", err)
	}
	return k, nil
}

// String is the record as stored.
func (k *Kubeconfigs) String() string {
	data, err := json.Marshal(k)
	if err != nil {
		panic(err) // only strings and times
	}
	return string(data)
}

// Add records issued and forgets every kubeconfig expired at now.
func (k *Kubeconfigs) Add(issued Kubeconfig, now time.Time) {
	k.Issued = append(slices.DeleteFunc(k.Issued, func(i Kubeconfig) bool { return !now.Before(i.NotAfter) }), issued)
}

// Find returns the recorded kubeconfig whose certificate has fingerprint.
func (k *Kubeconfigs) Find(fingerprint string) (Kubeconfig, bool) {
	if k == nil {
		return Kubeconfig{}, false
	}
	i := slices.IndexFunc(k.Issued, func(i Kubeconfig) bool { return i.Fingerprint == fingerprint })
	if i < 0 {
		return Kubeconfig{}, false
	}
	return k.Issued[i], true
}

// Stranded are the users holding a kubeconfig that stops working when the
// client CAs other than issuer are dropped, one Dependent each: a user with
// a kubeconfig from another CA that has not expired at now, and none from
// issuer issued after it. A user who has taken a new kubeconfig from
// issuer is taken to have moved to it, even once that one has expired: its
// name (--name) is how the record tells users apart. The message names the latest such kubeconfig
// and says how to move.
func (k *Kubeconfigs) Stranded(issuer string, now time.Time) []Dependent {
	if k == nil {
		return nil
	}
	latest := map[string]Kubeconfig{} // user -> the latest kubeconfig from another CA
	count := map[string]int{}
	for _, i := range k.Issued {
		switch {
		case i.Issuer == issuer:
			if l, ok := latest[i.User]; ok && !i.IssuedAt.Before(l.IssuedAt) {
				delete(latest, i.User)
				delete(count, i.User)
			}
		case !now.Before(i.NotAfter):
		default:
			if l, ok := latest[i.User]; !ok || !i.IssuedAt.Before(l.IssuedAt) {
				latest[i.User] = i
			}
			count[i.User]++
		}
	}
	deps := make([]Dependent, 0, len(latest))
	for user, l := range latest {
		many := ""
		if count[user] > 1 {
			many = fmt.Sprintf(" (and %d more before it)", count[user]-1)
		}
		deps = append(deps, Dependent{Kind: v1alpha1.OldCADependentKubeconfig, Name: user, Expires: l.NotAfter, Message: fmt.Sprintf(
			"holds a kubeconfig from kubectl carousel kubeconfig (X509SHA256=%s), issued %s from client CA %s and valid until %s%s: "+
				"issue it a new one with --name %s, or wait until it expires",
			short(l.Fingerprint), formatTime(l.IssuedAt), short(l.Issuer), formatTime(l.NotAfter), many, strings.TrimPrefix(user, adminUserPrefix))})
	}
	slices.SortFunc(deps, func(a, b Dependent) int { return cmp.Compare(a.Name, b.Name) })
	return deps
}
