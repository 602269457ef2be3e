package framework

import (
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
		limit      time.Duration
		wantErr    string
	}{
		// A limit the restart cannot reach on a busy machine: the script
		// counts it in whole seconds.
		{name: "the supervisor starts another kubelet", kubelet: true, supervisor: true, limit: time.Minute},
		{name: "no supervisor", kubelet: true, limit: time.Second, wantErr: "the kubelet did not restart within 1s"},
		{name: "the PID is no kubelet's", limit: time.Second, wantErr: "the kubelet did not restart within 1s"},
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
			// start runs a stand-in and writes its PID; exited closes when
			// it exits. Each is killed at the end, by its PID.
			start := func() (exited chan struct{}, err error) {
				cmd := exec.Command(binary, "60")
				cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
				if err := cmd.Start(); err != nil {
					return nil, err
				}
				exited = make(chan struct{})
				go func() { _ = cmd.Wait(); close(exited) }()
				t.Cleanup(func() { _ = cmd.Process.Kill(); <-exited })
				return exited, os.WriteFile(n.PIDFile(), []byte(strconv.Itoa(cmd.Process.Pid)), 0o600)
			}
			first, err := start()
			if err != nil {
				t.Fatal(err)
			}
			if tt.supervisor {
				// Ended before the cleanup that kills first (cleanups run
				// last in, first out), so that it starts nothing, and
				// reports nothing, once the test is over.
				stop, supervised := make(chan struct{}), make(chan struct{})
				go func() {
					defer close(supervised)
					select {
					case <-first:
					case <-stop:
						return
					}
					if _, err := start(); err != nil {
						t.Error(err)
					}
				}()
				t.Cleanup(func() { close(stop); <-supervised })
			}
			script := filepath.Join(dir, "restart-kubelet")
			if err := os.WriteFile(script, []byte(n.restartScript(tt.limit)), 0o700); err != nil { //nolint:gosec // a script, executable
				t.Fatal(err)
			}
			out, err := exec.Command(script).CombinedOutput() //nolint:gosec // the script under test
			if tt.wantErr == "" && err != nil || tt.wantErr != "" && (err == nil || !strings.Contains(string(out), tt.wantErr)) {
				t.Fatalf("the restart command: %v, %s; want %q", err, out, tt.wantErr)
			}
			select {
			case <-first:
				if !tt.kubelet {
					t.Error("a process that is not a kubelet was signalled")
				}
			default:
				if tt.kubelet {
					t.Error("the kubelet was not stopped")
				}
			}
		})
	}
}
