package servingcert

import (
	"context"
	"crypto/tls"
	"crypto/x509"
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

	"github.com/carousel-dev/carousel/pkg/pki"
)

const vwcName = "carousel"

var secretKey = types.NamespacedName{Namespace: "carousel-system", Name: "carousel-webhook-cert"}

// writeCounter counts the writes that reach the fake API server.
type writeCounter struct{ n int }

func (w *writeCounter) funcs() interceptor.Funcs {
	return interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			w.n++
			return c.Create(ctx, obj, opts...)
		},
		Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			w.n++
			return c.Update(ctx, obj, opts...)
		},
	}
}

func newFakeClient(funcs interceptor.Funcs) client.WithWatch {
	vwc := &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: vwcName},
		Webhooks:   []admissionregistrationv1.ValidatingWebhook{{Name: "clusters.carousel.dev"}, {Name: "other.carousel.dev"}},
	}
	return fake.NewClientBuilder().WithObjects(vwc).WithInterceptorFuncs(funcs).Build()
}

func newRotator(c client.Client, clk *clocktesting.FakeClock) *Rotator {
	return &Rotator{Client: c, Reader: c, Secret: secretKey, WebhookConfiguration: vwcName, Settings: settings, Clock: clk}
}

// handshake checks what a client trusting the injected bundle sees: the
// served certificate must verify for every webhook of the configuration.
func handshake(t *testing.T, ctx context.Context, c client.Client, r *Rotator, now time.Time) {
	t.Helper()
	served, err := r.GetCertificate(&tls.ClientHelloInfo{})
	if err != nil {
		t.Fatalf("nothing served: %v", err)
	}
	vwc := &admissionregistrationv1.ValidatingWebhookConfiguration{}
	if err := c.Get(ctx, client.ObjectKey{Name: vwcName}, vwc); err != nil {
		t.Fatal(err)
	}
	for _, w := range vwc.Webhooks {
		bundle, err := pki.ParseBundle(w.ClientConfig.CABundle)
		if err != nil {
			t.Fatalf("webhook %s: caBundle: %v", w.Name, err)
		}
		if _, err := served.Leaf.Verify(x509.VerifyOptions{
			DNSName: names[0], Roots: bundle.CertPool(), CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		}); err != nil {
			t.Fatalf("at %s webhook %s does not trust the served certificate: %v", now, w.Name, err)
		}
	}
}

func storedCA(t *testing.T, ctx context.Context, c client.Client) *x509.Certificate {
	t.Helper()
	s := &corev1.Secret{}
	if err := c.Get(ctx, secretKey, s); err != nil {
		t.Fatal(err)
	}
	return parseState(s).CA.Cert
}

func TestRotatorIssuesOnceThenWritesNothing(t *testing.T) {
	ctx := context.Background()
	writes := &writeCounter{}
	c := newFakeClient(writes.funcs())
	clk := clocktesting.NewFakeClock(t0)
	r := newRotator(c, clk)

	if _, err := r.GetCertificate(nil); err == nil {
		t.Fatal("a certificate is served before the first sync")
	}
	if _, err := r.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if writes.n != 2 {
		t.Fatalf("first sync: %d writes, want 2 (create the Secret, inject the bundle)", writes.n)
	}
	handshake(t, ctx, c, r, t0)

	writes.n = 0
	keys := pki.KeysGenerated()
	clk.Step(time.Hour)
	wait, err := r.Sync(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if writes.n != 0 || pki.KeysGenerated() != keys {
		t.Fatalf("no-op sync: %d writes and %d keys", writes.n, pki.KeysGenerated()-keys)
	}
	if want := renewalTime(storedServing(t, ctx, c)).Sub(clk.Now()); wait != want {
		t.Fatalf("next sync in %s, want %s (when the serving certificate is due)", wait, want)
	}
}

func storedServing(t *testing.T, ctx context.Context, c client.Client) *x509.Certificate {
	t.Helper()
	s := &corev1.Secret{}
	if err := c.Get(ctx, secretKey, s); err != nil {
		t.Fatal(err)
	}
	return parseState(s).Serving.Cert
}

// Following the rotator's own schedule for almost two CA lifetimes (a CA is
// renewed every two thirds of one, and the old one expires meanwhile), a
// client that trusts the injected bundle trusts the served certificate at
// every step, and each renewal adds exactly one CA.
func TestRotatorRenewsWithoutBreakingTrust(t *testing.T) {
	ctx := context.Background()
	c := newFakeClient(interceptor.Funcs{})
	clk := clocktesting.NewFakeClock(t0)
	r := newRotator(c, clk)

	cas := map[string]bool{}
	end := t0.Add(2*settings.CAValidity - time.Hour)
	for steps := 0; clk.Now().Before(end); steps++ {
		if steps > 1000 {
			t.Fatal("the rotator's schedule does not advance")
		}
		wait, err := r.Sync(ctx)
		if err != nil {
			t.Fatal(err)
		}
		handshake(t, ctx, c, r, clk.Now())
		cas[pki.Fingerprint(storedCA(t, ctx, c))] = true
		// Just before the next sync is due, the served certificate must still be trusted.
		clk.Step(wait - time.Second)
		handshake(t, ctx, c, r, clk.Now())
		clk.Step(time.Second)
	}
	if len(cas) != 3 {
		t.Fatalf("%d CAs issued, want 3 (the first, renewed at 200h and at 400h)", len(cas))
	}
}

// Two replicas that decide to renew at the same time store one CA: the loser's
// update conflicts, and its next sync serves the winner's certificate.
func TestRotatorReplicasRace(t *testing.T) {
	ctx := context.Background()
	clk := clocktesting.NewFakeClock(t0)
	var a *Rotator
	raced := false
	c := newFakeClient(interceptor.Funcs{
		Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			if _, isSecret := obj.(*corev1.Secret); isSecret && !raced {
				raced = true
				if _, err := a.Sync(ctx); err != nil {
					return err
				}
			}
			return c.Update(ctx, obj, opts...)
		},
	})
	a = newRotator(c, clk)
	b := newRotator(c, clk)
	raced = true
	if _, err := a.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	first := storedCA(t, ctx, c)

	clk.SetTime(renewalTime(first))
	raced = false
	if _, err := b.Sync(ctx); err == nil {
		t.Fatal("the replica that lost the race stored its CA")
	}
	winner := storedCA(t, ctx, c)
	if winner.Equal(first) {
		t.Fatal("no replica renewed the CA")
	}
	if _, err := b.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if !storedCA(t, ctx, c).Equal(winner) {
		t.Fatal("a second new CA was stored")
	}
	handshake(t, ctx, c, b, clk.Now())
}
