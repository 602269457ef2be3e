package servingcert

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/carousel-dev/carousel/pkg/pki"
)

// Rotator keeps the webhook's certificates current and serves the certificate
// from memory. Every replica runs one: the Secret's resourceVersion decides
// which replica's renewal is kept, and the others load it on their next sync.
type Rotator struct {
	// Client writes the Secret and the webhook configuration.
	Client client.Client
	// Reader reads them without a cache (the manager caches neither).
	Reader client.Reader
	// Secret holds the CA, the bundle and the serving certificate.
	Secret types.NamespacedName
	// WebhookConfiguration is the ValidatingWebhookConfiguration whose webhooks
	// get the bundle as caBundle.
	WebhookConfiguration string
	Settings             Settings
	// Clock defaults to the real clock.
	Clock clock.Clock
	// Resync bounds the time between syncs, so that a bundle overwritten by
	// someone else is restored; it defaults to a minute.
	Resync time.Duration

	serving atomic.Pointer[tls.Certificate]
}

// The keys of the Secret, besides tls.crt and tls.key.
const (
	KeyCACert = "ca.crt"
	KeyCAKey  = "ca.key"
	KeyBundle = "ca-bundle.crt"
	// AnnotationBundleChangedAt records when a CA last joined the bundle.
	AnnotationBundleChangedAt = "carousel.dev/ca-bundle-changed-at"
)

// SetupWithManager gives the rotator the manager's clients and runs it in
// every replica.
func (r *Rotator) SetupWithManager(mgr ctrl.Manager) error {
	r.Client, r.Reader = mgr.GetClient(), mgr.GetAPIReader()
	return mgr.Add(r)
}

// NeedLeaderElection is false: every replica serves the webhook.
func (*Rotator) NeedLeaderElection() bool { return false }

// GetCertificate is the webhook server's tls.Config.GetCertificate. Until the
// first sync it fails the handshake, which keeps the replica unready.
func (r *Rotator) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	if c := r.serving.Load(); c != nil {
		return c, nil
	}
	return nil, errors.New("the webhook serving certificate is not loaded yet")
}

// Start syncs until ctx ends, retrying failures with a growing delay.
func (r *Rotator) Start(ctx context.Context) error {
	logger := log.FromContext(ctx).WithName("webhook-serving-cert")
	resync := r.Resync
	if resync <= 0 {
		resync = time.Minute
	}
	backoff := time.Second
	for {
		wait, err := r.Sync(ctx)
		if err != nil {
			logger.Error(err, "syncing the webhook serving certificate", "retryIn", backoff)
			wait, backoff = backoff, min(2*backoff, resync)
		} else {
			wait, backoff = min(wait, resync), time.Second
		}
		select {
		case <-ctx.Done():
			return nil
		case <-r.clock().After(wait):
		}
	}
}

// Sync brings the Secret, the webhook configuration and the served
// certificate up to date, and returns how soon to sync again.
func (r *Rotator) Sync(ctx context.Context) (time.Duration, error) {
	now := r.clock().Now()
	secret := &corev1.Secret{}
	if err := r.Reader.Get(ctx, r.Secret, secret); apierrors.IsNotFound(err) {
		secret = nil
	} else if err != nil {
		return 0, err
	}
	state := parseState(secret)
	d := Decide(now, state, r.Settings)
	if d.Changes() {
		next, err := apply(d, state, r.Settings, now)
		if err != nil {
			return 0, err
		}
		if err := r.store(ctx, secret, next); err != nil {
			return 0, err
		}
		log.FromContext(ctx).Info("renewed the webhook certificates", "reason", d.Reason,
			"ca", pki.Fingerprint(next.CA.Cert), "servingNotAfter", next.Serving.Cert.NotAfter, "trustedCAs", len(next.Bundle))
		state = next
		d = Decide(now, state, r.Settings)
	}
	if err := r.inject(ctx, state.Bundle.PEM()); err != nil {
		return 0, err
	}
	if err := r.serve(state.Serving); err != nil {
		return 0, err
	}
	return max(d.RecheckAt.Sub(now), time.Second), nil
}

// apply carries out a decision, generating the keys it needs.
func apply(d Decision, s State, cfg Settings, now time.Time) (State, error) {
	next := State{CA: s.CA, Bundle: s.Bundle, Serving: s.Serving, BundleChangedAt: s.BundleChangedAt}
	if d.Prune {
		next.Bundle = s.Bundle.Unexpired(now)
	}
	if d.NewCA {
		key, err := pki.GenerateKey(pki.ECDSAP256)
		if err != nil {
			return State{}, err
		}
		if next.CA, err = pki.NewCA(pki.CATemplate{CommonName: "carousel-webhook-ca", Validity: cfg.CAValidity}, key, now); err != nil {
			return State{}, err
		}
		next.Bundle = pki.NewBundle(append(next.Bundle.Unexpired(now), next.CA.Cert)...)
		next.BundleChangedAt = now
	}
	if d.NewServing {
		if len(cfg.DNSNames) == 0 {
			return State{}, errors.New("the webhook serving certificate needs at least one DNS name")
		}
		var err error
		next.Serving, err = next.CA.IssueKeyPair(pki.LeafTemplate{
			CommonName: cfg.DNSNames[0], DNSNames: cfg.DNSNames,
			Usages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, Validity: cfg.CertValidity,
		}, pki.ECDSAP256, now)
		if err != nil {
			return State{}, err
		}
	}
	return next, nil
}

// store creates or updates the Secret. An update carries the resourceVersion
// it read, so a replica that lost the race gets a conflict and keeps nothing.
func (r *Rotator) store(ctx context.Context, secret *corev1.Secret, s State) error {
	data, err := encodeState(s)
	if err != nil {
		return err
	}
	if secret == nil {
		secret = &corev1.Secret{Type: corev1.SecretTypeTLS}
		secret.Namespace, secret.Name = r.Secret.Namespace, r.Secret.Name
		secret.Annotations = map[string]string{AnnotationBundleChangedAt: s.BundleChangedAt.UTC().Format(time.RFC3339)}
		secret.Data = data
		return r.Client.Create(ctx, secret)
	}
	if secret.Type != corev1.SecretTypeTLS {
		return fmt.Errorf("secret %s has type %q, not %q", r.Secret, secret.Type, corev1.SecretTypeTLS)
	}
	if secret.Annotations == nil {
		secret.Annotations = map[string]string{}
	}
	secret.Annotations[AnnotationBundleChangedAt] = s.BundleChangedAt.UTC().Format(time.RFC3339)
	secret.Data = data
	return r.Client.Update(ctx, secret)
}

// inject sets the bundle on every webhook of the configuration that lacks it.
func (r *Rotator) inject(ctx context.Context, bundle []byte) error {
	vwc := &admissionregistrationv1.ValidatingWebhookConfiguration{}
	if err := r.Reader.Get(ctx, client.ObjectKey{Name: r.WebhookConfiguration}, vwc); err != nil {
		return fmt.Errorf("reading the webhook configuration: %w", err)
	}
	changed := false
	for i := range vwc.Webhooks {
		if !bytes.Equal(vwc.Webhooks[i].ClientConfig.CABundle, bundle) {
			vwc.Webhooks[i].ClientConfig.CABundle = bundle
			changed = true
		}
	}
	if !changed {
		return nil
	}
	if err := r.Client.Update(ctx, vwc); err != nil {
		return fmt.Errorf("injecting the CA bundle into the webhook configuration: %w", err)
	}
	log.FromContext(ctx).Info("injected the CA bundle into the webhook configuration", "name", r.WebhookConfiguration)
	return nil
}

// serve swaps the in-memory certificate when it changed.
func (r *Rotator) serve(kp *pki.KeyPair) error {
	if cur := r.serving.Load(); cur != nil && cur.Leaf != nil && cur.Leaf.Equal(kp.Cert) {
		return nil
	}
	keyPEM, err := kp.KeyPEM()
	if err != nil {
		return err
	}
	c, err := tls.X509KeyPair(kp.CertPEM(), keyPEM)
	if err != nil {
		return err
	}
	r.serving.Store(&c)
	return nil
}

func (r *Rotator) clock() clock.Clock {
	if r.Clock == nil {
		return clock.RealClock{}
	}
	return r.Clock
}

// parseState reads what it can of the Secret; whatever is missing or
// unreadable is nil and gets reissued.
func parseState(secret *corev1.Secret) State {
	var s State
	if secret == nil {
		return s
	}
	if kp, err := pki.ParseKeyPair(secret.Data[KeyCACert], secret.Data[KeyCAKey]); err == nil && kp.Cert.IsCA {
		s.CA = kp
	}
	if b, err := pki.ParseBundle(secret.Data[KeyBundle]); err == nil {
		s.Bundle = b
	}
	if s.CA != nil && !s.Bundle.Contains(s.CA.Cert) {
		s.Bundle = pki.NewBundle(append(s.Bundle, s.CA.Cert)...)
	}
	if kp, err := pki.ParseKeyPair(secret.Data[corev1.TLSCertKey], secret.Data[corev1.TLSPrivateKeyKey]); err == nil {
		s.Serving = kp
	}
	if t, err := time.Parse(time.RFC3339, secret.Annotations[AnnotationBundleChangedAt]); err == nil {
		s.BundleChangedAt = t
	}
	return s
}

func encodeState(s State) (map[string][]byte, error) {
	caKey, err := s.CA.KeyPEM()
	if err != nil {
		return nil, err
	}
	servingKey, err := s.Serving.KeyPEM()
	if err != nil {
		return nil, err
	}
	return map[string][]byte{
		KeyCACert: s.CA.CertPEM(), KeyCAKey: caKey, KeyBundle: s.Bundle.PEM(),
		corev1.TLSCertKey: s.Serving.CertPEM(), corev1.TLSPrivateKeyKey: servingKey,
	}, nil
}
