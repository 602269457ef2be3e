// Package servingcert keeps the serving certificate of Carousel's own
// admission webhook. It issues a CA and a serving certificate, stores both in
// a Secret, injects the CA bundle into the ValidatingWebhookConfiguration and
// renews them before they expire, with the same rule as the clusters Carousel
// rotates: a new CA is trusted first, and signs the served certificate only
// once the API server has had time to see it.
package servingcert

import (
	"crypto/x509"
	"net"
	"slices"
	"time"

	"github.com/carousel-dev/carousel/pkg/pki"
)

// Settings are the lifetimes and names of the webhook's certificates.
type Settings struct {
	// DNSNames are the serving certificate's names: the webhook Service's
	// DNS names, and any IP address at which it is reached (--audit-webhook-url
	// may name one), which goes into the certificate's IP addresses.
	DNSNames []string
	// CAValidity and CertValidity are the lifetimes of a new CA and of a new
	// serving certificate. Each is renewed when a third of its lifetime is left.
	CAValidity, CertValidity time.Duration
	// TrustPropagation is how long a CA must have been in the webhook
	// configuration before the served certificate may chain to it: the time
	// the API server takes to see a changed configuration.
	TrustPropagation time.Duration
}

// DefaultSettings returns five-year CAs, one-year serving certificates and a
// minute for the API server to pick up a new bundle.
func DefaultSettings(dnsNames []string) Settings {
	return Settings{DNSNames: dnsNames, CAValidity: 5 * 365 * 24 * time.Hour, CertValidity: 365 * 24 * time.Hour, TrustPropagation: time.Minute}
}

// State is what the Secret holds. Missing or unreadable parts are nil.
type State struct {
	// CA signs serving certificates: the newest CA.
	CA *pki.KeyPair
	// Bundle is every CA the webhook configuration trusts.
	Bundle pki.Bundle
	// Serving is the certificate the webhook serves.
	Serving *pki.KeyPair
	// InjectedAt is when the webhook configuration was first seen holding
	// Bundle; zero while a new CA has not reached it.
	InjectedAt time.Time
}

// Decision says what a sync must change, and when to look again.
type Decision struct {
	// NewCA issues a CA that joins the bundle and signs from now on.
	NewCA bool
	// NewServing issues a serving certificate from the (possibly new) CA.
	NewServing bool
	// Prune removes expired CAs from the bundle.
	Prune bool
	// Reason explains the change, for the log.
	Reason string
	// RecheckAt is, for a decision that changes nothing, when the decision
	// may change without anything else changing.
	RecheckAt time.Time
}

// Changes reports whether the decision writes the Secret.
func (d Decision) Changes() bool { return d.NewCA || d.NewServing || d.Prune }

// Decide is the whole renewal policy: a pure function of the stored state and
// the time.
func Decide(now time.Time, s State, cfg Settings) Decision {
	// A new CA never signs the served certificate at once, unless nothing
	// trusted is being served anyway: the old certificate stays until the
	// API server has seen the new CA.
	keepServing := servingStillValid(now, s)
	if s.CA == nil || s.CA.Cert.NotAfter.Before(now) {
		// Nothing can sign: start over. The CAs of the bundle stay trusted
		// while they are valid, so replicas serving the old certificate keep
		// working.
		return Decision{NewCA: true, NewServing: !keepServing, Prune: hasExpired(s.Bundle, now), Reason: "no valid CA"}
	}
	d := Decision{RecheckAt: renewalTime(s.CA.Cert), Prune: hasExpired(s.Bundle, now)}
	if !now.Before(d.RecheckAt) {
		return Decision{NewCA: true, NewServing: !keepServing, Prune: d.Prune, Reason: "CA due for renewal"}
	}
	if next, ok := earliestExpiry(s.Bundle); ok {
		d.RecheckAt = earliest(d.RecheckAt, next)
	}
	reason := servingReason(now, s, cfg)
	if reason == "" {
		d.RecheckAt = earliest(d.RecheckAt, renewalTime(s.Serving.Cert))
		return withPruneReason(d)
	}
	// Only a move to another CA waits for it to propagate: a certificate from
	// the CA the served one chains to (renewed, or with other names) is
	// trusted wherever the served one is.
	if keepServing && !signedBy(s.Serving, s.CA, now) && (s.InjectedAt.IsZero() || now.Before(s.InjectedAt.Add(cfg.TrustPropagation))) {
		trustedAt := s.InjectedAt.Add(cfg.TrustPropagation)
		if s.InjectedAt.IsZero() {
			trustedAt = now.Add(cfg.TrustPropagation)
		}
		// The certificate served meanwhile may expire first: then it
		// is replaced at once, as nothing trusted is served any more.
		d.RecheckAt = earliest(d.RecheckAt, earliest(trustedAt, s.Serving.Cert.NotAfter))
		return withPruneReason(d)
	}
	d.NewServing, d.Reason = true, reason
	return d
}

// servingReason says why the serving certificate must be reissued, or "".
func servingReason(now time.Time, s State, cfg Settings) string {
	switch {
	case s.Serving == nil:
		return "no serving certificate"
	case !now.Before(s.Serving.Cert.NotAfter):
		return "serving certificate expired"
	case pki.Verify(s.Serving.Cert, pki.NewBundle(s.CA.Cert), x509.ExtKeyUsageServerAuth, now) != nil:
		return "serving certificate not signed by the current CA"
	case !sameNames(s.Serving.Cert, cfg.DNSNames):
		return "serving certificate names changed"
	case !now.Before(renewalTime(s.Serving.Cert)):
		return "serving certificate due for renewal"
	}
	return ""
}

// servingStillValid reports whether the served certificate is still valid and
// trusted, so that replacing it may wait. At its NotAfter it is expired, as
// servingReason says (x509 would still verify it in that second).
func servingStillValid(now time.Time, s State) bool {
	return s.Serving != nil && now.Before(s.Serving.Cert.NotAfter) &&
		pki.Verify(s.Serving.Cert, s.Bundle, x509.ExtKeyUsageServerAuth, now) == nil
}

func withPruneReason(d Decision) Decision {
	if d.Prune {
		d.Reason = "expired CA in the bundle"
	}
	return d
}

// renewalTime is when two thirds of the certificate's lifetime have passed.
func renewalTime(c *x509.Certificate) time.Time {
	return c.NotBefore.Add(c.NotAfter.Sub(c.NotBefore) * 2 / 3)
}

func hasExpired(b pki.Bundle, now time.Time) bool { return len(b.Unexpired(now)) != len(b) }

func earliestExpiry(b pki.Bundle) (time.Time, bool) {
	if len(b) == 0 {
		return time.Time{}, false
	}
	t := b[0].NotAfter
	for _, c := range b[1:] {
		t = earliest(t, c.NotAfter)
	}
	// A CA is pruned the moment after its NotAfter.
	return t.Add(time.Second), true
}

func earliest(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// SplitNames sorts the serving certificate's names: an IP address goes into its
// IP addresses, as a TLS client checks a host that is one only against those
// (a Go client, kube-apiserver's, refuses an IP among the DNS names), and any
// other name into its DNS names.
func SplitNames(names []string) (dnsNames []string, ips []net.IP) {
	for _, n := range names {
		if ip := net.ParseIP(n); ip != nil {
			ips = append(ips, ip)
		} else {
			dnsNames = append(dnsNames, n)
		}
	}
	return dnsNames, ips
}

// sameNames reports whether cert holds exactly names, each where
// SplitNames puts it: a certificate with an IP address among its DNS names
// (as issued before IP addresses were told apart) is issued again.
func sameNames(cert *x509.Certificate, names []string) bool {
	dnsNames, ips := SplitNames(names)
	return sameStrings(cert.DNSNames, dnsNames) && sameStrings(ipStrings(cert.IPAddresses), ipStrings(ips))
}

func ipStrings(ips []net.IP) []string {
	s := make([]string, len(ips))
	for i, ip := range ips {
		s[i] = ip.String()
	}
	return s
}

func sameStrings(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}
