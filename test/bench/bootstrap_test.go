// Package bench measures Carousel against real control-plane processes.
// `make bench` runs it after the Go micro-benchmarks.
package bench

import (
	"cmp"
	"context"
	"crypto"
	"crypto/x509"
	"fmt"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	certificatesclient "k8s.io/client-go/kubernetes/typed/certificates/v1"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
	"github.com/carousel-dev/carousel/pkg/controller/kubeletcsr"
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
	check(b, framework.DieWithTestProcess(env, assets, b.TempDir()))
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

	clientCA, err := credentials.ReadCAs(ctx, k8s, c, v1alpha1.CARoleClient)
	check(b, err)
	admin := &corev1.Secret{}
	check(b, k8s.Get(ctx, client.ObjectKey{Namespace: c.Namespace, Name: credentials.CertificateSecretName(c.Name, credentials.CertAdmin)}, admin))
	adminCfg, err := clientcmd.RESTConfigFromKubeConfig(admin.Data[v1alpha1.DataKeyKubeconfig])
	check(b, err)

	for b.Loop() {
		// The first CSRs the API servers see cost them more (caches, etcd's
		// first writes): a first round, not counted, takes that on.
		bootstrapAll(b, bootstrapCfg, cp.Dir, "warm-up")
		writesBefore, recordedBefore := recordWrites(b)
		carousel := bootstrapAll(b, bootstrapCfg, cp.Dir, "carousel")
		writes, recorded := recordWrites(b)
		writes, recorded = writes-writesBefore, recorded-recordedBefore
		stopCarousel()
		stopCarousel = func() {}

		stopCeiling := startBareSigner(b, adminCfg, clientCA.Current)
		ceiling := bootstrapAll(b, bootstrapCfg, cp.Dir, "ceiling")
		stopCeiling()

		stopKCM := startKubeControllerManager(b, ctx, k8s, c, cp, assets)
		kcm := bootstrapAll(b, bootstrapCfg, cp.Dir, "kcm")
		stopKCM()

		b.ReportMetric(carousel.rate, "carousel-csr/s")
		b.ReportMetric(ceiling.rate, "ceiling-csr/s")
		b.ReportMetric(kcm.rate, "kcm-csr/s")
		fmt.Printf("kubelet bootstrap: %d simultaneous CSRs approved+signed: Carousel %.1f/s, kube-controller-manager %.1f/s; "+
			"a signer that checks nothing %.1f/s (Carousel at %.0f %% of it)\n",
			kubelets, carousel.rate, kcm.rate, ceiling.rate, 100*carousel.rate/ceiling.rate)
		for _, r := range []struct {
			name string
			run  bootstrapRun
		}{{"Carousel", carousel}, {"the signer that checks nothing", ceiling}, {"kube-controller-manager", kcm}} {
			fmt.Printf("kubelet bootstrap: CPU per CSR with %s: %s\n", r.name, r.run.cpuPerCSR())
		}
		fmt.Printf("kubelet bootstrap: Carousel recorded %d client certificates for the old-CA usage gate in %d writes\n", recorded, writes)
	}
}

// bootstrapRun is what one run of bootstrapAll measured.
type bootstrapRun struct {
	rate float64 // certificates per second
	// cpu is the CPU time used during the run, by command name: "this
	// process" (the kubelets' requests, and Carousel's controllers when
	// they run), the API server and etcd of the management cluster and
	// those of the managed one, kube-controller-manager.
	cpu map[string]time.Duration
}

// cpuPerCSR lists the CPU time per certificate of each process, the most
// first.
func (r bootstrapRun) cpuPerCSR() string {
	names := slices.SortedFunc(maps.Keys(r.cpu), func(a, b string) int { return cmp.Compare(r.cpu[b], r.cpu[a]) })
	var total time.Duration
	parts := make([]string, 0, len(names))
	for _, name := range names {
		total += r.cpu[name]
		parts = append(parts, fmt.Sprintf("%s %.2f ms", name, perCSR(r.cpu[name])))
	}
	return fmt.Sprintf("%.2f ms in all: %s", perCSR(total), strings.Join(parts, ", "))
}

func perCSR(d time.Duration) float64 {
	return float64(d) / float64(time.Millisecond) / kubelets
}

// bootstrapAll has every kubelet create its CSR with the bootstrap token at
// once and wait for its certificate. The kubelets of each run connect anew,
// as new kubelets do: client-go caches transports by their configuration,
// and a dialer of the run's own makes a new one.
func bootstrapAll(b *testing.B, cfg *rest.Config, managedDir, run string) bootstrapRun {
	cfg = rest.CopyConfig(cfg)
	cfg.Dial = (&net.Dialer{}).DialContext
	cs := kubernetes.NewForConfigOrDie(cfg)
	keys := make([]crypto.Signer, kubelets)
	for i := range keys {
		var err error
		keys[i], err = pki.GenerateKey(pki.ECDSAP256)
		check(b, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cpuBefore, start := cpuUse(b, managedDir), time.Now()
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
	elapsed, cpu := time.Since(start), cpuUse(b, managedDir)
	close(errs)
	for err := range errs {
		check(b, err)
	}
	for name, before := range cpuBefore {
		if _, running := cpu[name]; running { // one that ended during the run is left out
			cpu[name] -= before
		}
	}
	return bootstrapRun{rate: float64(kubelets) / elapsed.Seconds(), cpu: cpu}
}

// startBareSigner approves and signs, with ca, every CSR created from now on
// until the returned function is called: the same two writes as Carousel
// (the approval, then the certificate), with as many workers and no client
// rate limit, and no check of any kind. What it reaches is the ceiling this
// machine and these API servers set for any signer.
func startBareSigner(b *testing.B, cfg *rest.Config, ca *pki.KeyPair) func() {
	cfg = rest.CopyConfig(cfg)
	cfg.QPS = -1 // no client-side rate limit
	cs := kubernetes.NewForConfigOrDie(cfg)
	ctx, cancel := context.WithCancel(context.Background())
	// Room for every CSR of a run: the informer never waits for a worker.
	created := make(chan *certificatesv1.CertificateSigningRequest, kubelets)
	var wg sync.WaitGroup
	stop := sync.OnceFunc(func() { cancel(); wg.Wait() })
	b.Cleanup(stop) // when the benchmark fails before it stops the signer
	informer := informers.NewSharedInformerFactory(cs, 0).Certificates().V1().CertificateSigningRequests().Informer()
	_, err := informer.AddEventHandler(toolscache.ResourceEventHandlerFuncs{AddFunc: func(obj any) {
		if csr, ok := obj.(*certificatesv1.CertificateSigningRequest); ok && len(csr.Status.Conditions) == 0 {
			created <- csr.DeepCopy()
		}
	}})
	check(b, err)
	wg.Go(func() { informer.RunWithContext(ctx) })
	listing, listed := context.WithTimeout(ctx, time.Minute)
	defer listed()
	if !toolscache.WaitForCacheSync(listing.Done(), informer.HasSynced) {
		b.Fatal("the CSRs were not listed within a minute")
	}
	for range kubeletcsr.DefaultConcurrency {
		wg.Go(func() {
			for {
				select {
				case <-ctx.Done():
					return
				case csr := <-created:
					if err := approveAndSign(ctx, cs.CertificatesV1().CertificateSigningRequests(), csr, ca); err != nil && ctx.Err() == nil {
						b.Error(err)
					}
				}
			}
		})
	}
	return stop
}

// approveAndSign approves csr and then posts a client certificate for its
// subject and key.
func approveAndSign(ctx context.Context, api certificatesclient.CertificateSigningRequestInterface, csr *certificatesv1.CertificateSigningRequest, ca *pki.KeyPair) error {
	csr.Status.Conditions = append(csr.Status.Conditions, certificatesv1.CertificateSigningRequestCondition{
		Type: certificatesv1.CertificateApproved, Status: corev1.ConditionTrue, Reason: "BenchmarkCeiling"})
	approved, err := api.UpdateApproval(ctx, csr.Name, csr, metav1.UpdateOptions{})
	if err != nil {
		return err
	}
	req, err := pki.ParseCertificateRequest(approved.Spec.Request)
	if err != nil {
		return fmt.Errorf("CSR %s: %w", csr.Name, err)
	}
	cert, err := ca.Issue(pki.LeafTemplate{CommonName: req.Subject.CommonName, Organization: req.Subject.Organization,
		Usages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, Validity: time.Hour}, req.PublicKey, time.Now())
	if err != nil {
		return err
	}
	approved.Status.Certificate = pki.EncodeCertificates(cert)
	_, err = api.UpdateStatus(ctx, approved, metav1.UpdateOptions{})
	return err
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
		"--leader-elect=false", "--secure-port=0", "--use-service-account-credentials=false",
		"--flex-volume-plugin-dir="+filepath.Join(cp.Dir, "kcm-volume-plugins")) // not the host's /usr/libexec/kubernetes/...
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
