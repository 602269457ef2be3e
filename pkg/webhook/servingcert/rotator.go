package servingcert

import (
	"bytes"
	"context"
	"crypto"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync/atomic"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	"github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
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

// The keys of the Secret, besides tls.crt and tls.key, and its marks.
const (
	KeyCACert = "ca.crt"
	KeyCAKey  = "ca.key"
	KeyBundle = "ca-bundle.crt"
	// LabelManagedBy and ManagedBy mark the Secret as Carousel's.
	LabelManagedBy = "app.kubernetes.io/managed-by"
	ManagedBy      = "carousel-controller-manager"
)

// NewServer is a webhook server that serves the rotator's certificate and runs
// the rotator, in every replica, for as long as it serves. The manager starts
// webhook servers before it waits for its caches to sync, and the rotator
// needs no cache, so a replica serves its webhook while a large fleet's caches
// load; as a runnable of its own (controller-runtime's "others") the rotator
// would start only once every cache had synced.
func (r *Rotator) NewServer(opts webhook.Options) webhook.Server {
	opts.TLSOpts = append(slices.Clip(opts.TLSOpts), func(c *tls.Config) { c.GetCertificate = r.GetCertificate })
	return &rotatingServer{Server: webhook.NewServer(opts), rotator: r}
}

// UseManager gives the rotator the manager's clients. The server from
// NewServer must be the manager's webhook server.
func (r *Rotator) UseManager(mgr ctrl.Manager) {
	r.Client, r.Reader = mgr.GetClient(), mgr.GetAPIReader()
}

type rotatingServer struct {
	webhook.Server
	rotator *Rotator
}

// Start runs the rotator alongside the server and stops it with the server.
func (s *rotatingServer) Start(ctx context.Context) error {
	if s.rotator.Client == nil || s.rotator.Reader == nil {
		return errors.New("the webhook serving-certificate rotator has no clients: call its UseManager")
	}
	ctx, cancel := context.WithCancel(ctx)
	rotated := make(chan struct{})
	go func() {
		defer close(rotated)
		_ = s.rotator.Start(ctx) // it retries every failure until ctx ends
	}()
	err := s.Server.Start(ctx)
	cancel()
	<-rotated
	return err
}

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
	ctx = log.IntoContext(ctx, logger)
	resync := r.Resync
	if resync <= 0 {
		resync = time.Minute
	}
	// Failed syncs are retried after 1s, 2s, 4s, ... up to resync, each stretched by up to a fifth so that the
	// replicas do not retry together; a success starts over.
	policy := wait.Backoff{Duration: time.Second, Factor: 2, Jitter: 0.2, Cap: resync, Steps: math.MaxInt32}
	retry := policy
	for {
		next, err := r.Sync(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			next = retry.Step()
			logger.Error(err, "syncing the webhook serving certificate", "retryIn", next)
		} else {
			next, retry = min(next, resync), policy
		}
		select {
		case <-ctx.Done():
			return nil
		case <-r.clock().After(next):
		}
	}
}

// Sync brings the Secret, the webhook configuration and the served
// certificate up to date, and returns how soon to sync again.
func (r *Rotator) Sync(ctx context.Context) (time.Duration, error) {
	now := r.clock().Now()
	secret, err := r.readSecret(ctx)
	if err != nil {
		return 0, err
	}
	vwc := &admissionregistrationv1.ValidatingWebhookConfiguration{}
	if err := r.Reader.Get(ctx, client.ObjectKey{Name: r.WebhookConfiguration}, vwc); err != nil {
		return 0, fmt.Errorf("reading the webhook configuration: %w", err)
	}
	state := parseState(secret)
	saved := state.Bundle.PEM()
	r.recover(&state, vwc, now)
	d := Decide(now, state, r.Settings)
	if d.Changes() {
		if state, err = apply(d, state, r.Settings, now); err != nil {
			return 0, err
		}
	}
	// Saved before the configuration is written: the bundle it then holds
	// is in the Secret too, whichever of them the next sync reads.
	if d.Changes() || !bytes.Equal(state.Bundle.PEM(), saved) {
		if secret, err = r.store(ctx, secret, state); err != nil {
			return 0, err
		}
		if d.Changes() {
			log.FromContext(ctx).Info("renewed the webhook certificates", "reason", d.Reason,
				"ca", pki.Fingerprint(state.CA.Cert), "servingNotAfter", state.Serving.Cert.NotAfter, "trustedCAs", len(state.Bundle))
		}
	}
	if err := r.inject(ctx, vwc, state.Bundle.PEM()); err != nil {
		return 0, err
	}
	if state.InjectedAt.IsZero() {
		// The propagation delay of a new CA counts from here.
		state.InjectedAt = now
		if _, err := r.store(ctx, secret, state); err != nil {
			return 0, err
		}
	}
	if err := r.serve(state.Serving); err != nil {
		return 0, err
	}
	again := Decide(now, state, r.Settings)
	if again.Changes() {
		// What it just issued does not settle it (a CA not valid yet on
		// this replica's clock, say): an error, so that Start backs off
		// instead of issuing again every second.
		return 0, fmt.Errorf("the webhook certificates want renewing again at once (%s; the CA is valid from %s to %s)",
			again.Reason, state.CA.Cert.NotBefore.UTC().Format(time.RFC3339), state.CA.Cert.NotAfter.UTC().Format(time.RFC3339))
	}
	return max(again.RecheckAt.Sub(now), time.Second), nil
}

// readSecret returns the Secret, nil when there is none, and refuses one that
// Carousel did not create.
func (r *Rotator) readSecret(ctx context.Context) (*corev1.Secret, error) {
	secret := &corev1.Secret{}
	if err := r.Reader.Get(ctx, r.Secret, secret); apierrors.IsNotFound(err) {
		return nil, nil
	} else if err != nil {
		return nil, err
	}
	if secret.Labels[LabelManagedBy] != ManagedBy || secret.Type != corev1.SecretTypeTLS {
		return nil, fmt.Errorf("secret %s was not created by Carousel (type %s, label %s=%s expected): delete it, or name another with --webhook-cert-secret",
			r.Secret, corev1.SecretTypeTLS, LabelManagedBy, ManagedBy)
	}
	return secret, nil
}

// recover fills in what the Secret lost from what is live, so that losing
// the Secret never breaks trust: every unexpired CA the webhook
// configuration trusts stays trusted, and the certificate this replica
// serves stays served until a new one is trusted. That holds for the CAs of
// a configuration someone else wrote too: a switch back from cert-manager
// that finds the Secret of an earlier self-issued install keeps the
// cert-manager CA that Pods not yet rolled serve with, and a Secret restored
// from an older copy keeps the CA the other replicas serve with. The bundle
// drops a CA only once it expired (Decide), whoever added it.
func (r *Rotator) recover(s *State, vwc *admissionregistrationv1.ValidatingWebhookConfiguration, now time.Time) {
	for _, w := range vwc.Webhooks {
		if b, err := pki.ParseBundle(w.ClientConfig.CABundle); err == nil {
			s.Bundle = pki.NewBundle(append(s.Bundle, b.Unexpired(now)...)...)
		}
	}
	if s.Serving == nil {
		if c := r.serving.Load(); c != nil {
			if key, ok := c.PrivateKey.(crypto.Signer); ok {
				s.Serving = &pki.KeyPair{Cert: c.Leaf, Key: key}
			}
		}
	}
	if s.CA != nil && !s.Bundle.Contains(s.CA.Cert) {
		s.Bundle = pki.NewBundle(append(s.Bundle, s.CA.Cert)...)
		s.InjectedAt = time.Time{}
	}
	// A configuration that lost the CA since it was injected (an older
	// replica's write, a helm upgrade that applies the chart's caBundle)
	// gets it again now: while the served certificate is to move to that
	// CA, its propagation counts from then. (Once it has moved, waiting
	// helps nothing; and a configuration rewritten without it again and
	// again would hold every renewal until the certificate expired.)
	if s.CA != nil && !trustedByEveryWebhook(vwc, s.CA.Cert) && !signedBy(s.Serving, s.CA, now) {
		s.InjectedAt = time.Time{}
	}
}

// signedBy reports whether serving is a certificate ca signs, valid at now.
func signedBy(serving, ca *pki.KeyPair, now time.Time) bool {
	return serving != nil && pki.Verify(serving.Cert, pki.NewBundle(ca.Cert), x509.ExtKeyUsageServerAuth, now) == nil
}

// trustedByEveryWebhook reports whether every webhook of vwc has ca in its
// caBundle.
func trustedByEveryWebhook(vwc *admissionregistrationv1.ValidatingWebhookConfiguration, ca *x509.Certificate) bool {
	for _, w := range vwc.Webhooks {
		if b, err := pki.ParseBundle(w.ClientConfig.CABundle); err != nil || !b.Contains(ca) {
			return false
		}
	}
	return true
}

// apply carries out a decision, generating the keys it needs.
func apply(d Decision, s State, cfg Settings, now time.Time) (State, error) {
	next := s
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
		next.InjectedAt = time.Time{}
	}
	if d.NewServing {
		tmpl, err := servingTemplate(cfg)
		if err != nil {
			return State{}, err
		}
		if next.Serving, err = next.CA.IssueKeyPair(tmpl, pki.ECDSAP256, now); err != nil {
			return State{}, err
		}
	}
	return next, nil
}

// store creates or updates the Secret and returns it as stored. An update
// carries the resourceVersion it read, so a replica that lost a race gets a
// conflict and keeps nothing.
func (r *Rotator) store(ctx context.Context, secret *corev1.Secret, s State) (*corev1.Secret, error) {
	data, err := encodeState(s)
	if err != nil {
		return nil, err
	}
	if secret == nil {
		secret = &corev1.Secret{Type: corev1.SecretTypeTLS}
		secret.Namespace, secret.Name = r.Secret.Namespace, r.Secret.Name
		secret.Labels = map[string]string{LabelManagedBy: ManagedBy}
		setInjectedAt(secret, s.InjectedAt)
		secret.Data = data
		return secret, r.Client.Create(ctx, secret)
	}
	secret = secret.DeepCopy()
	setInjectedAt(secret, s.InjectedAt)
	secret.Data = data
	return secret, r.Client.Update(ctx, secret)
}

func setInjectedAt(secret *corev1.Secret, t time.Time) {
	if t.IsZero() {
		delete(secret.Annotations, v1alpha1.AnnotationCABundleInjectedAt)
		return
	}
	if secret.Annotations == nil {
		secret.Annotations = map[string]string{}
	}
	secret.Annotations[v1alpha1.AnnotationCABundleInjectedAt] = t.UTC().Format(time.RFC3339)
}

// inject sets the bundle as the caBundle of every webhook of the configuration.
func (r *Rotator) inject(ctx context.Context, vwc *admissionregistrationv1.ValidatingWebhookConfiguration, bundle []byte) error {
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
	if kp, err := pki.ParseKeyPair(secret.Data[KeyCACert], secret.Data[KeyCAKey]); err == nil && pki.CheckCA(kp.Cert) == nil {
		s.CA = kp
	}
	if b, err := pki.ParseBundle(secret.Data[KeyBundle]); err == nil {
		s.Bundle = b
	}
	if kp, err := pki.ParseKeyPair(secret.Data[corev1.TLSCertKey], secret.Data[corev1.TLSPrivateKeyKey]); err == nil {
		s.Serving = kp
	}
	if t, err := time.Parse(time.RFC3339, secret.Annotations[v1alpha1.AnnotationCABundleInjectedAt]); err == nil {
		s.InjectedAt = t
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

// servingTemplate is the serving certificate's template: its names are
// cfg.DNSNames, the IP addresses among them as IP addresses (SplitNames).
func servingTemplate(cfg Settings) (pki.LeafTemplate, error) {
	if len(cfg.DNSNames) == 0 {
		return pki.LeafTemplate{}, errors.New("the webhook serving certificate needs at least one DNS name")
	}
	dnsNames, ips := SplitNames(cfg.DNSNames)
	return pki.LeafTemplate{
		CommonName: cfg.DNSNames[0], DNSNames: dnsNames, IPAddresses: ips,
		Usages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, Validity: cfg.CertValidity,
	}, nil
}
