// Package bench measures Carousel against real control-plane processes.
// `make bench` runs it after the Go micro-benchmarks.
package bench

import (
	"context"
	"crypto"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
	"github.com/carousel-dev/carousel/pkg/credentials"
	"github.com/carousel-dev/carousel/pkg/nodeagent"
	"github.com/carousel-dev/carousel/pkg/operator"
	"github.com/carousel-dev/carousel/pkg/pki"
	"github.com/carousel-dev/carousel/pkg/scheme"
	"github.com/carousel-dev/carousel/test/framework"
)

// kubelets is how many nodes bootstrap at once.
const kubelets = 500

// BenchmarkKubeletBootstrap has 500 kubelets bootstrap at once against one
// API server running on Carousel's certificates, first with Carousel's CSR
// approver and signer, then, in the same run and on the same API server, with
// kube-controller-manager's csrapproving and csrsigning controllers (built
// from the same Kubernetes source, default flags). It reports CSRs approved
// and signed per second for each.
func BenchmarkKubeletBootstrap(b *testing.B) {
	assets := os.Getenv("KUBEBUILDER_ASSETS")
	if assets == "" {
		b.Skip("needs the test control plane: run it through `make bench`")
	}
	ctx := context.Background()
	env := &envtest.Environment{CRDDirectoryPaths: []string{filepath.Join("..", "..", "charts", "carousel", "files", "crds")}, ErrorIfCRDPathMissing: true}
	cfg, err := env.Start()
	check(b, err)
	defer func() { _ = env.Stop() }()
	k8s, err := client.New(cfg, client.Options{Scheme: scheme.New()})
	check(b, err)
	stopCarousel := startCarousel(b, cfg)
	defer func() { stopCarousel() }()

	port, err := framework.FreePort()
	check(b, err)
	cp := &framework.ManagedControlPlane{BinDir: assets, Dir: b.TempDir(), APIServerPort: port,
		ExtraAPIServerFlags: []string{"--max-requests-inflight=2000", "--max-mutating-requests-inflight=1000"}}
	c := &v1alpha1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "bench"},
		Spec: v1alpha1.ClusterSpec{KubernetesVersion: "1.36.3", ControlPlane: v1alpha1.ControlPlaneSpec{Endpoint: cp.Endpoint()}}}
	check(b, k8s.Create(ctx, c))
	// The managed control plane starts once Carousel issued its credentials;
	// the bootstrap kubeconfig appears once Carousel reached it.
	check(b, wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		return cp.WriteCredentials(ctx, k8s, c) == nil, nil
	}))
	check(b, cp.Start(ctx))
	defer cp.Stop()
	bootstrapSecret := &corev1.Secret{}
	check(b, wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		err := k8s.Get(ctx, client.ObjectKey{Namespace: c.Namespace, Name: credentials.BootstrapKubeconfigSecretName(c.Name)}, bootstrapSecret)
		return err == nil, nil
	}))
	bootstrapCfg, err := clientcmd.RESTConfigFromKubeConfig(bootstrapSecret.Data[v1alpha1.DataKeyKubeconfig])
	check(b, err)
	bootstrapCfg.QPS, bootstrapCfg.Burst = 2000, 2000
	kubeletClient := kubernetes.NewForConfigOrDie(bootstrapCfg)

	for b.Loop() {
		carousel := bootstrapAll(b, kubeletClient, "carousel")
		writes, recorded := recordWrites(b)
		stopCarousel()
		stopCarousel = func() {}

		stopKCM := startKubeControllerManager(b, ctx, k8s, c, cp, assets)
		kcm := bootstrapAll(b, kubeletClient, "kcm")
		stopKCM()

		b.ReportMetric(carousel, "carousel-csr/s")
		b.ReportMetric(kcm, "kcm-csr/s")
		fmt.Printf("kubelet bootstrap: %d simultaneous CSRs approved+signed: Carousel %.1f/s, kube-controller-manager %.1f/s\n", kubelets, carousel, kcm)
		fmt.Printf("kubelet bootstrap: Carousel recorded %d client certificates for the old-CA usage gate in %d writes\n", recorded, writes)
	}
}

// bootstrapAll has every kubelet create its CSR with the bootstrap token at
// once and wait for its certificate; it returns certificates per second.
func bootstrapAll(b *testing.B, cs kubernetes.Interface, run string) float64 {
	keys := make([]crypto.Signer, kubelets)
	for i := range keys {
		var err error
		keys[i], err = pki.GenerateKey(pki.ECDSAP256)
		check(b, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, kubelets)
	for i := range kubelets {
		wg.Go(func() {
			node := fmt.Sprintf("%s-node-%03d", run, i)
			csr, err := nodeagent.ClientCSR("bench-"+node, node, keys[i], 0)
			if err == nil {
				_, err = nodeagent.RequestCertificate(ctx, cs, csr, keys[i])
			}
			errs <- err
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	close(errs)
	for err := range errs {
		check(b, err)
	}
	return float64(kubelets) / elapsed.Seconds()
}

// recordWrites are the writes of the record of signed kubelet certificates
// so far, and the certificates they recorded.
func recordWrites(b *testing.B) (writes, certificates uint64) {
	families, err := metrics.Registry.Gather()
	check(b, err)
	for _, f := range families {
		if f.GetName() == "carousel_kubelet_certificate_record_batch_size" {
			h := f.GetMetric()[0].GetHistogram()
			return h.GetSampleCount(), uint64(h.GetSampleSum())
		}
	}
	b.Fatal("no carousel_kubelet_certificate_record_batch_size metric")
	return 0, 0
}

// startCarousel runs Carousel's controllers, as the binary does, until the
// returned function is called.
func startCarousel(b *testing.B, cfg *rest.Config) func() {
	mgrOpts := operator.ManagerOptions()
	mgrOpts.Metrics = metricsserver.Options{BindAddress: "0"}
	mgrOpts.HealthProbeBindAddress = "0"
	mgr, err := ctrl.NewManager(cfg, mgrOpts)
	check(b, err)
	opts := operator.DefaultOptions()
	opts.Webhook = false
	check(b, operator.Setup(mgr, opts))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = mgr.Start(ctx) }()
	return func() { cancel(); <-done }
}

// startKubeControllerManager runs kube-controller-manager's CSR approver and
// signer against the managed API server, signing with the same client CA.
func startKubeControllerManager(b *testing.B, ctx context.Context, k8s client.Client, c *v1alpha1.Cluster, cp *framework.ManagedControlPlane, assets string) func() {
	caSecret := &corev1.Secret{}
	check(b, k8s.Get(ctx, client.ObjectKey{Namespace: c.Namespace, Name: credentials.CASecretName(c.Name, v1alpha1.CARoleClient)}, caSecret))
	admin := &corev1.Secret{}
	check(b, k8s.Get(ctx, client.ObjectKey{Namespace: c.Namespace, Name: credentials.CertificateSecretName(c.Name, credentials.CertAdmin)}, admin))
	files := map[string][]byte{
		"kcm-ca.crt": caSecret.Data[v1alpha1.DataKeyCertificate], "kcm-ca.key": caSecret.Data[v1alpha1.DataKeyPrivateKey],
		"kcm.kubeconfig": admin.Data[v1alpha1.DataKeyKubeconfig],
	}
	for name, data := range files {
		check(b, os.WriteFile(filepath.Join(cp.Dir, name), data, 0o600))
	}
	log, err := os.Create(filepath.Join(cp.Dir, "kube-controller-manager.log"))
	check(b, err)
	cmd := exec.Command(filepath.Join(assets, "kube-controller-manager"), //nolint:gosec // our own binary
		"--kubeconfig="+filepath.Join(cp.Dir, "kcm.kubeconfig"),
		"--controllers=csrapproving,csrsigning",
		"--cluster-signing-kubelet-client-cert-file="+filepath.Join(cp.Dir, "kcm-ca.crt"),
		"--cluster-signing-kubelet-client-key-file="+filepath.Join(cp.Dir, "kcm-ca.key"),
		"--leader-elect=false", "--secure-port=0", "--use-service-account-credentials=false")
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	check(b, cmd.Start())
	return func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
		_ = log.Close()
	}
}

func check(b *testing.B, err error) {
	b.Helper()
	if err != nil {
		b.Fatal(err)
	}
}
