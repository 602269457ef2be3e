package nodeagent

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestRestartReasons is the restart decision: the kubelet is restarted when
// and only when something changed that it loads only at start.
func TestRestartReasons(t *testing.T) {
	const (
		kubeconfigCA = "the kubelet loads its kubeconfig's trust bundle only at start"
		clientPair   = "the kubelet reads its client certificate only at start"
		serving      = "the kubelet reads its serving certificate only at start"
	)
	for _, tt := range []struct {
		name    string
		changes Changes
		want    []string
	}{
		{"nothing changed", Changes{}, nil},
		{"clientCAFile: reloaded by the kubelet", Changes{ClientCAFile: true}, nil},
		{"bootstrap kubeconfig: read only to bootstrap", Changes{BootstrapKubeconfigCA: true}, nil},
		{"both of those", Changes{ClientCAFile: true, BootstrapKubeconfigCA: true}, nil},
		{"kubeconfig CA", Changes{KubeconfigCA: true}, []string{kubeconfigCA}},
		{"client pair", Changes{ClientPair: true}, []string{clientPair}},
		{"serving pair removed", Changes{ServingPair: true}, []string{serving}},
		{"preparing: bundles and client pair", Changes{KubeconfigCA: true, BootstrapKubeconfigCA: true, ClientCAFile: true, ClientPair: true},
			[]string{kubeconfigCA, clientPair}},
		{"finalizing: everything", Changes{KubeconfigCA: true, BootstrapKubeconfigCA: true, ClientCAFile: true, ClientPair: true, ServingPair: true},
			[]string{kubeconfigCA, clientPair, serving}},
		{"clientCAFile and the serving pair", Changes{ClientCAFile: true, ServingPair: true}, []string{serving}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := RestartReasons(tt.changes); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("RestartReasons(%+v) = %q, want %q", tt.changes, got, tt.want)
			}
		})
	}
}

// A restart command that leaves a process behind holding its output (an init
// script starting the kubelet in the background) returns once it exits, not
// when that process does, which may be never: every renewal of the node
// would wait behind it. That process goes on writing its output after the
// return, and is not killed by a pipe closed under it (SIGPIPE).
func TestARestartCommandReturnsThoughWhatItStartedHoldsItsOutput(t *testing.T) {
	dir := t.TempDir()
	fifo, wrote := filepath.Join(dir, "hold"), filepath.Join(dir, "wrote")
	for _, f := range []string{fifo, wrote} {
		if err := syscall.Mkfifo(f, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// In the background: wait for the fifo to get a writer, then log a line
	// and say so.
	restart := restartCommand([]string{"sh", "-c", `(cat "$0"; echo a log line; echo wrote > "$1") & echo restarted; exit 0`, fifo, wrote}, 100*time.Millisecond)
	returned := make(chan error, 1)
	go func() { returned <- restart(t.Context()) }()
	var err error
	select {
	case err = <-returned:
	case <-time.After(time.Minute):
		t.Error("the restart command did not return while what it started ran")
	}
	release, openErr := os.OpenFile(fifo, os.O_WRONLY, 0) // cat reads EOF and exits
	if openErr != nil {
		t.Fatal(openErr)
	}
	_ = release.Close()
	if err != nil {
		t.Errorf("a restart command that exited 0: %v", err)
	}
	said := make(chan []byte, 1)
	go func() {
		data, _ := os.ReadFile(wrote) // once it wrote, or the test gave up
		said <- data
	}()
	select {
	case data := <-said:
		if string(data) != "wrote\n" {
			t.Errorf("what the restart command started said %q after its log line", data)
		}
	case <-time.After(time.Minute):
		t.Error("what the restart command started died writing its output after the return")
		if f, err := os.OpenFile(wrote, os.O_WRONLY, 0); err == nil { // ends the read
			_ = f.Close()
		}
	}
}

// A restart command that fails says why, with its output.
func TestARestartCommandThatFailsSaysWhy(t *testing.T) {
	err := restartCommand([]string{"sh", "-c", "echo unit kubelet.service not found >&2; exit 5"}, time.Minute)(t.Context())
	if err == nil || !strings.Contains(err.Error(), "exit status 5: unit kubelet.service not found") {
		t.Errorf("restart = %v, want the exit status and the output", err)
	}
}

// A restart command that does not end is ended at the kubelet's
// RestartTimeout, with an error.
func TestARestartCommandThatDoesNotEndIsBounded(t *testing.T) {
	k := &Kubelet{RestartTimeout: 100 * time.Millisecond, Restart: func(ctx context.Context) error {
		<-ctx.Done()
		return ctx.Err()
	}}
	if err := k.restart(t.Context()); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("restart = %v, want it ended at the restart timeout", err)
	}
}
