package operator

import (
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/carousel-dev/carousel/pkg/webhook/servingcert"
)

// WebhookCertificate says where the webhook's serving certificate comes from:
// issued and rotated by Carousel itself (Secret set), or read from files in
// CertDir that something else keeps current, such as cert-manager.
type WebhookCertificate struct {
	// Secret is NAMESPACE/NAME of the Secret that keeps the self-issued CA and
	// serving certificate.
	Secret string
	// Configuration is the ValidatingWebhookConfiguration that gets the CA bundle.
	Configuration string
	// DNSNames are the serving certificate's names: DNS names, and IP
	// addresses, which go into its IP addresses.
	DNSNames []string
	// CertDir holds tls.crt and tls.key when the certificate is not self-issued.
	CertDir string
	// TrustPropagation is how long a renewed CA is trusted before the
	// served certificate moves to it; 0 means the default (Rotator).
	TrustPropagation time.Duration
}

// AuditWebhookTrustPropagation is how long a renewed CA is trusted before
// the served certificate moves to it when managed API servers send their
// audit events to the webhook server: each reads the CA bundle of its audit
// kubeconfig only when it starts, so it must roll with its updated
// <cluster>-audit-webhook Secret within this time, or its audit events stop
// (and the old-CA usage gate holds completions) until it does.
const AuditWebhookTrustPropagation = 30 * 24 * time.Hour

// MaxTrustPropagation bounds --webhook-trust-propagation: the served
// certificate, renewed when a third of its year is left, must outlast the
// wait (else it expires during it and moves to the new CA at once).
const MaxTrustPropagation = 90 * 24 * time.Hour

// SelfIssued reports whether Carousel issues the certificate.
func (w WebhookCertificate) SelfIssued() bool { return w.Secret != "" }

// Validate refuses incomplete or contradictory settings, naming the flags.
func (w WebhookCertificate) Validate(webhook bool) error {
	if !webhook && w.SelfIssued() {
		return errors.New("--webhook-cert-secret needs --webhook=true")
	}
	if !w.SelfIssued() {
		if w.Configuration != "" || len(w.DNSNames) > 0 || w.TrustPropagation != 0 {
			return errors.New("--webhook-configuration, --webhook-dns-names and --webhook-trust-propagation need --webhook-cert-secret")
		}
		return nil
	}
	var errs []error
	if w.CertDir != "" {
		errs = append(errs, errors.New("--webhook-cert-dir and --webhook-cert-secret are mutually exclusive"))
	}
	if _, err := w.secretKey(); err != nil {
		errs = append(errs, err)
	}
	if w.Configuration == "" {
		errs = append(errs, errors.New("--webhook-cert-secret needs --webhook-configuration"))
	}
	if len(w.DNSNames) == 0 {
		errs = append(errs, errors.New("--webhook-cert-secret needs --webhook-dns-names"))
	}
	if w.TrustPropagation < 0 || w.TrustPropagation > MaxTrustPropagation {
		errs = append(errs, fmt.Errorf("--webhook-trust-propagation=%s: between 0 (the default) and %s, which the serving certificate outlasts", w.TrustPropagation, MaxTrustPropagation))
	}
	for _, n := range w.DNSNames {
		if net.ParseIP(n) != nil {
			continue // an IP address, which the certificate holds as one
		}
		if msgs := validation.IsDNS1123Subdomain(n); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("--webhook-dns-names: %q is neither an IP address nor a DNS name: %s", n, strings.Join(msgs, "; ")))
		}
	}
	return errors.Join(errs...)
}

// ValidateAuditWebhookURL refuses an --audit-webhook-url whose host the
// self-issued serving certificate does not name: the managed API servers
// would refuse the certificate and send no audit events. A URL that is not
// https or has no host is Options.Validate's to refuse; a certificate from
// --webhook-cert-dir has names this cannot know.
func (w WebhookCertificate) ValidateAuditWebhookURL(auditWebhookURL string) error {
	if !w.SelfIssued() || auditWebhookURL == "" {
		return nil
	}
	u, err := url.Parse(auditWebhookURL)
	if err != nil || u.Scheme != "https" || u.Hostname() == "" {
		return nil
	}
	if !w.names(u.Hostname()) {
		return fmt.Errorf("--audit-webhook-url=%q: its host %q is not among --webhook-dns-names (%s), the names of the webhook's serving certificate: managed API servers would refuse the certificate and send no audit events; add the host, a DNS name or an IP address, to --webhook-dns-names",
			auditWebhookURL, u.Hostname(), strings.Join(w.DNSNames, ","))
	}
	return nil
}

// names reports whether the serving certificate is valid for host, as a TLS
// client checks it.
func (w WebhookCertificate) names(host string) bool {
	dnsNames, ips := servingcert.SplitNames(w.DNSNames)
	return (&x509.Certificate{DNSNames: dnsNames, IPAddresses: ips}).VerifyHostname(host) == nil
}

func (w WebhookCertificate) secretKey() (types.NamespacedName, error) {
	ns, name, ok := strings.Cut(w.Secret, "/")
	if !ok || ns == "" || name == "" || strings.Contains(name, "/") {
		return types.NamespacedName{}, fmt.Errorf("--webhook-cert-secret must be NAMESPACE/NAME, got %q", w.Secret)
	}
	return types.NamespacedName{Namespace: ns, Name: name}, nil
}

// Rotator returns the rotator of a self-issued certificate; call Validate
// first. auditWebhook says whether managed API servers send their audit events
// to the webhook server: then a renewed CA is trusted for
// AuditWebhookTrustPropagation, unless TrustPropagation says otherwise, rather
// than the minute the API server takes to see a changed webhook configuration.
func (w WebhookCertificate) Rotator(auditWebhook bool) *servingcert.Rotator {
	key, _ := w.secretKey()
	settings := servingcert.DefaultSettings(w.DNSNames)
	switch {
	case w.TrustPropagation > 0:
		settings.TrustPropagation = w.TrustPropagation
	case auditWebhook:
		settings.TrustPropagation = AuditWebhookTrustPropagation
	}
	return &servingcert.Rotator{Secret: key, WebhookConfiguration: w.Configuration, Settings: settings}
}
