package operator

import (
	"strings"
	"testing"
	"time"
)

// selfIssued is a valid self-issued certificate's settings.
var selfIssued = WebhookCertificate{Secret: "carousel-system/carousel-webhook-cert", Configuration: "carousel", DNSNames: []string{"carousel-webhook.carousel-system.svc"}}

func TestWebhookCertificateValidate(t *testing.T) {
	self := selfIssued
	tests := []struct {
		name    string
		w       WebhookCertificate
		noHook  bool
		wantErr string
	}{
		{name: "files from the default directory", w: WebhookCertificate{}},
		{name: "files from a directory", w: WebhookCertificate{CertDir: "/etc/carousel/webhook-certs"}},
		{name: "self-issued", w: self},
		{name: "self-issued and a directory", w: WebhookCertificate{Secret: self.Secret, Configuration: "carousel", DNSNames: self.DNSNames, CertDir: "/tmp"}, wantErr: "mutually exclusive"},
		{name: "secret without namespace", w: WebhookCertificate{Secret: "carousel-webhook-cert", Configuration: "carousel", DNSNames: self.DNSNames}, wantErr: "NAMESPACE/NAME"},
		{name: "secret with two slashes", w: WebhookCertificate{Secret: "a/b/c", Configuration: "carousel", DNSNames: self.DNSNames}, wantErr: "NAMESPACE/NAME"},
		{name: "no configuration", w: WebhookCertificate{Secret: self.Secret, DNSNames: self.DNSNames}, wantErr: "needs --webhook-configuration"},
		{name: "no DNS names", w: WebhookCertificate{Secret: self.Secret, Configuration: "carousel"}, wantErr: "needs --webhook-dns-names"},
		{name: "bad DNS name", w: WebhookCertificate{Secret: self.Secret, Configuration: "carousel", DNSNames: []string{"Not_A_Name"}}, wantErr: `"Not_A_Name" is neither an IP address nor a DNS name`},
		{name: "IP addresses", w: WebhookCertificate{Secret: self.Secret, Configuration: "carousel", DNSNames: []string{"carousel-webhook.carousel-system.svc", "10.0.0.5", "fd00::5"}}},
		{name: "an IPv6 address with a zone", w: WebhookCertificate{Secret: self.Secret, Configuration: "carousel", DNSNames: []string{"fe80::1%eth0"}}, wantErr: `"fe80::1%eth0" is neither`},
		{name: "configuration without secret", w: WebhookCertificate{Configuration: "carousel"}, wantErr: "need --webhook-cert-secret"},
		{name: "self-issued without the webhook", w: self, noHook: true, wantErr: "needs --webhook=true"},
		{name: "no webhook, no certificate", w: WebhookCertificate{}, noHook: true},
		{name: "a trust propagation", w: withTrustPropagation(self, 72*time.Hour)},
		{name: "the longest trust propagation", w: withTrustPropagation(self, MaxTrustPropagation)},
		{name: "a trust propagation too long", w: withTrustPropagation(self, MaxTrustPropagation+time.Second), wantErr: "--webhook-trust-propagation=2160h0m1s"},
		{name: "a negative trust propagation", w: withTrustPropagation(self, -time.Minute), wantErr: "--webhook-trust-propagation=-1m0s"},
		{name: "a trust propagation without secret", w: WebhookCertificate{TrustPropagation: time.Hour}, wantErr: "need --webhook-cert-secret"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.w.Validate(!tc.noHook)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
			}
		})
	}
	if r := self.Rotator(false); r.Secret.Namespace != "carousel-system" || r.Secret.Name != "carousel-webhook-cert" || r.WebhookConfiguration != "carousel" {
		t.Fatalf("rotator %+v", r)
	}
}

// TestValidateAuditWebhookURL: managed API servers refuse a serving
// certificate that does not name the host of --audit-webhook-url, and accept
// an IP address only among its IP addresses.
func TestValidateAuditWebhookURL(t *testing.T) {
	withIPs := selfIssued
	withIPs.DNSNames = []string{"carousel-webhook.carousel-system.svc", "10.0.0.5", "fd00::5"}
	tests := []struct {
		name    string
		w       WebhookCertificate
		url     string
		wantErr string
	}{
		{name: "no audit webhook", w: selfIssued},
		{name: "a name of the certificate", w: selfIssued, url: "https://carousel-webhook.carousel-system.svc:443/audit"},
		{name: "in another case, with a trailing dot", w: selfIssued, url: "https://Carousel-Webhook.carousel-system.svc.:443/audit"},
		{name: "an IPv4 address of the certificate", w: withIPs, url: "https://10.0.0.5/audit"},
		{name: "an IPv6 address of the certificate, written otherwise", w: withIPs, url: "https://[fd00:0::5]:443/audit"},
		{name: "another name", w: selfIssued, url: "https://carousel-webhook.example.com/audit",
			wantErr: `--audit-webhook-url="https://carousel-webhook.example.com/audit": its host "carousel-webhook.example.com" is not among --webhook-dns-names (carousel-webhook.carousel-system.svc)`},
		{name: "an IP address not among the names", w: selfIssued, url: "https://10.0.0.5/audit", wantErr: `its host "10.0.0.5" is not among --webhook-dns-names`},
		{name: "another IP address", w: withIPs, url: "https://10.0.0.6/audit", wantErr: `its host "10.0.0.6"`},
		{name: "a certificate from files, whose names are unknown", w: WebhookCertificate{}, url: "https://10.0.0.5/audit"},
		{name: "not a URL: Options.Validate says so", w: selfIssued, url: "http://carousel-webhook.example.com/audit"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.w.ValidateAuditWebhookURL(tc.url)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
			}
		})
	}
}

// TestRotatorTrustsARenewedCALongerForAuditWebhooks: managed API servers read
// their audit kubeconfig's CA bundle only when they start, so with audit
// webhooks a renewed CA is trusted for AuditWebhookTrustPropagation before
// the served certificate moves to it, unless the flag says otherwise.
func TestRotatorTrustsARenewedCALongerForAuditWebhooks(t *testing.T) {
	self := selfIssued
	tests := []struct {
		name         string
		w            WebhookCertificate
		auditWebhook bool
		want         time.Duration
	}{
		{name: "default", w: self, want: time.Minute},
		{name: "audit webhook", w: self, auditWebhook: true, want: AuditWebhookTrustPropagation},
		{name: "flag", w: withTrustPropagation(self, 5*time.Minute), want: 5 * time.Minute},
		{name: "flag with audit webhook", w: withTrustPropagation(self, 72*time.Hour), auditWebhook: true, want: 72 * time.Hour},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.w.Rotator(tc.auditWebhook).Settings.TrustPropagation; got != tc.want {
				t.Fatalf("trust propagation %s, want %s", got, tc.want)
			}
		})
	}
}

func withTrustPropagation(w WebhookCertificate, d time.Duration) WebhookCertificate {
	w.TrustPropagation = d
	return w
}
