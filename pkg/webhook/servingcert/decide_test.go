package servingcert

import (
	"crypto/x509"
	"testing"
	"time"

	"github.com/carousel-dev/carousel/pkg/pki"
)

var (
	t0       = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	names    = []string{"carousel-webhook.carousel-system.svc"}
	settings = Settings{DNSNames: names, CAValidity: 300 * time.Hour, CertValidity: 30 * time.Hour, TrustPropagation: time.Minute}
)

func newCA(t *testing.T, at time.Time) *pki.KeyPair {
	t.Helper()
	key, err := pki.GenerateKey(pki.ECDSAP256)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := pki.NewCA(pki.CATemplate{CommonName: "test-ca", Validity: settings.CAValidity}, key, at)
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

func newServing(t *testing.T, ca *pki.KeyPair, at time.Time, dnsNames ...string) *pki.KeyPair {
	t.Helper()
	kp, err := ca.IssueKeyPair(pki.LeafTemplate{
		CommonName: dnsNames[0], DNSNames: dnsNames, Usages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, Validity: settings.CertValidity,
	}, pki.ECDSAP256, at)
	if err != nil {
		t.Fatal(err)
	}
	return kp
}

func TestDecide(t *testing.T) {
	ca := newCA(t, t0)
	// The CA is due 200h after its NotBefore (t0 - 5m backdate).
	caDue := renewalTime(ca.Cert)
	serving := newServing(t, ca, t0, names...)
	servingDue := renewalTime(serving.Cert)
	current := State{CA: ca, Bundle: pki.NewBundle(ca.Cert), Serving: serving, InjectedAt: t0}

	renewedAt := caDue.Add(time.Second)
	newer := newCA(t, renewedAt)
	oldServing := newServing(t, ca, caDue.Add(-time.Hour), names...)
	justRenewed := State{CA: newer, Bundle: pki.NewBundle(ca.Cert, newer.Cert), Serving: oldServing, InjectedAt: renewedAt}
	notYetInjected := justRenewed
	notYetInjected.InjectedAt = time.Time{}
	expiringWhileItPropagates := justRenewed
	expiringWhileItPropagates.Serving = newServing(t, ca, renewedAt.Add(30*time.Second-settings.CertValidity), names...)

	// An audit webhook URL may reach the webhook Service at an IP address.
	withIP := Settings{DNSNames: append([]string{"10.0.0.5"}, names...), CAValidity: settings.CAValidity, CertValidity: settings.CertValidity, TrustPropagation: time.Minute}
	tmpl, err := servingTemplate(withIP)
	if err != nil {
		t.Fatal(err)
	}
	ipServing, err := ca.IssueKeyPair(tmpl, pki.ECDSAP256, t0)
	if err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name      string
		now       time.Time
		state     State
		settings  Settings
		want      Decision
		wantCheck time.Time // zero: not checked
	}{
		{name: "empty Secret", now: t0, state: State{}, want: Decision{NewCA: true, NewServing: true, Reason: "no valid CA"}},
		{name: "current: nothing to do until the serving certificate is due", now: t0.Add(time.Hour), state: current, want: Decision{}, wantCheck: servingDue},
		{name: "serving certificate due", now: servingDue, state: current, want: Decision{NewServing: true, Reason: "serving certificate due for renewal"}},
		{name: "serving certificate missing", now: t0, state: State{CA: ca, Bundle: current.Bundle, InjectedAt: t0}, want: Decision{NewServing: true, Reason: "no serving certificate"}},
		{
			name: "DNS names changed", now: t0.Add(time.Hour), state: current,
			settings: Settings{DNSNames: []string{"other.svc"}, CAValidity: settings.CAValidity, CertValidity: settings.CertValidity, TrustPropagation: time.Minute},
			want:     Decision{NewServing: true, Reason: "serving certificate names changed"},
		},
		{
			// The certificate stays on the CA it is served from: nothing new
			// to propagate, however long a new CA would wait.
			name: "DNS names changed within a long propagation of the CA served from", now: t0.Add(time.Hour), state: current,
			settings: Settings{DNSNames: []string{"other.svc"}, CAValidity: settings.CAValidity, CertValidity: settings.CertValidity, TrustPropagation: 100 * time.Hour},
			want:     Decision{NewServing: true, Reason: "serving certificate names changed"},
		},
		{
			// As issued before IP addresses were told apart: a TLS client
			// refuses it for https://10.0.0.5.
			name: "an IP address among the certificate's DNS names", now: t0.Add(time.Hour),
			state:    State{CA: ca, Bundle: current.Bundle, Serving: newServing(t, ca, t0, withIP.DNSNames...), InjectedAt: t0},
			settings: withIP, want: Decision{NewServing: true, Reason: "serving certificate names changed"},
		},
		{
			name: "an IP address among the certificate's IP addresses: nothing to do", now: t0.Add(time.Hour),
			state:    State{CA: ca, Bundle: current.Bundle, Serving: ipServing, InjectedAt: t0},
			settings: withIP, want: Decision{},
		},
		{
			name: "an IP address dropped from the names", now: t0.Add(time.Hour),
			state: State{CA: ca, Bundle: current.Bundle, Serving: ipServing, InjectedAt: t0},
			want:  Decision{NewServing: true, Reason: "serving certificate names changed"},
		},
		{
			name: "serving certificate due within a long propagation of the CA served from", now: servingDue, state: current,
			settings: Settings{DNSNames: names, CAValidity: settings.CAValidity, CertValidity: settings.CertValidity, TrustPropagation: 100 * time.Hour},
			want:     Decision{NewServing: true, Reason: "serving certificate due for renewal"},
		},
		{
			name: "CA due: a new CA joins the bundle, the served certificate stays", now: caDue,
			state: State{CA: ca, Bundle: current.Bundle, Serving: oldServing, InjectedAt: t0},
			want:  Decision{NewCA: true, Reason: "CA due for renewal"},
		},
		{
			name: "CA due and the served certificate expired: both at once", now: caDue.Add(time.Hour),
			state: State{CA: ca, Bundle: current.Bundle, Serving: newServing(t, ca, t0, names...), InjectedAt: t0},
			want:  Decision{NewCA: true, NewServing: true, Reason: "CA due for renewal"},
		},
		{
			name: "new CA not yet propagated: wait", now: renewedAt.Add(30 * time.Second), state: justRenewed,
			want: Decision{}, wantCheck: renewedAt.Add(time.Minute),
		},
		{
			name: "new CA not yet propagated, the served certificate expires first: look again then", now: renewedAt.Add(10 * time.Second),
			state: expiringWhileItPropagates, want: Decision{}, wantCheck: expiringWhileItPropagates.Serving.Cert.NotAfter,
		},
		{
			name: "new CA not in the webhook configuration yet: wait", now: renewedAt.Add(time.Hour), state: notYetInjected,
			want: Decision{}, wantCheck: renewedAt.Add(time.Hour + time.Minute),
		},
		{
			name: "CA lost while a trusted certificate is served: a new CA only", now: t0.Add(time.Hour),
			state: State{Bundle: current.Bundle, Serving: serving, InjectedAt: t0},
			want:  Decision{NewCA: true, Reason: "no valid CA"},
		},
		{
			name: "new CA propagated: the served certificate moves to it", now: renewedAt.Add(time.Minute), state: justRenewed,
			want: Decision{NewServing: true, Reason: "serving certificate not signed by the current CA"},
		},
		{name: "CA expired", now: ca.Cert.NotAfter.Add(time.Second), state: current, want: Decision{NewCA: true, NewServing: true, Prune: true, Reason: "no valid CA"}},
		{
			name: "expired CA left in the bundle", now: ca.Cert.NotAfter.Add(time.Hour),
			state: State{CA: newer, Bundle: justRenewed.Bundle, Serving: newServing(t, newer, ca.Cert.NotAfter, names...), InjectedAt: renewedAt},
			want:  Decision{Prune: true, Reason: "expired CA in the bundle"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := settings
			if tc.settings.DNSNames != nil {
				cfg = tc.settings
			}
			got := Decide(tc.now, tc.state, cfg)
			if got.NewCA != tc.want.NewCA || got.NewServing != tc.want.NewServing || got.Prune != tc.want.Prune || got.Reason != tc.want.Reason {
				t.Errorf("Decide() = %+v, want %+v", got, tc.want)
			}
			if !tc.wantCheck.IsZero() && !got.RecheckAt.Equal(tc.wantCheck) {
				t.Errorf("RecheckAt = %s, want %s", got.RecheckAt, tc.wantCheck)
			}
			if got.Changes() != (tc.want.NewCA || tc.want.NewServing || tc.want.Prune) {
				t.Errorf("Changes() = %t", got.Changes())
			}
		})
	}
}
