package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/carousel-dev/carousel/test/framework"
)

// sandboxChildEnv, set to a directory, makes the test binary run
// sandboxChild instead of the suite.
const sandboxChildEnv = "CAROUSEL_E2E_SANDBOX_CHILD"

func TestMain(m *testing.M) {
	if dir := os.Getenv(sandboxChildEnv); dir != "" {
		if err := sandboxChild(dir); err != nil {
			fmt.Fprintln(os.Stderr, "sandbox child:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// sandboxChild starts the whole local environment with one real kubelet
// (management etcd and API server, the controller manager, the managed
// control plane and the node in their namespaces), writes "started" into dir
// and waits to be killed.
func sandboxChild(dir string) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		return err
	}
	env, err := framework.Start(ctx, framework.Options{
		RepoRoot: root, KubeBinDir: os.Getenv("KUBEBUILDER_ASSETS"), CarouselBinDir: filepath.Join(root, "bin"),
		WorkDir: filepath.Join(dir, "env"), Namespace: "sandbox", Name: "killed", Pool: "workers", Nodes: 1,
	})
	if err != nil {
		env.Stop()
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "started"), nil, 0o600); err != nil {
		return err
	}
	<-ctx.Done()
	return nil
}

var _ = Describe("The local environment", func() {
	It("leaves nothing behind on the host when the test process is killed", func(ctx SpecContext) {
		if env == nil {
			Skip("runs only in the local environment")
		}
		before, err := framework.ReadHostState()
		Expect(err).NotTo(HaveOccurred())
		dir := GinkgoT().TempDir()
		child := exec.Command(os.Args[0], "-test.run=^$") //nolint:gosec // the test binary itself
		// envtest makes its directories (etcd's data, the API server's
		// certificates, the webhook's serving certificate) in the temporary
		// directory and removes them when stopped: a killed child's are left
		// in dir, which this test removes.
		child.Env = append(os.Environ(), sandboxChildEnv+"="+dir, "TMPDIR="+dir)
		out, err := os.Create(filepath.Join(dir, "child.log"))
		Expect(err).NotTo(HaveOccurred())
		defer func() { _ = out.Close() }()
		child.Stdout, child.Stderr = out, out
		// Killed with this test process, which may be killed before its
		// cleanup runs: the child's own processes die with the child.
		child.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		Expect(child.Start()).To(Succeed())
		exited := make(chan struct{})
		go func() { _ = child.Wait(); close(exited) }()
		DeferCleanup(func() { _ = child.Process.Kill(); <-exited })

		Eventually(func() error {
			_, err := os.Stat(filepath.Join(dir, "started"))
			return err
		}).WithTimeout(3*time.Minute).Should(Succeed(), func() string {
			log, _ := os.ReadFile(filepath.Join(dir, "child.log"))
			return "the child starts the environment with a kubelet; its log:\n" + string(log)
		})
		for _, pattern := range []string{"k8s_test_framework_*", "envtest-serving-certs-*"} {
			Expect(filepath.Glob(filepath.Join(dir, pattern))).NotTo(BeEmpty(), "the child's envtest makes its %s in its TMPDIR", pattern)
		}
		started := descendants(child.Process.Pid)
		var names []string
		for _, name := range started {
			names = append(names, name)
		}
		for _, want := range []string{"etcd", "kube-apiserver", "kube-controller", "carousel-contro", "kubelet", "fake-cri", "carousel-node-a", "sleep"} {
			Expect(names).To(ContainElement(want), "the child runs %s", want)
		}

		By("killing the child with SIGKILL, as a killed test run would be")
		Expect(child.Process.Signal(syscall.SIGKILL)).To(Succeed())
		<-exited
		Eventually(func() []string {
			var alive []string
			for pid, name := range started {
				if processAlive(pid) {
					alive = append(alive, fmt.Sprintf("%s (%d)", name, pid))
				}
			}
			return alive
		}).WithTimeout(30*time.Second).Should(BeEmpty(), "every process the child started is gone")
		Eventually(func() (string, error) {
			now, err := framework.ReadHostState()
			return now.Diff(before), err
		}).WithTimeout(30*time.Second).Should(BeEmpty(), "the host is as the test found it")
	})
})

// descendants returns every process below pid, by PID, with its command
// name (/proc/<pid>/comm, at most 15 characters).
func descendants(pid int) map[int]string {
	children := map[int][]int{}
	names := map[int]string{}
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, path := range stats {
		data, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		s := string(data)
		open, closing := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
		if open < 0 || closing < open {
			continue
		}
		fields := strings.Fields(s[closing+1:])
		if len(fields) < 2 {
			continue
		}
		p, _ := strconv.Atoi(strings.TrimSpace(s[:open]))
		parent, _ := strconv.Atoi(fields[1])
		children[parent] = append(children[parent], p)
		names[p] = s[open+1 : closing]
	}
	out := map[int]string{}
	for queue := children[pid]; len(queue) > 0; queue = queue[1:] {
		p := queue[0]
		out[p] = names[p]
		queue = append(queue, children[p]...)
	}
	return out
}

// processAlive reports whether pid names a process that has not exited (a
// zombie counts as exited).
func processAlive(pid int) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if errors.Is(err, os.ErrNotExist) {
		return false
	}
	// The state follows the command's closing parenthesis.
	s := string(stat)
	i := strings.LastIndexByte(s, ')')
	return err != nil || i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}
