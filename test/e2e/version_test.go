package e2e

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

var _ = Describe("The binaries", func() {
	It("say which Carousel they are: the release in VERSION and the git revision make build stamped in", func(ctx SpecContext) {
		if env == nil {
			Skip("checks the binaries `make build` wrote into bin/")
		}
		release, err := os.ReadFile(filepath.Join(env.RepoRoot, "VERSION"))
		Expect(err).NotTo(HaveOccurred())
		head, err := exec.CommandContext(ctx, "git", "-C", env.RepoRoot, "rev-parse", "HEAD").Output()
		Expect(err).NotTo(HaveOccurred())
		want := func(name string) string {
			return name + " " + strings.TrimSpace(string(release)) + " (revision " + strings.TrimSpace(string(head))
		}
		for _, run := range [][]string{
			{"carousel-controller-manager", "--version"},
			{"carousel-node-agent", "--version"},
			{"kubectl-carousel", "--version"},
			{"kubectl-carousel", "version"},
		} {
			out, err := exec.CommandContext(ctx, filepath.Join(env.CarouselBinDir, run[0]), run[1:]...).Output() //nolint:gosec // our own binaries
			Expect(err).NotTo(HaveOccurred(), "%v", run)
			Expect(string(out)).To(HavePrefix(want(run[0])), "%v", run)
		}
	})

	It("complete Cluster names in kubectl, through the plugin's completion shim", func(ctx SpecContext) {
		if env == nil {
			Skip("runs kubectl carousel from bin/ and kubectl from the test control plane")
		}
		// kubectl finds the plugin and its shim on PATH, as a user who installed both has them.
		path := GinkgoT().TempDir()
		Expect(os.Symlink(filepath.Join(env.CarouselBinDir, "kubectl-carousel"), filepath.Join(path, "kubectl-carousel"))).To(Succeed())
		Expect(os.Symlink(filepath.Join(env.RepoRoot, "cmd", "kubectl-carousel", "kubectl_complete-carousel"),
			filepath.Join(path, "kubectl_complete-carousel"))).To(Succeed())
		cmd := exec.CommandContext(ctx, filepath.Join(os.Getenv("KUBEBUILDER_ASSETS"), "kubectl"), //nolint:gosec // the test control plane's kubectl
			"__complete", "carousel", "rotation", "status", "--kubeconfig", env.ManagementKubeconfig, "-n", env.Namespace, env.Name[:2])
		cmd.Env = append(os.Environ(), "PATH="+path+string(os.PathListSeparator)+os.Getenv("PATH"))
		out, err := cmd.Output()
		Expect(err).NotTo(HaveOccurred())
		Expect(strings.Split(strings.TrimSpace(string(out)), "\n")).To(Equal([]string{env.Name, ":4"}),
			"the Cluster's name, then cobra's directive 4 (no file completion)")
	})

	It("say what is wrong with their flags in plain lines, and exit 2", func(ctx SpecContext) {
		if env == nil {
			Skip("checks the binaries `make build` wrote into bin/")
		}
		cmd := exec.CommandContext(ctx, filepath.Join(env.CarouselBinDir, "carousel-controller-manager"), "--webhook-cert-secret=no-namespace") //nolint:gosec // our own binary
		var stderr strings.Builder
		cmd.Stderr = &stderr
		err := cmd.Run()
		var exit *exec.ExitError
		Expect(errors.As(err, &exit)).To(BeTrue(), "%v", err)
		Expect(exit.ExitCode()).To(Equal(2))
		Expect(stderr.String()).To(Equal("carousel-controller-manager: invalid flags:\n" +
			"--webhook-cert-secret must be NAMESPACE/NAME, got \"no-namespace\"\n" +
			"--webhook-cert-secret needs --webhook-configuration\n" +
			"--webhook-cert-secret needs --webhook-dns-names\n"))
	})
})
