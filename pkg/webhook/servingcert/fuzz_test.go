package servingcert

import (
	"crypto/x509"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"

	"github.com/carousel-dev/carousel/pkg/pki"
)

// fuzzWorld holds the CAs and serving certificates FuzzDecide builds states
// from, generated once: a key takes far longer than a decision.
type fuzzWorld struct {
	cas     []*pki.KeyPair
	serving []*pki.KeyPair
}

func newFuzzWorld(tb testing.TB) fuzzWorld {
	tb.Helper()
	ca := func(at time.Time, validity time.Duration) *pki.KeyPair {
		key, err := pki.GenerateKey(pki.ECDSAP256)
		if err != nil {
			tb.Fatal(err)
		}
		kp, err := pki.NewCA(pki.CATemplate{CommonName: "fuzz-ca", Validity: validity}, key, at)
		if err != nil {
			tb.Fatal(err)
		}
		return kp
	}
	leaf := func(ca *pki.KeyPair, at time.Time, validity time.Duration, usage x509.ExtKeyUsage, dnsNames ...string) *pki.KeyPair {
		kp, err := ca.IssueKeyPair(pki.LeafTemplate{CommonName: dnsNames[0], DNSNames: dnsNames, Usages: []x509.ExtKeyUsage{usage}, Validity: validity},
			pki.ECDSAP256, at)
		if err != nil {
			tb.Fatal(err)
		}
		return kp
	}
	current := ca(t0, settings.CAValidity)
	renewed := renewalTime(current.Cert).Add(time.Second)
	next := ca(renewed, settings.CAValidity)
	short := ca(t0, 2*time.Hour)
	server := x509.ExtKeyUsageServerAuth
	return fuzzWorld{
		cas: []*pki.KeyPair{current, next, short},
		serving: []*pki.KeyPair{
			leaf(current, t0, settings.CertValidity, server, names...),
			leaf(current, renewed.Add(-time.Hour), settings.CertValidity, server, names...),
			leaf(next, renewed, settings.CertValidity, server, names...),
			leaf(current, t0, settings.CertValidity, server, "other.svc"),
			leaf(short, t0, settings.CertValidity, server, names...), // ends with its CA, after 2h
			leaf(current, renewed, 10*time.Minute, server, names...),
			leaf(next, renewed, 10*time.Minute, server, names...),
			leaf(current, t0, settings.CertValidity, x509.ExtKeyUsageClientAuth, names...),
		},
	}
}

// pick returns the index'th element, or nil past the end.
func pick(kps []*pki.KeyPair, index uint8) *pki.KeyPair {
	if int(index) < len(kps) {
		return kps[index]
	}
	return nil
}

// The time window FuzzDecide draws "now" from, after t0: past the expiry of
// the first CA (300h) and into the life of the renewed one.
const (
	fuzzSpan        = 600 * time.Hour
	fuzzPropagation = 2 * time.Hour
)

// FuzzDecide checks the renewal policy on any stored state (any CA, any
// subset of CAs as the bundle, any served certificate, injected any time or
// not yet), any time and any propagation delay:
//
//   - a served certificate that is still valid and trusted is replaced only
//     by one from a CA that the webhook configuration has held for at least
//     the propagation delay: never by a new CA's, never while the current CA
//     is not injected or injected too recently;
//   - a served certificate that is expired or not trusted is always replaced;
//   - a new CA is issued exactly when there is none or it is due (two thirds
//     of its life); expired CAs are pruned exactly when the bundle has one;
//     a decision that changes something says why, one that changes nothing
//     says nothing;
//   - carrying the decision out, as the rotator does, yields a valid current
//     CA in the bundle, no expired CA, and a served certificate the bundle
//     trusts; deciding again on that state changes nothing, and nothing
//     changes before the RecheckAt it returns.
func FuzzDecide(f *testing.F) {
	world := newFuzzWorld(f)
	hour := uint32(time.Hour / time.Second)
	caDue := uint32(renewalTime(world.cas[0].Cert).Sub(t0) / time.Second)
	// Arguments: CA index (past the end: none), bundle mask over the CAs,
	// serving index (past the end: none), now in seconds after t0, whether
	// the bundle was injected, seconds between the injection and now,
	// propagation delay in seconds, whether the DNS names changed, and where
	// between now and RecheckAt to check that nothing changed (of 65536).
	f.Add(uint8(9), uint8(0), uint8(9), hour, false, uint32(0), uint32(60), false, uint16(0))           // empty Secret
	f.Add(uint8(0), uint8(1), uint8(0), 2*hour, true, hour, uint32(60), false, uint16(30000))           // current
	f.Add(uint8(0), uint8(1), uint8(0), 25*hour, true, 24*hour, uint32(60), false, uint16(0))           // serving due
	f.Add(uint8(0), uint8(1), uint8(9), 2*hour, true, hour, uint32(60), false, uint16(0))               // serving lost
	f.Add(uint8(0), uint8(1), uint8(0), 2*hour, true, hour, uint32(60), true, uint16(0))                // names changed
	f.Add(uint8(0), uint8(1), uint8(1), caDue, true, caDue, uint32(60), false, uint16(0))               // CA due
	f.Add(uint8(1), uint8(3), uint8(1), caDue+30, true, uint32(29), uint32(60), false, uint16(65535))   // new CA propagating
	f.Add(uint8(1), uint8(3), uint8(1), caDue+3600, false, uint32(0), uint32(60), false, uint16(9))     // new CA not injected
	f.Add(uint8(1), uint8(3), uint8(1), caDue+61, true, uint32(60), uint32(60), false, uint16(0))       // new CA propagated
	f.Add(uint8(1), uint8(3), uint8(5), caDue+30, true, uint32(29), uint32(3600), false, uint16(65535)) // serving expires while propagating
	f.Add(uint8(9), uint8(1), uint8(0), 2*hour, true, hour, uint32(60), false, uint16(0))               // CA lost, trusted serving
	f.Add(uint8(0), uint8(1), uint8(0), 301*hour, true, 300*hour, uint32(60), false, uint16(0))         // CA expired
	f.Add(uint8(1), uint8(3), uint8(2), 301*hour, true, 100*hour, uint32(60), false, uint16(0))         // expired CA in the bundle
	f.Add(uint8(2), uint8(4), uint8(4), 3*hour, true, 3*hour, uint32(60), false, uint16(0))             // short CA expired
	f.Add(uint8(0), uint8(1), uint8(7), 2*hour, true, hour, uint32(0), false, uint16(0))                // client certificate served
	f.Fuzz(func(t *testing.T, caIndex, bundleMask, servingIndex uint8, nowSec uint32, injected bool, injectedAgo, propagationSec uint32,
		namesChanged bool, recheckFraction uint16) {
		now := t0.Add(time.Duration(nowSec) * time.Second % fuzzSpan)
		cfg := settings
		// At least a second: with none, a new CA signs on the sync after the
		// one that injected it, and "deciding again changes nothing" needs two.
		cfg.TrustPropagation = time.Duration(propagationSec)*time.Second%fuzzPropagation + time.Second
		if namesChanged {
			cfg.DNSNames = []string{"other.svc", names[0]}
		}
		s := State{CA: pick(world.cas, caIndex), Serving: pick(world.serving, servingIndex)}
		for i, ca := range world.cas {
			if bundleMask&(1<<i) != 0 {
				s.Bundle = append(s.Bundle, ca.Cert)
			}
		}
		s.Bundle = pki.NewBundle(s.Bundle...)
		if injected {
			s.InjectedAt = now.Add(-time.Duration(injectedAgo) * time.Second % fuzzSpan)
		}
		// What Sync decides on: the current CA is always in the bundle, or
		// the bundle is not injected yet.
		(&Rotator{}).recover(&s, &admissionregistrationv1.ValidatingWebhookConfiguration{}, now)
		if s.CA != nil && now.Before(s.CA.Cert.NotBefore) {
			// A CA from the future: the replica that issued it runs ahead
			// of this one by more than pki.Backdate. Not covered here.
			t.Skip("clock skew between replicas beyond the backdate")
		}

		d := Decide(now, s, cfg)
		// Expired at its NotAfter, to the second (x509 still verifies it then).
		trusted := s.Serving != nil && now.Before(s.Serving.Cert.NotAfter) && pki.Verify(s.Serving.Cert, s.Bundle, x509.ExtKeyUsageServerAuth, now) == nil
		if !trusted && !d.NewServing {
			t.Fatalf("%+v keeps serving a certificate that is not trusted at %s", d, now)
		}
		if wantCA := s.CA == nil || !now.Before(renewalTime(s.CA.Cert)); d.NewCA != wantCA {
			t.Fatalf("%+v: NewCA %v, want %v (now %s)", d, d.NewCA, wantCA, now)
		}
		if d.Prune != hasExpired(s.Bundle, now) {
			t.Fatalf("%+v: Prune %v with %d of %d CAs unexpired at %s", d, d.Prune, len(s.Bundle.Unexpired(now)), len(s.Bundle), now)
		}
		if d.Changes() != (d.NewCA || d.NewServing || d.Prune) || (d.Reason != "") != d.Changes() {
			t.Fatalf("%+v: Changes() = %v, reason %q", d, d.Changes(), d.Reason)
		}

		// Carry it out the way Sync does: apply, inject, record the injection.
		next := s
		if d.Changes() {
			var err error
			if next, err = apply(d, s, cfg, now); err != nil {
				t.Fatalf("applying %+v: %v", d, err)
			}
		}
		// A trusted certificate is replaced by one that chains to another CA
		// only once that CA propagated; one from the CA it chains to needs no wait.
		if d.NewServing && trusted && !issuer(s.Bundle, s.Serving).Equal(issuer(next.Bundle, next.Serving)) &&
			(d.NewCA || s.InjectedAt.IsZero() || now.Before(s.InjectedAt.Add(cfg.TrustPropagation))) {
			t.Fatalf("%+v replaces a trusted certificate with one from a CA not yet propagated (injected at %s, propagation %s, now %s)",
				d, s.InjectedAt, cfg.TrustPropagation, now)
		}
		if next.InjectedAt.IsZero() {
			next.InjectedAt = now
		}
		if next.CA == nil || !next.Bundle.Contains(next.CA.Cert) || !now.Before(renewalTime(next.CA.Cert)) {
			t.Fatalf("after %+v: no current CA in the bundle that is not due", d)
		}
		if hasExpired(next.Bundle, now) {
			t.Fatalf("after %+v: an expired CA stays in the bundle", d)
		}
		if next.Serving == nil || pki.Verify(next.Serving.Cert, next.Bundle, x509.ExtKeyUsageServerAuth, now) != nil {
			t.Fatalf("after %+v: the served certificate is not trusted", d)
		}
		again := Decide(now, next, cfg)
		if again.Changes() {
			t.Fatalf("after %+v, deciding again at once gives %+v", d, again)
		}
		if !again.RecheckAt.After(now) {
			t.Fatalf("after %+v: RecheckAt %s is not after now %s", d, again.RecheckAt, now)
		}
		// To the second, the precision of certificate times: a CA whose
		// NotAfter has passed is pruned on the next second (earliestExpiry).
		later := now.Add(time.Duration(float64(again.RecheckAt.Sub(now)) * float64(recheckFraction) / 65536)).Truncate(time.Second)
		if d := Decide(later, next, cfg); d.Changes() {
			t.Fatalf("Decide at %s says recheck at %s, but at %s it gives %+v", now, again.RecheckAt, later, d)
		}
	})
}

// issuer is the CA of bundle that kp's certificate chains to, or nil.
func issuer(bundle pki.Bundle, kp *pki.KeyPair) *x509.Certificate {
	for _, ca := range bundle {
		if kp != nil && kp.Cert.CheckSignatureFrom(ca) == nil {
			return ca
		}
	}
	return nil
}
