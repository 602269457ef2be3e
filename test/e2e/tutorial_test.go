package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
)

// The tutorial (docs/tutorial/first-rotation.md) runs against the environment `make run` starts, the one this
// suite starts too, with the same Cluster carousel/demo. Its ```sh step=NAME blocks are the commands it has the
// reader type after the setup; the rotation journey runs each of them, in the tutorial's order, where the
// tutorial has the reader run it, and checks what it prints.
const tutorialPath = "docs/tutorial/first-rotation.md"

var tutorialStepBlock = regexp.MustCompile("(?ms)^```sh step=([a-z-]+)\n(.*?)^```$")

type tutorialRun struct {
	order   []string
	scripts map[string]string
	dir     string // the reader's working directory, shared by the steps

	mu  sync.Mutex
	ran []string
}

var tutorial = &tutorialRun{}

// runsTutorial says whether the journey follows the tutorial: in the suite's own environment, whose Cluster is
// the tutorial's and whose binaries are the ones make build wrote.
func runsTutorial() bool { return env != nil }

func (t *tutorialRun) load() {
	GinkgoHelper()
	if t.scripts != nil {
		return
	}
	doc, err := os.ReadFile(filepath.Join(env.RepoRoot, tutorialPath))
	Expect(err).NotTo(HaveOccurred())
	t.scripts = map[string]string{}
	for _, m := range tutorialStepBlock.FindAllStringSubmatch(string(doc), -1) {
		Expect(t.scripts).NotTo(HaveKey(m[1]), "step %s twice in %s", m[1], tutorialPath)
		t.order = append(t.order, m[1])
		t.scripts[m[1]] = m[2]
	}
	Expect(t.order).NotTo(BeEmpty(), "no ```sh step=NAME block in %s", tutorialPath)
	// The reader's directory lives as long as the environment: the steps of several specs share it.
	t.dir = filepath.Join(env.WorkDir, "tutorial")
	Expect(os.MkdirAll(t.dir, 0o700)).To(Succeed())
}

// command is step name as the reader runs it after the tutorial's setup: KUBECONFIG on the management
// cluster, Carousel's binaries and kubectl on the PATH, in the directory of the earlier steps.
func (t *tutorialRun) command(ctx context.Context, name string) *exec.Cmd {
	GinkgoHelper()
	t.load()
	script, ok := t.scripts[name]
	Expect(ok).To(BeTrue(), "%s has no step %s", tutorialPath, name)
	t.mu.Lock()
	t.ran = append(t.ran, name)
	t.mu.Unlock()
	cmd := exec.CommandContext(ctx, "bash", "-o", "errexit", "-o", "nounset", "-o", "pipefail", "-c", script)
	// The step dies with the suite, killed or timed out, its commands with
	// it: in a process group of its own, which a cancelled ctx kills whole.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 10 * time.Second
	cmd.Dir = t.dir
	cmd.Env = append(os.Environ(), "KUBECONFIG="+env.ManagementKubeconfig,
		"PATH="+env.CarouselBinDir+string(os.PathListSeparator)+env.KubeBinDir+string(os.PathListSeparator)+os.Getenv("PATH"))
	return cmd
}

// step runs a step of the tutorial and returns what it printed.
func (t *tutorialRun) step(ctx context.Context, name string) string {
	GinkgoHelper()
	out, err := t.command(ctx, name).CombinedOutput()
	GinkgoWriter.Printf("tutorial step %s:\n%s", name, out)
	Expect(err).NotTo(HaveOccurred(), "tutorial step %s:\n%s", name, out)
	return string(out)
}

// start runs a step that waits (rotation start or complete with --wait) in the background and returns once the
// operation it requests is under way (the Cluster carries it, or is in phase through); the returned function
// waits for the step's end and returns its output.
func (t *tutorialRun) start(ctx context.Context, name, operation string, through v1alpha1.CARotationPhase) (wait func() string) {
	GinkgoHelper()
	// Ended with the spec, if it is still waiting then.
	cmd := t.command(ctx, name)
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	Expect(cmd.Start()).To(Succeed())
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	Eventually(func() bool {
		c := cluster(ctx)
		return c.Annotations[v1alpha1.OperationAnnotation] == operation || c.CARotationPhase() == through
	}).Should(BeTrue(), "tutorial step %s requests %s", name, operation)
	return func() string {
		GinkgoHelper()
		var err error
		Eventually(done).WithTimeout(time.Minute).Should(Receive(&err), "tutorial step %s ends once the phase is reached", name)
		GinkgoWriter.Printf("tutorial step %s:\n%s", name, out.String())
		Expect(err).NotTo(HaveOccurred(), "tutorial step %s:\n%s", name, out.String())
		return out.String()
	}
}

// expectAllRun checks that the journey ran every step of the tutorial, in its order.
func (t *tutorialRun) expectAllRun() {
	GinkgoHelper()
	t.load()
	t.mu.Lock()
	defer t.mu.Unlock()
	Expect(t.ran).To(Equal(t.order), "the journey runs every step of %s, in order", tutorialPath)
	Expect(slices.Compact(slices.Clone(t.ran))).To(HaveLen(len(t.ran)))
}
