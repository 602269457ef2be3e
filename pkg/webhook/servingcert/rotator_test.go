package servingcert

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	"github.com/carousel-dev/carousel/pkg/pki"
	"github.com/carousel-dev/carousel/pkg/pki/pkitest"
)

const vwcName = "carousel"

var secretKey = types.NamespacedName{Namespace: "carousel-system", Name: "carousel-webhook-cert"}

// apiServer is a fake API server that also plays the real one's view of the
// webhook configuration: it records every caBundle with the time it was
// written, so that a test can ask what an API server that lags by the
// propagation delay trusts.
type apiServer struct {
	client.WithWatch
	clk     *clocktesting.FakeClock
	writes  int
	bundles []injection
}

type injection struct {
	at     time.Time
	bundle pki.Bundle
}

func newAPIServer(t *testing.T, clk *clocktesting.FakeClock, objs ...client.Object) *apiServer {
	t.Helper()
	s := &apiServer{clk: clk}
	count := func(obj client.Object) {
		s.writes++
		if vwc, ok := obj.(*admissionregistrationv1.ValidatingWebhookConfiguration); ok {
			b, err := pki.ParseBundle(vwc.Webhooks[0].ClientConfig.CABundle)
			if err != nil {
				t.Errorf("injected caBundle: %v", err)
			}
			s.bundles = append(s.bundles, injection{at: clk.Now(), bundle: b})
		}
	}
	s.WithWatch = fake.NewClientBuilder().WithObjects(objs...).WithInterceptorFuncs(interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			count(obj)
			return c.Create(ctx, obj, opts...)
		},
		Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			count(obj)
			return c.Update(ctx, obj, opts...)
		},
	}).Build()
	return s
}

func webhookConfiguration() *admissionregistrationv1.ValidatingWebhookConfiguration {
	return &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: vwcName},
		Webhooks:   []admissionregistrationv1.ValidatingWebhook{{Name: "clusters.carousel.dev"}, {Name: "other.carousel.dev"}},
	}
}

func newRotator(c client.Client, clk *clocktesting.FakeClock) *Rotator {
	return &Rotator{Client: c, Reader: c, Secret: secretKey, WebhookConfiguration: vwcName, Settings: settings, Clock: clk}
}

// trusts checks that an API server which saw the webhook configuration as it
// was at, and any time since, trusts the certificate the rotator serves now.
func (s *apiServer) trusts(t *testing.T, r *Rotator, since time.Time) {
	t.Helper()
	served, err := r.GetCertificate(&tls.ClientHelloInfo{})
	if err != nil {
		t.Fatalf("nothing served: %v", err)
	}
	now := s.clk.Now()
	for i, in := range s.bundles {
		if next := i + 1; next < len(s.bundles) && !s.bundles[next].at.After(since) {
			continue // replaced before the window
		}
		if _, err := served.Leaf.Verify(x509.VerifyOptions{
			DNSName: names[0], Roots: in.bundle.CertPool(), CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		}); err != nil {
			t.Fatalf("at %s, an API server holding the caBundle injected at %s does not trust the served certificate: %v", now, in.at, err)
		}
	}
}

func stored(t *testing.T, c client.Client) State {
	t.Helper()
	secret := &corev1.Secret{}
	if err := c.Get(context.Background(), secretKey, secret); err != nil {
		t.Fatal(err)
	}
	return parseState(secret)
}

func sync(t *testing.T, r *Rotator) time.Duration {
	t.Helper()
	wait, err := r.Sync(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return wait
}

func TestRotatorIssuesOnceThenWritesNothing(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0)
	api := newAPIServer(t, clk, webhookConfiguration())
	r := newRotator(api, clk)

	if _, err := r.GetCertificate(nil); err == nil {
		t.Fatal("a certificate is served before the first sync")
	}
	sync(t, r)
	if api.writes != 3 {
		t.Fatalf("first sync: %d writes, want 3 (create the Secret, inject the bundle, record when)", api.writes)
	}
	api.trusts(t, r, t0)

	api.writes = 0
	keys := pki.KeysGenerated()
	clk.Step(time.Hour)
	wait := sync(t, r)
	if api.writes != 0 || pki.KeysGenerated() != keys {
		t.Fatalf("no-op sync: %d writes and %d keys", api.writes, pki.KeysGenerated()-keys)
	}
	if want := renewalTime(stored(t, api).Serving.Cert).Sub(clk.Now()); wait != want {
		t.Fatalf("next sync in %s, want %s (when the serving certificate is due)", wait, want)
	}
}

// A name that is an IP address, the host of an audit webhook URL such as
// https://10.0.0.5/audit, is one of the served certificate's IP addresses: a Go
// TLS client, kube-apiserver's, accepts an IP host only through those.
func TestRotatorServesIPAddressesAsIPAddresses(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0)
	api := newAPIServer(t, clk, webhookConfiguration())
	r := newRotator(api, clk)
	r.Settings.DNSNames = []string{names[0], "10.0.0.5", "fd00::5"}
	sync(t, r)
	served, err := r.GetCertificate(&tls.ClientHelloInfo{})
	if err != nil {
		t.Fatal(err)
	}
	for _, host := range r.Settings.DNSNames {
		if _, err := served.Leaf.Verify(x509.VerifyOptions{
			DNSName: host, Roots: api.bundles[len(api.bundles)-1].bundle.CertPool(), CurrentTime: clk.Now(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		}); err != nil {
			t.Errorf("a client of %s refuses the served certificate: %v", host, err)
		}
	}
	if got := served.Leaf.DNSNames; len(got) != 1 || got[0] != names[0] {
		t.Errorf("DNS names %q, want only %q", got, names[0])
	}
}

// Following the rotator's own schedule for almost two CA lifetimes (a CA is
// renewed every two thirds of one, and the old one expires meanwhile), an API
// server that lags by the propagation delay trusts the served certificate at
// every step, and each renewal adds exactly one CA.
func TestRotatorRenewsWithoutBreakingTrust(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0)
	api := newAPIServer(t, clk, webhookConfiguration())
	r := newRotator(api, clk)

	cas := map[string]bool{}
	end := t0.Add(2*settings.CAValidity - time.Hour)
	for steps := 0; clk.Now().Before(end); steps++ {
		if steps > 1000 {
			t.Fatal("the rotator's schedule does not advance")
		}
		wait := sync(t, r)
		api.trusts(t, r, clk.Now().Add(-settings.TrustPropagation))
		cas[pki.Fingerprint(stored(t, api).CA.Cert)] = true
		// Just before the next sync is due, the served certificate is still trusted.
		clk.Step(wait - time.Second)
		api.trusts(t, r, clk.Now().Add(-settings.TrustPropagation))
		clk.Step(time.Second)
	}
	if len(cas) != 3 {
		t.Fatalf("%d CAs issued, want 3 (the first, renewed at 200h and at 400h)", len(cas))
	}
}

// A lost Secret costs nothing: the replica keeps serving its certificate, the
// injected CAs stay trusted, and the new CA signs only once it propagated.
func TestRotatorSurvivesALostSecret(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0)
	api := newAPIServer(t, clk, webhookConfiguration())
	r := newRotator(api, clk)
	sync(t, r)
	first := stored(t, api)

	clk.Step(time.Hour)
	if err := api.Delete(context.Background(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: secretKey.Namespace, Name: secretKey.Name}}); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		wait := sync(t, r)
		api.trusts(t, r, clk.Now().Add(-settings.TrustPropagation))
		clk.Step(wait)
	}
	now := stored(t, api)
	if now.CA.Cert.Equal(first.CA.Cert) || !now.Bundle.Contains(first.CA.Cert) {
		t.Fatal("the new bundle should hold the lost CA and a new one")
	}
	if err := pki.Verify(now.Serving.Cert, pki.NewBundle(now.CA.Cert), x509.ExtKeyUsageServerAuth, clk.Now()); err != nil {
		t.Fatalf("the served certificate did not move to the new CA: %v", err)
	}
}

// A stored CA that may not sign certificates (no certSign) is replaced, as
// a missing one is: kept, every renewal of the serving certificate failed
// until it expired.
func TestRotatorReplacesACAThatMayNotSign(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0)
	mayNotSign := pkitest.NewCAThatMayNotSign(t, "no-cert-sign", t0)
	key, err := pki.EncodePrivateKey(mayNotSign.Key)
	if err != nil {
		t.Fatal(err)
	}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: secretKey.Namespace, Name: secretKey.Name,
		Labels: map[string]string{LabelManagedBy: ManagedBy}}, Type: corev1.SecretTypeTLS,
		Data: map[string][]byte{KeyCACert: mayNotSign.CertPEM(), KeyCAKey: key, KeyBundle: pki.NewBundle(mayNotSign.Cert).PEM()}}
	api := newAPIServer(t, clk, webhookConfiguration(), secret)
	r := newRotator(api, clk)
	for range 3 {
		clk.Step(sync(t, r))
	}
	now := stored(t, api)
	if now.CA == nil || now.CA.Cert.Equal(mayNotSign.Cert) || now.Serving == nil {
		t.Fatalf("stored %+v, want a new CA and a serving certificate from it", now)
	}
	if err := pki.Verify(now.Serving.Cert, pki.NewBundle(now.CA.Cert), x509.ExtKeyUsageServerAuth, clk.Now()); err != nil {
		t.Fatalf("the served certificate is not from the new CA: %v", err)
	}
}

func TestRotatorRefuses(t *testing.T) {
	foreign := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: secretKey.Namespace, Name: secretKey.Name},
		Type:       corev1.SecretTypeTLS, Data: map[string][]byte{corev1.TLSCertKey: []byte("x"), corev1.TLSPrivateKeyKey: []byte("y")},
	}
	opaque := foreign.DeepCopy()
	opaque.Type, opaque.Labels = corev1.SecretTypeOpaque, map[string]string{LabelManagedBy: ManagedBy}
	tests := []struct {
		name    string
		objs    []client.Object
		wantErr string
	}{
		{name: "a Secret someone else made", objs: []client.Object{webhookConfiguration(), foreign}, wantErr: "was not created by Carousel"},
		{name: "a Secret of another type", objs: []client.Object{webhookConfiguration(), opaque}, wantErr: "was not created by Carousel"},
		{name: "no webhook configuration", wantErr: "reading the webhook configuration"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			clk := clocktesting.NewFakeClock(t0)
			api := newAPIServer(t, clk, tc.objs...)
			r := newRotator(api, clk)
			if _, err := r.Sync(context.Background()); err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("Sync() error %v, want one containing %q", err, tc.wantErr)
			}
			if api.writes != 0 {
				t.Fatalf("%d writes", api.writes)
			}
			if _, err := r.GetCertificate(nil); err == nil {
				t.Fatal("a certificate is served")
			}
		})
	}
}

// Two replicas that decide to renew at the same time store one CA: the loser's
// update conflicts, and its next sync serves the winner's certificate.
func TestRotatorReplicasRace(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0)
	var a *Rotator
	raced := true
	c := fake.NewClientBuilder().WithObjects(webhookConfiguration()).WithInterceptorFuncs(interceptor.Funcs{
		Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			if _, isSecret := obj.(*corev1.Secret); isSecret && !raced {
				raced = true
				if _, err := a.Sync(ctx); err != nil {
					return err
				}
			}
			return c.Update(ctx, obj, opts...)
		},
	}).Build()
	a = newRotator(c, clk)
	b := newRotator(c, clk)
	sync(t, a)
	first := stored(t, c).CA.Cert

	clk.SetTime(renewalTime(first))
	raced = false
	if _, err := b.Sync(context.Background()); err == nil {
		t.Fatal("the replica that lost the race stored its CA")
	}
	winner := stored(t, c).CA.Cert
	if winner.Equal(first) {
		t.Fatal("no replica renewed the CA")
	}
	sync(t, b)
	if !stored(t, c).CA.Cert.Equal(winner) {
		t.Fatal("a second new CA was stored")
	}
}

// A webhook configuration whose caBundle lost the new CA while it propagates
// (an older replica's write, a helm upgrade that applies the chart's) gets it
// back, and the served certificate moves to the new CA only once that
// write has propagated, not counting from the first injection.
func TestRotatorWaitsForACABundleWrittenAgain(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0)
	api := newAPIServer(t, clk, webhookConfiguration())
	r := newRotator(api, clk)
	sync(t, r)
	first := stored(t, api)
	for steps := 0; ; steps++ {
		if steps > 1000 {
			t.Fatal("the CA is not renewed")
		}
		wait := sync(t, r)
		if !stored(t, api).CA.Cert.Equal(first.CA.Cert) {
			break
		}
		clk.Step(wait)
	}
	injected := clk.Now() // the new CA's bundle was injected by that sync

	clk.Step(settings.TrustPropagation / 2)
	vwc := &admissionregistrationv1.ValidatingWebhookConfiguration{}
	if err := api.Get(context.Background(), client.ObjectKey{Name: vwcName}, vwc); err != nil {
		t.Fatal(err)
	}
	for i := range vwc.Webhooks {
		vwc.Webhooks[i].ClientConfig.CABundle = first.CA.CertPEM()
	}
	if err := api.Update(context.Background(), vwc); err != nil {
		t.Fatal(err)
	}
	for clk.Now().Before(injected.Add(3 * settings.TrustPropagation)) {
		sync(t, r)
		api.trusts(t, r, clk.Now().Add(-settings.TrustPropagation))
		clk.Step(time.Second)
	}
	if err := pki.Verify(stored(t, api).Serving.Cert, pki.NewBundle(stored(t, api).CA.Cert), x509.ExtKeyUsageServerAuth, clk.Now()); err != nil {
		t.Fatalf("the served certificate did not move to the new CA once its bundle propagated: %v", err)
	}
}

// A configuration rewritten without the CA again and again (a tool that
// applies the chart's caBundle) does not hold the renewal of a certificate the
// current CA already signs: waiting for the CA to propagate helps nothing
// there.
func TestRotatorRenewsOnTimeUnderAConfigurationRewrittenWithoutItsBundle(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0)
	api := newAPIServer(t, clk, webhookConfiguration())
	r := newRotator(api, clk)
	sync(t, r)
	first := stored(t, api).Serving.Cert
	clk.SetTime(renewalTime(first))
	vwc := &admissionregistrationv1.ValidatingWebhookConfiguration{}
	if err := api.Get(context.Background(), client.ObjectKey{Name: vwcName}, vwc); err != nil {
		t.Fatal(err)
	}
	other := newCA(t, t0) // the chart's placeholder, say
	for i := range vwc.Webhooks {
		vwc.Webhooks[i].ClientConfig.CABundle = other.CertPEM()
	}
	if err := api.Update(context.Background(), vwc); err != nil {
		t.Fatal(err)
	}
	sync(t, r)
	if stored(t, api).Serving.Cert.Equal(first) {
		t.Fatal("the serving certificate due for renewal was not renewed")
	}
}

// A switch back to self-issued certificates that finds the Secret of an
// earlier self-issued install (left behind by helm uninstall) keeps the CAs
// the webhook configuration trusts: the cert-manager CA that Pods not yet
// rolled still serve with.
func TestRotatorKeepsTheCAsAConfigurationWrittenByAnotherTrusts(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0)
	api := newAPIServer(t, clk, webhookConfiguration())
	sync(t, newRotator(api, clk))
	leftBehind := stored(t, api)

	clk.Step(time.Hour)
	key, err := pki.GenerateKey(pki.ECDSAP256)
	if err != nil {
		t.Fatal(err)
	}
	certManagerCA, err := pki.NewCA(pki.CATemplate{CommonName: "cert-manager CA", Validity: 90 * 24 * time.Hour}, key, clk.Now())
	if err != nil {
		t.Fatal(err)
	}
	vwc := &admissionregistrationv1.ValidatingWebhookConfiguration{}
	if err := api.Get(context.Background(), client.ObjectKey{Name: vwcName}, vwc); err != nil {
		t.Fatal(err)
	}
	for i := range vwc.Webhooks {
		vwc.Webhooks[i].ClientConfig.CABundle = certManagerCA.CertPEM()
	}
	if err := api.Update(context.Background(), vwc); err != nil {
		t.Fatal(err)
	}

	sync(t, newRotator(api, clk)) // the manager Pod of the upgrade back
	if err := api.Get(context.Background(), client.ObjectKey{Name: vwcName}, vwc); err != nil {
		t.Fatal(err)
	}
	for _, w := range vwc.Webhooks {
		b, err := pki.ParseBundle(w.ClientConfig.CABundle)
		if err != nil {
			t.Fatal(err)
		}
		if !b.Contains(certManagerCA.Cert) || !b.Contains(leftBehind.CA.Cert) {
			t.Errorf("webhook %s trusts %d CAs, want the cert-manager CA the configuration trusted and the Secret's", w.Name, len(b))
		}
	}

	// The next sync, of this replica or of the other one, finds the
	// configuration trusting the Secret's CA: the cert-manager CA stays.
	clk.Step(time.Minute)
	sync(t, newRotator(api, clk))
	if !stored(t, api).Bundle.Contains(certManagerCA.Cert) {
		t.Error("the Secret's bundle lacks the cert-manager CA")
	}
	if err := api.Get(context.Background(), client.ObjectKey{Name: vwcName}, vwc); err != nil {
		t.Fatal(err)
	}
	for _, w := range vwc.Webhooks {
		if b, err := pki.ParseBundle(w.ClientConfig.CABundle); err != nil || !b.Contains(certManagerCA.Cert) {
			t.Errorf("webhook %s dropped the cert-manager CA a minute later (%v)", w.Name, err)
		}
	}
}

func TestRotatorKeepsTheCAsOfAConfigurationWhenTheSecretIsRestoredFromAnOlderCopy(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0)
	api := newAPIServer(t, clk, webhookConfiguration())
	sync(t, newRotator(api, clk))
	secret := &corev1.Secret{}
	if err := api.Get(context.Background(), secretKey, secret); err != nil {
		t.Fatal(err)
	}
	backup := secret.DeepCopy()

	// The first CA comes due: a second joins, and the served certificate moves to it.
	clk.SetTime(renewalTime(stored(t, api).CA.Cert))
	sync(t, newRotator(api, clk))
	clk.Step(settings.TrustPropagation)
	sync(t, newRotator(api, clk))
	second := stored(t, api).CA.Cert
	if second.Equal(parseState(backup).CA.Cert) {
		t.Fatal("no second CA")
	}

	// The older copy is restored: its CA is due, so a third is issued; the
	// second, which the other replicas serve with, stays trusted.
	if err := api.Get(context.Background(), secretKey, secret); err != nil {
		t.Fatal(err)
	}
	secret.Data, secret.Annotations = backup.Data, backup.Annotations
	if err := api.Update(context.Background(), secret); err != nil {
		t.Fatal(err)
	}
	sync(t, newRotator(api, clk))
	if got := stored(t, api); !got.Bundle.Contains(second) || got.CA.Cert.Equal(second) {
		t.Errorf("the restored Secret trusts %d CAs with a new CA %v, want the second CA still trusted beside a new one", len(got.Bundle), !got.CA.Cert.Equal(second))
	}
	vwc := &admissionregistrationv1.ValidatingWebhookConfiguration{}
	if err := api.Get(context.Background(), client.ObjectKey{Name: vwcName}, vwc); err != nil {
		t.Fatal(err)
	}
	for _, w := range vwc.Webhooks {
		if b, err := pki.ParseBundle(w.ClientConfig.CABundle); err != nil || !b.Contains(second) {
			t.Errorf("webhook %s dropped the CA the other replicas serve with (%v)", w.Name, err)
		}
	}
}

// A replica whose clock is behind the CA's notBefore cannot settle: each
// certificate it issues fails to verify at once. It says so, and Start backs
// off, rather than issue a key and write the Secret every second.
func TestRotatorThatCannotSettleFails(t *testing.T) {
	ahead := clocktesting.NewFakeClock(t0.Add(time.Hour))
	api := newAPIServer(t, ahead, webhookConfiguration())
	sync(t, newRotator(api, ahead))

	behind := clocktesting.NewFakeClock(t0)
	if _, err := newRotator(api, behind).Sync(context.Background()); err == nil || !strings.Contains(err.Error(), "want renewing again at once") {
		t.Errorf("Sync on a clock behind the CA = %v, want an error that makes it back off", err)
	}
}

// A server whose rotator was given no clients refuses to start, rather than
// its rotator failing on a nil client.
func TestAServerWithoutTheManagersClientsRefusesToStart(t *testing.T) {
	server := (&Rotator{}).NewServer(webhook.Options{Host: "127.0.0.1", Port: 1})
	if err := server.Start(t.Context()); err == nil || !strings.Contains(err.Error(), "UseManager") {
		t.Errorf("Start = %v, want an error naming UseManager", err)
	}
}
