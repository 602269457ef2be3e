// Package chart tests the Helm chart: lint, the values schema, and an install
// on a real API server where the controller manager runs as the chart's
// ServiceAccount (through impersonation) through a whole CA rotation, so that
// a permission the chart forgot fails the suite. `make chart-test` runs it.
package chart

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

var (
	root, chartDir, helmBin, kubeAssets, carouselBin string
)

func TestChart(t *testing.T) {
	RegisterFailHandler(Fail)
	// make test runs this suite beside another on two cores: what takes
	// milliseconds alone can take seconds then (a second was too short).
	SetDefaultEventuallyTimeout(30 * time.Second)
	RunSpecs(t, "Helm Chart Suite")
}

var _ = BeforeSuite(func() {
	var err error
	root, err = filepath.Abs(filepath.Join("..", ".."))
	Expect(err).NotTo(HaveOccurred())
	chartDir = filepath.Join(root, "charts", "carousel")
	carouselBin = filepath.Join(root, "bin")
	helmBin = os.Getenv("HELM")
	kubeAssets = os.Getenv("KUBEBUILDER_ASSETS")
	Expect(helmBin).NotTo(BeEmpty(), "run the suite through `make chart-test`, which builds helm, the test control plane and the binaries")
	Expect(kubeAssets).NotTo(BeEmpty(), "run the suite through `make chart-test`")
	Expect(filepath.Join(carouselBin, "carousel-controller-manager")).To(BeARegularFile(), "run `make build` first")
})

// command is exec.CommandContext for a command that also dies with the test
// process: a suite killed midway leaves no helm, kubectl or plugin polling a
// control plane that is gone.
func command(ctx context.Context, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, name, args...) //nolint:gosec // the suite's own binaries
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	return cmd
}

// helm runs the helm binary and returns its standard output, or an error
// carrying its standard error.
func helm(args ...string) (string, error) { return helmContext(context.Background(), args...) }

// helmContext is helm, ended when ctx is.
func helmContext(ctx context.Context, args ...string) (string, error) {
	var stdout, stderr bytes.Buffer
	cmd := command(ctx, helmBin, args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), &helmError{args: args, err: err, stderr: stderr.String()}
	}
	return stdout.String(), nil
}

type helmError struct {
	args   []string
	err    error
	stderr string
}

func (e *helmError) Error() string {
	return "helm " + e.args[0] + ": " + e.err.Error() + ": " + e.stderr
}
