// Package integration runs Carousel's API, webhook and controllers against a
// real kube-apiserver and etcd (the test control plane of `make envtest`).
package integration

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

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
	clusterwebhook "github.com/carousel-dev/carousel/pkg/webhook/cluster"
)

var (
	testEnv *envtest.Environment
	cfg     *rest.Config
	k8s     client.Client // uncached: reads what the API server has now
)

func TestIntegration(t *testing.T) {
	RegisterFailHandler(Fail)
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
	var err error
	cfg, err = testEnv.Start()
	Expect(err).NotTo(HaveOccurred(), "starting the test control plane; run `make envtest` and set KUBEBUILDER_ASSETS (the Makefile does both)")
	k8s, err = client.New(cfg, client.Options{Scheme: scheme.New()})
	Expect(err).NotTo(HaveOccurred())
	startWebhook()
})

var _ = AfterSuite(func() {
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
	Expect(clusterwebhook.SetupWithManager(mgr)).To(Succeed())
	ctx, cancel := context.WithCancel(context.Background())
	DeferCleanup(cancel)
	go func() {
		defer GinkgoRecover()
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

// errCrash is what a crashingClient returns once its write budget is spent.
var errCrash = errors.New("simulated crash: write budget spent")

// countingClient counts the writes a controller makes. With a budget, every
// write after the budget fails without reaching the API server, which is how
// the crash tests stop a reconciler between two writes.
type countingClient struct {
	client.Client
	writes *atomic.Int64
	budget int64 // negative: unlimited
}

func (c countingClient) write() error {
	if n := c.writes.Add(1); c.budget >= 0 && n > c.budget {
		return errCrash
	}
	return nil
}

func (c countingClient) Create(ctx context.Context, obj client.Object, opts ...client.CreateOption) error {
	if err := c.write(); err != nil {
		return err
	}
	return c.Client.Create(ctx, obj, opts...)
}

func (c countingClient) Update(ctx context.Context, obj client.Object, opts ...client.UpdateOption) error {
	if err := c.write(); err != nil {
		return err
	}
	return c.Client.Update(ctx, obj, opts...)
}

func (c countingClient) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
	if err := c.write(); err != nil {
		return err
	}
	return c.Client.Patch(ctx, obj, patch, opts...)
}

func (c countingClient) Delete(ctx context.Context, obj client.Object, opts ...client.DeleteOption) error {
	if err := c.write(); err != nil {
		return err
	}
	return c.Client.Delete(ctx, obj, opts...)
}

func (c countingClient) Status() client.SubResourceWriter {
	return countingStatus{SubResourceWriter: c.Client.Status(), c: c}
}

type countingStatus struct {
	client.SubResourceWriter
	c countingClient
}

func (s countingStatus) Update(ctx context.Context, obj client.Object, opts ...client.SubResourceUpdateOption) error {
	if err := s.c.write(); err != nil {
		return err
	}
	return s.SubResourceWriter.Update(ctx, obj, opts...)
}

func (s countingStatus) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
	if err := s.c.write(); err != nil {
		return err
	}
	return s.SubResourceWriter.Patch(ctx, obj, patch, opts...)
}

// startControllers runs Carousel's controllers in a manager, as the binary
// does, until the spec ends. It watches only the spec's namespace (envtest
// never finishes deleting the namespaces of earlier specs) and counts every
// write in writes.
func startControllers(namespace string, writes *atomic.Int64) ctrl.Manager {
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
		return countingClient{Client: c, writes: writes, budget: -1}, nil
	}
	mgr, err := ctrl.NewManager(cfg, mgrOpts)
	Expect(err).NotTo(HaveOccurred())
	opts := operator.DefaultOptions()
	opts.Webhook = false
	opts.ManagedPollInterval = 200 * time.Millisecond
	opts.ManagedCleanupTimeout = 3 * time.Second
	Expect(operator.Setup(mgr, opts)).To(Succeed())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer GinkgoRecover()
		defer close(done)
		Expect(mgr.Start(ctx)).To(Succeed())
	}()
	DeferCleanup(func() {
		cancel()
		Eventually(done).Should(BeClosed())
	})
	return mgr
}

// newNamespace creates a namespace for one spec and deletes it afterwards.
func newNamespace(ctx context.Context) string {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "carousel-test-"}}
	Expect(k8s.Create(ctx, ns)).To(Succeed())
	DeferCleanup(func(ctx SpecContext) { Expect(k8s.Delete(ctx, ns)).To(Succeed()) })
	return ns.Name
}
