// Package integration runs Carousel's API, webhook and controllers against a
// real kube-apiserver and etcd (the test control plane of `make envtest`).
package integration

import (
	"context"
	"crypto/tls"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	"github.com/carousel-dev/carousel/pkg/operator"
	"github.com/carousel-dev/carousel/pkg/scheme"
	"github.com/carousel-dev/carousel/test/framework"
	"github.com/carousel-dev/carousel/test/framework/kit"
)

var (
	testEnv *envtest.Environment
	cfg     *rest.Config
	k8s     client.Client // uncached: reads what the API server has now
	// webhookClock is the clock of the suite's webhook, for its rotation
	// recommendations: a spec that moves it sets it back when it ends.
	webhookClock = clocktesting.NewFakeClock(time.Now())
	// stopWebhook stops the webhook manager and waits for it.
	stopWebhook func()
)

func TestIntegration(t *testing.T) {
	RegisterFailHandler(Fail)
	// make test runs this suite beside another on two cores: what takes
	// milliseconds alone can take seconds then (a second was too short).
	SetDefaultEventuallyTimeout(30 * time.Second)
	RunSpecs(t, "Integration Suite")
}

var _ = BeforeSuite(func() {
	logf.SetLogger(zap.New(zap.WriteTo(GinkgoWriter), zap.UseDevMode(true)))
	testEnv = &envtest.Environment{
		CRDDirectoryPaths:     []string{filepath.Join("..", "..", "charts", "carousel", "files", "crds")},
		ErrorIfCRDPathMissing: true,
		WebhookInstallOptions: envtest.WebhookInstallOptions{
			Paths: []string{filepath.Join("..", "..", "charts", "carousel", "files", "webhook")},
		},
	}
	wrappers, err := os.MkdirTemp("", "carousel-integration-")
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(os.RemoveAll, wrappers)
	Expect(framework.DieWithTestProcess(testEnv, os.Getenv("KUBEBUILDER_ASSETS"), wrappers)).To(Succeed())
	cfg, err = testEnv.Start()
	Expect(err).NotTo(HaveOccurred(), "starting the test control plane; run `make envtest` and set KUBEBUILDER_ASSETS (the Makefile does both)")
	k8s, err = client.New(cfg, client.Options{Scheme: scheme.New()})
	Expect(err).NotTo(HaveOccurred())
	startWebhook()
})

var _ = AfterSuite(func() {
	// The webhook manager's informers (the audit receiver reads Secrets and
	// ConfigMaps through them) hold watches that would keep the API server
	// from stopping in time.
	if stopWebhook != nil {
		stopWebhook()
	}
	if testEnv != nil {
		Expect(testEnv.Stop()).To(Succeed())
	}
})

// startWebhook serves the Cluster admission webhook for the whole suite, as
// it runs in a real deployment: every Cluster create and update goes through it.
func startWebhook() {
	opts := &testEnv.WebhookInstallOptions
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 scheme.New(),
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		WebhookServer:          webhook.NewServer(webhook.Options{Host: opts.LocalServingHost, Port: opts.LocalServingPort, CertDir: opts.LocalServingCertDir}),
	})
	Expect(err).NotTo(HaveOccurred())
	Expect(operator.SetupWebhooks(mgr, operator.DefaultOptions(), webhookClock)).To(Succeed())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	stopWebhook = func() { cancel(); <-done }
	go func() {
		defer GinkgoRecover()
		defer close(done)
		Expect(mgr.Start(ctx)).To(Succeed())
	}()
	addr := net.JoinHostPort(opts.LocalServingHost, strconv.Itoa(opts.LocalServingPort))
	Eventually(func() error {
		conn, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // only checks that the server listens
		if err != nil {
			return err
		}
		return conn.Close()
	}).Should(Succeed())
}

// startControllers runs Carousel's controllers in a manager, as the binary
// does, until the spec ends. It watches only the spec's namespace (envtest
// never finishes deleting the namespaces of earlier specs) and counts every
// write in writes.
func startControllers(namespace string, writes *atomic.Int64) ctrl.Manager {
	mgr, _ := startControllersWith(namespace, writes, nil)
	return mgr
}

// startControllersWith is startControllers with the options changed by
// change. It also returns a function that stops the manager before the spec
// ends.
func startControllersWith(namespace string, writes *atomic.Int64, change func(*operator.Options)) (ctrl.Manager, func()) {
	mgrOpts := operator.ManagerOptions()
	mgrOpts.Cache.DefaultNamespaces = map[string]cache.Config{namespace: {}}
	mgrOpts.Metrics = metricsserver.Options{BindAddress: "0"}
	mgrOpts.HealthProbeBindAddress = "0"
	mgrOpts.Controller.SkipNameValidation = ptr.To(true) // a manager per spec in one process
	mgrOpts.NewClient = func(config *rest.Config, options client.Options) (client.Client, error) {
		c, err := client.New(config, options)
		if err != nil {
			return nil, err
		}
		return kit.CountingClient{Client: c, Writes: writes, Budget: -1}, nil
	}
	mgr, err := ctrl.NewManager(cfg, mgrOpts)
	Expect(err).NotTo(HaveOccurred())
	opts := operator.DefaultOptions()
	opts.Webhook = false
	opts.ManagedPollInterval = 200 * time.Millisecond
	opts.ManagedCleanupTimeout = 3 * time.Second
	if change != nil {
		change(&opts)
	}
	Expect(operator.Setup(mgr, opts)).To(Succeed())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer GinkgoRecover()
		defer close(done)
		Expect(mgr.Start(ctx)).To(Succeed())
	}()
	stop := func() {
		cancel()
		Eventually(done).Should(BeClosed())
	}
	DeferCleanup(stop)
	return mgr, stop
}

// newNamespace creates a namespace for one spec and deletes it afterwards.
func newNamespace(ctx context.Context) string {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "carousel-test-"}}
	Expect(k8s.Create(ctx, ns)).To(Succeed())
	DeferCleanup(func(ctx SpecContext) { Expect(k8s.Delete(ctx, ns)).To(Succeed()) })
	return ns.Name
}
