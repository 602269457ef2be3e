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

	"github.com/carousel-dev/carousel/pkg/pki"
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

// sandboxChild starts a network namespace and one sandboxed kubelet node
// whose API server does not exist, writes the PIDs of every process it
// started and the namespace's identity into dir, and waits to be killed.
func sandboxChild(dir string) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	netns, err := framework.NewNetns(ctx, dir, framework.NodeIP(1))
	if err != nil {
		return err
	}
	n := &framework.KubeletNode{Name: "sandbox-node", IP: framework.NodeIP(1), Dir: filepath.Join(dir, "node"),
		BinDir: os.Getenv("KUBEBUILDER_ASSETS"), Netns: netns}
	bootstrap := []byte("apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: https://127.0.0.1:1\n" +
		"users:\n- name: u\n  user:\n    token: abcdef.0123456789abcdef\ncontexts:\n- name: c\n  context:\n    cluster: c\n    user: u\ncurrent-context: c\n")
	key, err := pki.GenerateKey(pki.ECDSAP256)
	if err != nil {
		return err
	}
	ca, err := pki.NewCA(pki.CATemplate{CommonName: "sandbox-kubelet-ca", Validity: time.Hour}, key, time.Now())
	if err != nil {
		return err
	}
	if err := n.Provision(bootstrap, ca.CertPEM()); err != nil {
		return err
	}
	if err := n.Start(ctx); err != nil {
		return err
	}
	ns, err := os.Readlink(netns.Path())
	if err != nil {
		return err
	}
	pids := strings.Join(append([]string{ns, strconv.Itoa(netns.PID())}, pidStrings(n.PIDs())...), "\n")
	if err := os.WriteFile(filepath.Join(dir, "started"), []byte(pids), 0o600); err != nil {
		return err
	}
	<-ctx.Done()
	return nil
}

func pidStrings(pids []int) []string {
	out := make([]string, len(pids))
	for i, p := range pids {
		out[i] = strconv.Itoa(p)
	}
	return out
}

var _ = Describe("A node's sandbox", func() {
	It("leaves nothing behind on the host when the test process is killed", func(ctx SpecContext) {
		if env == nil {
			Skip("runs only in the local environment")
		}
		before, err := framework.ReadHostState()
		Expect(err).NotTo(HaveOccurred())
		dir := GinkgoT().TempDir()
		child := exec.Command(os.Args[0], "-test.run=^$") //nolint:gosec // the test binary itself
		child.Env = append(os.Environ(), sandboxChildEnv+"="+dir)
		out, err := os.Create(filepath.Join(dir, "child.log"))
		Expect(err).NotTo(HaveOccurred())
		defer func() { _ = out.Close() }()
		child.Stdout, child.Stderr = out, out
		Expect(child.Start()).To(Succeed())
		exited := make(chan struct{})
		go func() { _ = child.Wait(); close(exited) }()
		DeferCleanup(func() { _ = child.Process.Kill(); <-exited })

		var started []string
		Eventually(func(g Gomega) {
			data, err := os.ReadFile(filepath.Join(dir, "started"))
			g.Expect(err).NotTo(HaveOccurred())
			started = strings.Split(string(data), "\n")
		}).WithTimeout(time.Minute).Should(Succeed(), func() string {
			log, _ := os.ReadFile(filepath.Join(dir, "child.log"))
			return "the child starts a sandboxed kubelet; its log:\n" + string(log)
		})
		ns, pids := started[0], started[1:]
		Expect(pids).To(HaveLen(4), "the netns holder, the node's sandbox, fake-cri and the kubelet")
		running, err := framework.ReadHostState()
		Expect(err).NotTo(HaveOccurred())
		Expect(running.NetworkNamespaces).To(ContainElement(ns), "the child's namespace exists while it runs")
		Expect(running.Mounts).To(Equal(before.Mounts), "the node's mounts are not the host's")

		By("killing the child with SIGKILL, as a killed test run would be")
		Expect(child.Process.Signal(syscall.SIGKILL)).To(Succeed())
		<-exited
		Eventually(func() []string {
			var alive []string
			for _, p := range pids {
				pid, _ := strconv.Atoi(p)
				if processAlive(pid) {
					alive = append(alive, p)
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
