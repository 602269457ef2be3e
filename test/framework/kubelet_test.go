package framework

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestTheRestartScript runs the node agent's restart command against
// stand-ins of the kubelet (sleep, under the kubelet's name): it stops the
// kubelet and returns once the supervisor started another; with no
// supervisor left it gives up within its limit; and it never signals a
// process that is not a kubelet, as one that took a freed PID.
func TestTheRestartScript(t *testing.T) {
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Skip("no sleep")
	}
	for _, tt := range []struct {
		name       string
		kubelet    bool // the PID is a kubelet's
		supervisor bool
		wantErr    string
	}{
		{name: "the supervisor starts another kubelet", kubelet: true, supervisor: true},
		{name: "no supervisor", kubelet: true, wantErr: "the kubelet did not restart within 1s"},
		{name: "the PID is no kubelet's", wantErr: "the kubelet did not restart within 1s"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			n := &KubeletNode{Name: "w1", Dir: dir}
			binary := sleep
			if tt.kubelet {
				binary = filepath.Join(dir, "kubelet")
				if err := os.Symlink(sleep, binary); err != nil {
					t.Fatal(err)
				}
			}
			start := func() *exec.Cmd {
				t.Helper()
				cmd := exec.Command(binary, "60")
				cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
				if err := cmd.Start(); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
				if err := os.WriteFile(n.PIDFile(), []byte(strconv.Itoa(cmd.Process.Pid)), 0o600); err != nil {
					t.Fatal(err)
				}
				return cmd
			}
			first := start()
			exited := make(chan error, 1)
			go func() { exited <- first.Wait() }()
			if tt.supervisor {
				go func() {
					<-exited
					start()
				}()
			}
			script := filepath.Join(dir, "restart-kubelet")
			if err := os.WriteFile(script, []byte(n.restartScript(time.Second)), 0o700); err != nil { //nolint:gosec // a script, executable
				t.Fatal(err)
			}
			out, err := exec.Command(script).CombinedOutput() //nolint:gosec // the script under test
			if tt.wantErr == "" && err != nil || tt.wantErr != "" && (err == nil || !strings.Contains(string(out), tt.wantErr)) {
				t.Fatalf("the restart command: %v, %s; want %q", err, out, tt.wantErr)
			}
			if !tt.kubelet {
				if err := first.Process.Signal(syscall.Signal(0)); errors.Is(err, os.ErrProcessDone) {
					t.Error("a process that is not a kubelet was signalled")
				}
			}
		})
	}
}
