// Package e2e holds the end-to-end suites: the Carousel controller manager
// (its binary) against a management API server, and a managed cluster whose
// etcd, kube-apiserver and kube-controller-manager run on the certificates
// Carousel issued, with four real kubelets that bootstrapped through
// Carousel and the node agent beside each (one of them off through the
// rotation), in a network namespace of the suite's (test/framework). See
// docs/how-to/local-environment.md.
package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/carousel-dev/carousel/pkg/scheme"
	"github.com/carousel-dev/carousel/test/framework"
	"github.com/carousel-dev/carousel/test/framework/hostcheck"
)

// kubeletCertificateValidity caps the kubelet certificates Carousel signs in
// the local environment, so that kubelets rotate their own during the suite.
// The node powered off through the rotation comes back with one its
// provisioning signed for longer (provisionedClientCertificate).
const kubeletCertificateValidity = 4 * time.Minute

// target is the management cluster and Cluster the suite rotates.
type target struct {
	Client          client.Client
	Namespace, Name string
}

var (
	tgt *target
	// env is the local environment; nil against an existing management cluster.
	env *framework.Environment
)

func TestE2E(t *testing.T) {
	RegisterFailHandler(Fail)
	// make test runs this suite beside another on two cores: what takes
	// milliseconds alone can take seconds then (a second was too short).
	SetDefaultEventuallyTimeout(30 * time.Second)
	RunSpecs(t, "End-to-end Suite")
}

var _ = BeforeSuite(func(ctx SpecContext) {
	// envtest and the test provider's controllers log through controller-runtime.
	logf.SetLogger(zap.New(zap.WriteTo(GinkgoWriter), zap.UseDevMode(true)))
	if kubeconfig := os.Getenv("CAROUSEL_E2E_KUBECONFIG"); kubeconfig != "" {
		useExistingCluster(kubeconfig, os.Getenv("CAROUSEL_E2E_CLUSTER"))
		return
	}
	root, err := filepath.Abs(filepath.Join("..", ".."))
	Expect(err).NotTo(HaveOccurred())
	assets := os.Getenv("KUBEBUILDER_ASSETS")
	Expect(assets).NotTo(BeEmpty(), "run the suite through `make test-e2e`, which builds the test control plane and the binaries")
	bin := filepath.Join(root, "bin")
	for _, b := range []string{"carousel-controller-manager", "carousel-node-agent"} {
		Expect(filepath.Join(bin, b)).To(BeARegularFile(), "run `make build` first")
	}
	work := os.Getenv("CAROUSEL_E2E_WORKDIR")
	if work == "" {
		work = GinkgoT().TempDir()
	} else {
		// The nodes would start on the credentials of a cluster that is
		// gone, and the run would be about them, not the rotation.
		left, _ := os.ReadDir(work)
		Expect(left).To(BeEmpty(), "CAROUSEL_E2E_WORKDIR %s holds an earlier run's files: empty it, or name another directory", work)
	}
	// Registered before env.Stop, so it runs after it.
	hostcheck.ExpectUntouched()
	env, err = framework.Start(ctx, framework.Options{
		RepoRoot: root, KubeBinDir: assets, CarouselBinDir: bin, WorkDir: work,
		// Four nodes: the journey powers one off for the whole rotation.
		// The Cluster of `make run`, which the tutorial the journey follows names.
		Namespace: "carousel", Name: "demo", Pool: "workers", Nodes: 4,
		// Kubelet certificates of 4 minutes (valid from 5 minutes back, so
		// 9 minutes long): each kubelet rotates its own at 70-90 % of that,
		// 78 s to 186 s after it got it, through the selfnodeclient path.
		// The journey itself uses old credentials in Prepared, to show they
		// still work: the old-CA usage gate, which hears of it through the
		// managed API server's audit events, lets go of them a minute later.
		OperatorFlags: []string{"--csr-max-duration=" + kubeletCertificateValidity.String(), "--old-ca-usage-window=1m"},
		Logf: func(format string, args ...any) {
			GinkgoWriter.Printf(time.Now().Format("15:04:05 ")+format+"\n", args...)
		},
	})
	DeferCleanup(env.Stop)
	Expect(err).NotTo(HaveOccurred(), "starting the local environment; logs are in %s", work)
	tgt = &target{Client: env.Client, Namespace: env.Namespace, Name: env.Name}
}, NodeTimeout(5*time.Minute))

// useExistingCluster points the suite at a Cluster ("namespace/name") in an
// existing management cluster, where Carousel and the platform already run.
func useExistingCluster(kubeconfig, cluster string) {
	GinkgoHelper()
	ns, name, ok := strings.Cut(cluster, "/")
	Expect(ok).To(BeTrue(), "CAROUSEL_E2E_CLUSTER must be <namespace>/<name>, got %q", cluster)
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	Expect(err).NotTo(HaveOccurred())
	c, err := client.New(cfg, client.Options{Scheme: scheme.New()})
	Expect(err).NotTo(HaveOccurred())
	tgt = &target{Client: c, Namespace: ns, Name: name}
}
