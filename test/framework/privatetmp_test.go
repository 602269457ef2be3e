package framework

import (
	"bufio"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// TestPrivateTmpLeavesNothingWhenKilled runs a command through
// hack/private-tmp.sh, the wrapper of every go test the Makefile runs, that
// reads a file of its working directory under /tmp (a checkout there), writes
// a file into /tmp and is then killed with SIGKILL, so that nothing of
// its own cleans up: with a private /tmp the file was in a tmpfs of the
// command's own and is not in the /tmp it was started from, nor is any mount
// left; with PRIVATE_TMP=0 it is, which shows the check sees such a file.
func TestPrivateTmpLeavesNothingWhenKilled(t *testing.T) {
	script := privateTmpScript(t)
	for _, tc := range []struct {
		name       string
		privateTmp string
		wantFsType string
		wantLeft   bool
	}{
		{name: "private", privateTmp: "1", wantFsType: "tmpfs", wantLeft: false},
		{name: "turned off", privateTmp: "0", wantLeft: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			left := filepath.Join("/tmp", "carousel-private-tmp-test-"+strconv.Itoa(os.Getpid())+"-"+tc.name[:1])
			t.Cleanup(func() { _ = os.Remove(left) })
			mountsBefore, err := os.ReadFile("/proc/self/mountinfo")
			if err != nil {
				t.Fatal(err)
			}
			// Its working directory is under /tmp, as a checkout there would
			// be: it stays as it is.
			checkout := t.TempDir()
			if err := os.WriteFile(filepath.Join(checkout, "kept"), []byte("the checkout\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command(script, "/bin/sh", "-c", `touch "$0" && stat -f -c %T /tmp && cat kept && exec sleep 60`, left)
			cmd.Dir = checkout
			// The test may itself run under the wrapper, which then runs
			// the command as it is: this one must make its own.
			cmd.Env = append(withoutEnv(os.Environ(), "CAROUSEL_PRIVATE_TMP", "PRIVATE_TMP"), "PRIVATE_TMP="+tc.privateTmp)
			cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
			out, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
			lines := bufio.NewReader(out)
			fsType, err := lines.ReadString('\n')
			if err != nil {
				t.Fatalf("the command wrote nothing before it slept: %v", err)
			}
			if kept, err := lines.ReadString('\n'); kept != "the checkout\n" {
				t.Fatalf("the command read %q from its working directory under /tmp, want %q (%v)", kept, "the checkout\n", err)
			}
			if tc.wantFsType != "" && strings.TrimSpace(fsType) != tc.wantFsType {
				t.Errorf("the command's /tmp is %q, want %q", strings.TrimSpace(fsType), tc.wantFsType)
			}
			// The wrapper execs unshare, which execs sh, which execs sleep:
			// the process started is the one killed.
			if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			if err := cmd.Wait(); err == nil || !strings.Contains(err.Error(), "killed") {
				t.Fatalf("the command ended with %v, want killed", err)
			}
			_, err = os.Stat(left)
			if isLeft := err == nil; isLeft != tc.wantLeft {
				t.Errorf("%s left in /tmp after the command was killed: %t, want %t (%v)", left, isLeft, tc.wantLeft, err)
			} else if err != nil && !errors.Is(err, os.ErrNotExist) {
				t.Fatal(err)
			}
			mountsAfter, err := os.ReadFile("/proc/self/mountinfo")
			if err != nil {
				t.Fatal(err)
			}
			if string(mountsAfter) != string(mountsBefore) {
				t.Errorf("the mounts changed:\nbefore:\n%s\nafter:\n%s", mountsBefore, mountsAfter)
			}
		})
	}
}

// withoutEnv returns env without the variables named.
func withoutEnv(env []string, names ...string) []string {
	return slices.DeleteFunc(slices.Clone(env), func(kv string) bool {
		name, _, _ := strings.Cut(kv, "=")
		return slices.Contains(names, name)
	})
}

// A TMPDIR set under /tmp (some CI runners set one per job) is made again,
// empty, in the private /tmp, where go test makes its work directory; the
// host's stays as it was.
func TestPrivateTmpMakesTheTemporaryDirectorySetUnderIt(t *testing.T) {
	script := privateTmpScript(t)
	tmpdir := filepath.Join("/tmp", "carousel-private-tmp-test-"+strconv.Itoa(os.Getpid())+"-tmpdir")
	t.Cleanup(func() { _ = os.RemoveAll(tmpdir) })
	cmd := exec.Command(script, "/bin/sh", "-c", `test -d "$TMPDIR" && touch "$TMPDIR/made" && echo made`)
	cmd.Env = append(withoutEnv(os.Environ(), "CAROUSEL_PRIVATE_TMP", "PRIVATE_TMP", "TMPDIR"), "TMPDIR="+tmpdir)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if out, err := cmd.CombinedOutput(); err != nil || strings.TrimSpace(string(out)) != "made" {
		t.Fatalf("the command with TMPDIR=%s: %q, %v; want its temporary directory there", tmpdir, out, err)
	}
	if _, err := os.Stat(tmpdir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("%s on the host after the command: %v, want none", tmpdir, err)
	}
}

// privateTmpScript is the absolute path of hack/private-tmp.sh; the test is
// skipped where it cannot make a mount namespace.
func privateTmpScript(t *testing.T) string {
	t.Helper()
	if _, err := exec.LookPath("unshare"); err != nil || os.Geteuid() != 0 {
		t.Skip("needs root and unshare")
	}
	script, err := filepath.Abs("../../hack/private-tmp.sh")
	if err != nil {
		t.Fatal(err)
	}
	return script
}

// The caches kubectl and envtest keep under $HOME (its discovery and HTTP
// caches, its port reservations) go into the private /tmp; Go's build cache
// stays the host's, where go env found it.
func TestPrivateTmpKeepsTheToolsCachesOutOfHome(t *testing.T) {
	script := privateTmpScript(t)
	gocache, err := exec.Command("go", "env", "GOCACHE").Output()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(script, "/bin/sh", "-c", `echo "$KUBECACHEDIR"; echo "$XDG_CACHE_HOME"; go env GOCACHE`)
	cmd.Env = withoutEnv(os.Environ(), "CAROUSEL_PRIVATE_TMP", "PRIVATE_TMP", "KUBECACHEDIR", "XDG_CACHE_HOME", "GOCACHE")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "/tmp/") || !strings.HasPrefix(lines[1], "/tmp/") || lines[2] != strings.TrimSpace(string(gocache)) {
		t.Errorf("KUBECACHEDIR, XDG_CACHE_HOME, GOCACHE in the private /tmp: %q; want the first two under /tmp, and GOCACHE %s", lines, strings.TrimSpace(string(gocache)))
	}
}

// A TMPDIR set outside /tmp (on the host's disk, where a killed run would
// leave go test's binaries and envtest's etcd data) becomes the private /tmp.
func TestPrivateTmpReplacesATemporaryDirectoryOutsideIt(t *testing.T) {
	script := privateTmpScript(t)
	cmd := exec.Command(script, "/bin/sh", "-c", `echo "$TMPDIR"`)
	cmd.Env = append(withoutEnv(os.Environ(), "CAROUSEL_PRIVATE_TMP", "PRIVATE_TMP", "TMPDIR"), "TMPDIR=/var/tmp/carousel-private-tmp-test-"+strconv.Itoa(os.Getpid()))
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if out, err := cmd.Output(); err != nil || strings.TrimSpace(string(out)) != "/tmp" {
		t.Fatalf("TMPDIR in the private /tmp: %q, %v; want /tmp", out, err)
	}
}
