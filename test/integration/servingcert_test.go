package integration

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	"github.com/carousel-dev/carousel/pkg/pki"
	"github.com/carousel-dev/carousel/pkg/scheme"
	"github.com/carousel-dev/carousel/pkg/webhook/servingcert"
	"github.com/carousel-dev/carousel/test/framework"
	"github.com/carousel-dev/carousel/test/framework/kit"
)

// The message of the test webhook: seeing it proves the API server reached
// the webhook and trusted its certificate.
const servingCertTestDenial = "reached the serving-certificate test webhook"

var _ = Describe("The webhook's self-issued serving certificate", func() {
	It("keeps the API server calling the webhook through a CA renewal", func(ctx SpecContext) {
		ns := newNamespace(ctx)
		settings := servingcert.DefaultSettings([]string{"localhost"})
		settings.TrustPropagation = time.Minute

		// The API server checks certificates against the real time, so the
		// fake clock starts where the first CA comes due one minute from now.
		renewal := time.Now().Add(time.Minute)
		clk := clocktesting.NewFakeClock(renewal.Add(pki.Backdate - (settings.CAValidity+pki.Backdate)*2/3))
		var writes atomic.Int64
		rotator := &servingcert.Rotator{
			Client: kit.CountingClient{Client: k8s, Writes: &writes, Budget: -1}, Reader: k8s,
			Secret: types.NamespacedName{Namespace: ns, Name: "webhook-cert"}, WebhookConfiguration: "carousel-servingcert-test-" + ns,
			Settings: settings, Clock: clk,
		}
		url := serveDenyingWebhook(rotator)
		createTestWebhookConfiguration(ctx, rotator.WebhookConfiguration, url)

		sync := func() {
			GinkgoHelper()
			_, err := rotator.Sync(ctx)
			Expect(err).NotTo(HaveOccurred())
		}
		sync()
		first := servedIssuer(rotator)
		firstServing := servedCert(rotator)
		// The serving certificate is renewed, by the first CA, just before that CA comes due.
		clk.SetTime(renewal.Add(-time.Second))
		sync()
		Expect(servedIssuer(rotator)).To(Equal(first))
		Expect(servedCert(rotator).SerialNumber).NotTo(Equal(firstServing.SerialNumber), "the first serving certificate has expired on the fake clock")
		Expect(servedCert(rotator).NotAfter).To(BeTemporally(">", clk.Now()))
		Expect(apiServerReaches(ctx, ns)).To(Succeed())

		By("a new CA joins the bundle while the served certificate stays")
		clk.SetTime(renewal)
		sync()
		Expect(servedIssuer(rotator)).To(Equal(first))
		Expect(apiServerReaches(ctx, ns)).To(Succeed(), "the API server must trust the served certificate at once")
		Expect(injectedCAs(ctx, rotator.WebhookConfiguration)).To(HaveLen(2))

		By("once the bundle has propagated, the served certificate moves to the new CA")
		clk.Step(settings.TrustPropagation)
		sync()
		Expect(servedIssuer(rotator)).NotTo(Equal(first))
		// The minute on the fake clock is what lets the API server pick up the
		// bundle; here it may take it a moment more.
		Eventually(func(ctx context.Context) error { return apiServerReaches(ctx, ns) }).WithContext(ctx).WithTimeout(2 * time.Minute).Should(Succeed())

		By("a sync with nothing to do writes nothing")
		writes.Store(0)
		sync()
		Expect(writes.Load()).To(BeZero())
	})
})

var _ = Describe("A replica's webhook server with a self-issued certificate", func() {
	It("serves before the manager's caches have synced", func(ctx SpecContext) {
		ns := newNamespace(ctx)
		port, err := framework.FreePort()
		Expect(err).NotTo(HaveOccurred())
		rotator := &servingcert.Rotator{
			Secret: types.NamespacedName{Namespace: ns, Name: "webhook-cert"}, WebhookConfiguration: "carousel-servingcert-early-" + ns,
			Settings: servingcert.DefaultSettings([]string{"localhost"}),
		}
		createTestWebhookConfiguration(ctx, rotator.WebhookConfiguration, "https://localhost:"+strconv.Itoa(port))
		server := rotator.NewServer(webhook.Options{Host: "127.0.0.1", Port: port})
		mgr, err := ctrl.NewManager(cfg, ctrl.Options{
			Scheme:                 scheme.New(),
			Metrics:                metricsserver.Options{BindAddress: "0"},
			HealthProbeBindAddress: "0",
			WebhookServer:          server,
		})
		Expect(err).NotTo(HaveOccurred())
		rotator.UseManager(mgr)
		// A fleet's caches that take their time: this one syncs only once the spec is over (the manager
		// cannot be stopped while it waits for its caches).
		slow := slowCache{synced: make(chan struct{})}
		Expect(mgr.Add(slow)).To(Succeed())
		// The manager adds its webhook server to what it starts when first asked for it, under the lock its
		// Start holds until the caches sync: ask before it starts, as the manager's main does.
		Expect(mgr.GetWebhookServer()).To(BeIdenticalTo(server))
		mgrCtx, stop := context.WithCancel(ctx)
		stopped := make(chan struct{})
		DeferCleanup(func() { close(slow.synced); stop(); <-stopped })
		go func() {
			defer GinkgoRecover()
			defer close(stopped)
			Expect(mgr.Start(mgrCtx)).To(Succeed())
		}()

		// What the replica's readiness probe asks: a TLS handshake with the served certificate.
		Eventually(server.StartedChecker()).WithArguments((*http.Request)(nil)).WithTimeout(30 * time.Second).Should(Succeed())
		Expect(injectedCAs(ctx, rotator.WebhookConfiguration)).To(HaveLen(1), "the rotator injected its CA too")
	})
})

// slowCache is a manager runnable with a cache that syncs once synced is
// closed: the manager starts what waits for caches only then.
type slowCache struct {
	cache.Cache
	synced chan struct{}
}

func (slowCache) Start(ctx context.Context) error { <-ctx.Done(); return nil }
func (c slowCache) GetCache() cache.Cache         { return c }
func (c slowCache) WaitForCacheSync(ctx context.Context) bool {
	select {
	case <-c.synced:
		return true
	case <-ctx.Done():
		return false
	}
}

// serveDenyingWebhook serves, with the rotator's certificate, a webhook that
// denies every request with servingCertTestDenial, and returns its URL.
func serveDenyingWebhook(rotator *servingcert.Rotator) string {
	GinkgoHelper()
	l, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{GetCertificate: rotator.GetCertificate, MinVersion: tls.VersionTLS12})
	Expect(err).NotTo(HaveOccurred())
	srv := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		review := &admissionv1.AdmissionReview{}
		if err := json.NewDecoder(r.Body).Decode(review); err != nil || review.Request == nil {
			http.Error(w, "not an AdmissionReview", http.StatusBadRequest)
			return
		}
		review.Response = &admissionv1.AdmissionResponse{
			UID: review.Request.UID, Allowed: false, Result: &metav1.Status{Message: servingCertTestDenial},
		}
		review.Request = nil
		_ = json.NewEncoder(w).Encode(review)
	})}
	go func() { _ = srv.Serve(l) }()
	DeferCleanup(srv.Close)
	return "https://localhost:" + strconv.Itoa(l.Addr().(*net.TCPAddr).Port) + "/deny"
}

// createTestWebhookConfiguration registers the test webhook for labelled
// ConfigMaps only, so that it never touches the other specs.
func createTestWebhookConfiguration(ctx context.Context, name, url string) {
	GinkgoHelper()
	vwc := &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name:                    "servingcert.test.carousel.dev",
			ClientConfig:            admissionregistrationv1.WebhookClientConfig{URL: ptr.To(url)},
			AdmissionReviewVersions: []string{"v1"},
			SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
			FailurePolicy:           ptr.To(admissionregistrationv1.Fail),
			TimeoutSeconds:          ptr.To[int32](5),
			ObjectSelector:          &metav1.LabelSelector{MatchLabels: map[string]string{"carousel.dev/servingcert-test": name}},
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
				Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"}},
			}},
		}},
	}
	Expect(k8s.Create(ctx, vwc)).To(Succeed())
	DeferCleanup(func(ctx SpecContext) { Expect(k8s.Delete(ctx, vwc)).To(Succeed()) })
}

// apiServerReaches checks that the API server calls the test webhook: a
// dry-run create of a labelled ConfigMap must come back with its denial.
func apiServerReaches(ctx context.Context, namespace string) error {
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{
		Namespace: namespace, GenerateName: "probe-",
		Labels: map[string]string{"carousel.dev/servingcert-test": "carousel-servingcert-test-" + namespace},
	}}
	err := k8s.Create(ctx, cm, client.DryRunAll)
	switch {
	case err == nil:
		return errors.New("the webhook was not called")
	case !strings.Contains(err.Error(), servingCertTestDenial):
		return err
	}
	return nil
}

func servedIssuer(rotator *servingcert.Rotator) string {
	GinkgoHelper()
	return string(servedCert(rotator).AuthorityKeyId)
}

func servedCert(rotator *servingcert.Rotator) *x509.Certificate {
	GinkgoHelper()
	c, err := rotator.GetCertificate(nil)
	Expect(err).NotTo(HaveOccurred())
	return c.Leaf
}

func injectedCAs(ctx context.Context, name string) pki.Bundle {
	GinkgoHelper()
	vwc := &admissionregistrationv1.ValidatingWebhookConfiguration{}
	Expect(k8s.Get(ctx, client.ObjectKey{Name: name}, vwc)).To(Succeed())
	b, err := pki.ParseBundle(vwc.Webhooks[0].ClientConfig.CABundle)
	Expect(err).NotTo(HaveOccurred())
	return b
}
