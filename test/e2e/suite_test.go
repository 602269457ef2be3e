// Package e2e holds the end-to-end suites: the Carousel controller manager
// (its binary) against a management API server, and a managed cluster whose
// etcd, kube-apiserver and kube-controller-manager run on the certificates
// Carousel issued, with node agents that bootstrapped against it. See
// docs/how-to/run-e2e.md.
package e2e

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/carousel-dev/carousel/test/framework"
)

var env *framework.Environment

func TestE2E(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "End-to-end Suite")
}

var _ = BeforeSuite(func(ctx SpecContext) {
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
	}
	env, err = framework.Start(ctx, framework.Options{
		RepoRoot: root, KubeBinDir: assets, CarouselBinDir: bin, WorkDir: work,
		Namespace: "e2e", Name: "journey", Pool: "workers", Nodes: 3,
		Logf: func(format string, args ...any) {
			GinkgoWriter.Printf(time.Now().Format("15:04:05 ")+format+"\n", args...)
		},
	})
	DeferCleanup(env.Stop)
	Expect(err).NotTo(HaveOccurred(), "starting the local environment; logs are in %s", work)
}, NodeTimeout(5*time.Minute))
