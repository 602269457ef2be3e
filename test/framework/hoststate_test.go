package framework

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestParentOf(t *testing.T) {
	for _, tc := range []struct {
		name, stat string
		pid, ppid  int
		ok         bool
	}{
		{name: "plain", stat: "42 (sleep) S 7 42 42 0 -1", pid: 42, ppid: 7, ok: true},
		{name: "command with spaces and parentheses", stat: "9 (a) b (c) R 1 9 9 0", pid: 9, ppid: 1, ok: true},
		{name: "truncated", stat: "9 (sleep) S", ok: false},
		{name: "no command", stat: "9 S 1", ok: false},
		{name: "pid not a number", stat: "x (sleep) S 1 9", ok: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "stat")
			if err := os.WriteFile(path, []byte(tc.stat+"\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			pid, ppid, ok := parentOf(path)
			if ok != tc.ok || ok && (pid != tc.pid || ppid != tc.ppid) {
				t.Errorf("parentOf(%q) = %d, %d, %t; want %d, %d, %t", tc.stat, pid, ppid, ok, tc.pid, tc.ppid, tc.ok)
			}
		})
	}
}

// TestHostStateSeesTheNetworkNamespacesOfDescendantsAndOrphans starts a
// grandchild in a network namespace of its own and checks that the host
// state lists that namespace while it runs, still lists it once its parent
// was killed and it became an orphan, and no longer once it was killed too.
func TestHostStateSeesTheNetworkNamespacesOfDescendantsAndOrphans(t *testing.T) {
	if _, err := exec.LookPath("unshare"); err != nil || os.Geteuid() != 0 {
		t.Skip("needs root and unshare")
	}
	before, err := ReadHostState()
	if err != nil {
		t.Fatal(err)
	}
	// sh runs unshare as its child, which makes the namespace and execs
	// sleep: a grandchild of the test process.
	child := exec.Command("sh", "-c", "unshare --net -- sleep 60; true")
	// sh dies with the test; the grandchild, orphaned on purpose, holds the
	// namespace for its 60 s at most.
	child.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	grandchild := 0
	t.Cleanup(func() {
		_ = child.Process.Kill()
		_ = child.Wait()
		if grandchild != 0 {
			_ = syscall.Kill(grandchild, syscall.SIGKILL)
		}
	})
	own, err := os.Readlink("/proc/self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	theirs := ""
	poll(t, "the grandchild's network namespace", func() bool {
		for _, pid := range ownOrOrphanedProcesses() {
			if _, ppid, ok := parentOf(filepath.Join("/proc", strconv.Itoa(pid), "stat")); ok && ppid == child.Process.Pid {
				grandchild = pid
				theirs, _ = os.Readlink(filepath.Join("/proc", strconv.Itoa(pid), "ns/net"))
			}
		}
		return theirs != "" && theirs != own
	})
	diff := func() string {
		now, err := ReadHostState()
		if err != nil {
			t.Fatal(err)
		}
		return now.Diff(before)
	}
	if got := diff(); got != "new network namespace "+theirs {
		t.Fatalf("with the grandchild running, Diff = %q, want only its network namespace %s", got, theirs)
	}
	if err := child.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = child.Wait()
	poll(t, "the grandchild to be orphaned", func() bool {
		_, ppid, ok := parentOf(filepath.Join("/proc", strconv.Itoa(grandchild), "stat"))
		return ok && ppid != child.Process.Pid
	})
	if got := diff(); got != "new network namespace "+theirs {
		t.Fatalf("with the grandchild orphaned, Diff = %q, want only its network namespace %s", got, theirs)
	}
	if err := syscall.Kill(grandchild, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	// init reaps it: its PID may be another process's by the cleanup.
	grandchild = 0
	poll(t, "the host state to be as before", func() bool { return diff() == "" })
}

// poll waits, with the framework's await, until condition holds, and fails
// the test if it does not within 10 s.
func poll(t *testing.T, what string, condition func() bool) {
	t.Helper()
	if err := await(context.Background(), what, 10*time.Millisecond, 10*time.Second,
		func(context.Context) (bool, error) { return condition(), nil }); err != nil {
		t.Fatal(err)
	}
}

// hostStateChildEnv makes the test binary print the network namespaces of
// its host state, one a line.
const hostStateChildEnv = "CAROUSEL_FRAMEWORK_TEST_HOST_STATE"

func printNetworkNamespaces() int {
	s, err := ReadHostState()
	if err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		return 1
	}
	fmt.Println(strings.Join(s.NetworkNamespaces, "\n"))
	return 0
}

// TestHostStateLeavesOutTheNetworkNamespacesOfOthers reads the host state in
// a child process while a sibling of it, neither its descendant nor an
// orphan, holds a network namespace, as another suite running beside it
// would: the child's host state does not list it.
func TestHostStateLeavesOutTheNetworkNamespacesOfOthers(t *testing.T) {
	if _, err := exec.LookPath("unshare"); err != nil || os.Geteuid() != 0 {
		t.Skip("needs root and unshare")
	}
	sibling := exec.Command("unshare", "--net", "--", "sleep", "60")
	sibling.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := sibling.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sibling.Process.Kill(); _ = sibling.Wait() })
	own, err := os.Readlink("/proc/self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	theirs := ""
	poll(t, "the sibling's network namespace", func() bool {
		theirs, _ = os.Readlink(filepath.Join("/proc", strconv.Itoa(sibling.Process.Pid), "ns/net"))
		return theirs != "" && theirs != own
	})
	child := exec.Command(os.Args[0], "-test.run=^$") //nolint:gosec // the test binary itself
	child.Env = append(os.Environ(), hostStateChildEnv+"=1")
	out, err := child.Output()
	if err != nil {
		t.Fatal(err)
	}
	listed := strings.Fields(string(out))
	if !slices.Contains(listed, own) {
		t.Fatalf("the child's host state lacks its own network namespace %s: %v", own, listed)
	}
	if slices.Contains(listed, theirs) {
		t.Errorf("the child's host state lists its sibling's network namespace %s: %v", theirs, listed)
	}
}

// TestHostStateDiffNamesWhatChanged: a module loaded and a path the kubelet
// made are named, as a changed sysctl is.
func TestHostStateDiffNamesWhatChanged(t *testing.T) {
	before := HostState{Sysctls: map[string]string{"vm/panic_on_oom": "0"}, Modules: []string{"bridge"}}
	now := HostState{Sysctls: map[string]string{"vm/panic_on_oom": "1"}, Modules: []string{"bridge", "ifb"}, Paths: []string{"/usr/libexec/kubernetes"}}
	want := `sysctl vm/panic_on_oom is "1", was "0"; new path /usr/libexec/kubernetes; new kernel module ifb`
	if got := now.Diff(before); got != want {
		t.Errorf("Diff = %q, want %q", got, want)
	}
	if got := before.Diff(before); got != "" {
		t.Errorf("Diff of the same state = %q", got)
	}
	// A network namespace gone since is none of the suite's doing (another
	// suite's orphan that ended); a new one is.
	withOrphan := HostState{NetworkNamespaces: []string{"net:[4026532001]", "net:[4026532999]"}}
	own := HostState{NetworkNamespaces: []string{"net:[4026532001]"}}
	if got := own.Diff(withOrphan); got != "" {
		t.Errorf("Diff after another's orphan ended = %q, want none", got)
	}
	if got, want := withOrphan.Diff(own), "new network namespace net:[4026532999]"; got != want {
		t.Errorf("Diff = %q, want %q", got, want)
	}
}
