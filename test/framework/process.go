package framework

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

const (
	// maxAttempts bounds how often startChild starts a child whose ports were taken.
	maxAttempts = 5
	// tailLines is how many of its last log lines an ExitError reports.
	tailLines = 20
	// tailBytes bounds how much of a log is read for an ExitError.
	tailBytes = 64 << 10
)

// process is a started child and a channel closed when it exits.
type process struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	// logFrom is where this run's output starts in logPath, which keeps
	// the output of earlier runs.
	logFrom int64
	done    chan struct{}
}

func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// exitError describes how the process exited; call it once it has.
func (p *process) exitError() *ExitError {
	out := readLog(p.logPath, p.logFrom)
	return &ExitError{
		Name: p.name, LogPath: p.logPath, State: p.cmd.ProcessState.String(), Tail: lastLines(out),
		addressInUse: bytes.Contains(out, []byte("address already in use")),
	}
}

// lastLines returns the last tailLines lines of out.
func lastLines(out []byte) []string {
	lines := strings.Split(strings.TrimRight(string(out), "\n"), "\n")
	return lines[max(0, len(lines)-tailLines):]
}

// readLog returns the output logged from offset on, at most its last tailBytes.
func readLog(path string, offset int64) []byte {
	f, err := os.Open(path)
	if err != nil {
		return []byte(err.Error())
	}
	defer func() { _ = f.Close() }()
	if fi, err := f.Stat(); err == nil && fi.Size()-offset > tailBytes {
		offset = fi.Size() - tailBytes
	}
	if _, err := f.Seek(offset, io.SeekStart); err != nil {
		return []byte(err.Error())
	}
	out, _ := io.ReadAll(f)
	return out
}

// ExitError reports a child process that exited while the environment was
// waiting for it or for something that needs it.
type ExitError struct {
	// Name names the process: its binary, and the node of a node agent.
	Name string
	// LogPath is where it logged, and State how it exited.
	LogPath, State string
	// Tail is the last lines it logged.
	Tail []string

	addressInUse bool
}

func (e *ExitError) Error() string {
	return fmt.Sprintf("%s exited early (%s); last lines of %s:\n    %s",
		e.Name, e.State, e.LogPath, strings.Join(e.Tail, "\n    "))
}

// startProcess starts a binary with its output appended to logPath; the
// process is killed if the test process dies.
func startProcess(name, binary, logPath string, args ...string) (*process, error) {
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	fi, err := logFile.Stat()
	if err != nil {
		_ = logFile.Close()
		return nil, err
	}
	cmd := exec.Command(binary, args...) //nolint:gosec // our own binaries and flags
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		_ = logFile.Close()
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	p := &process{name: name, cmd: cmd, logPath: logPath, logFrom: fi.Size(), done: make(chan struct{})}
	go func() { _ = cmd.Wait(); _ = logFile.Close(); close(p.done) }()
	return p, nil
}

// stop asks a process to terminate, kills it after ten seconds, and waits.
func stop(p *process) {
	if p == nil {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// await calls ready every interval until it reports true. It fails at once,
// with an *ExitError, when one of procs exits first; timeout is only a safety
// net. what says what is awaited, for the errors.
func await(ctx context.Context, what string, interval, timeout time.Duration, ready wait.ConditionWithContextFunc, procs ...*process) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	for _, p := range procs {
		go func() {
			select {
			case <-p.done:
				cancel(p.exitError())
			case <-ctx.Done():
			}
		}()
	}
	err := wait.PollUntilContextTimeout(ctx, interval, timeout, true, ready)
	if exit := (*ExitError)(nil); errors.As(context.Cause(ctx), &exit) {
		err = exit
	}
	if err != nil {
		return fmt.Errorf("waiting for %s: %w", what, err)
	}
	return nil
}

// child is a process for startChild to run.
type child struct {
	// name names the process in errors; binary and logPath are its
	// executable and the file its output is appended to.
	name, binary, logPath string
	// ports is how many fresh loopback ports each attempt gets; it needs ready.
	ports int
	// args returns the command line of an attempt on the given ports.
	args func(ctx context.Context, ports []int) ([]string, error)
	// ready reports whether the child serves; nil means started is enough.
	ready wait.ConditionWithContextFunc
	// timeout bounds the wait for ready.
	timeout time.Duration
	// watch are processes the child needs: their exit fails the wait too.
	watch []*process
}

// startChild starts c and waits until it is ready. A child that exits first
// fails the start at once with an *ExitError that carries its last log lines,
// unless another program took one of its fresh ports first ("address already
// in use"): then it is started again on new ports, up to maxAttempts times.
func startChild(ctx context.Context, c child) (*process, error) {
	for attempt := 1; ; attempt++ {
		ports, err := freePorts(c.ports)
		if err != nil {
			return nil, err
		}
		args, err := c.args(ctx, ports)
		if err != nil {
			return nil, err
		}
		p, err := startProcess(c.name, c.binary, c.logPath, args...)
		if err != nil || c.ready == nil {
			return p, err
		}
		err = await(ctx, c.name+" to be ready", 100*time.Millisecond, c.timeout, c.ready, append([]*process{p}, c.watch...)...)
		if err == nil {
			return p, nil
		}
		exited := p.exited()
		stop(p)
		if !exited || c.ports == 0 || attempt == maxAttempts || !p.exitError().addressInUse {
			return nil, err
		}
	}
}

// fixedArgs returns child.args for a child whose command line does not
// depend on fresh ports.
func fixedArgs(args ...string) func(context.Context, []int) ([]string, error) {
	return func(context.Context, []int) ([]string, error) { return args, nil }
}

// DieWithTestProcess makes the etcd and kube-apiserver env starts die with the
// test process, as every process the framework starts itself does: envtest
// starts them without Pdeathsig, so a killed or panicking test would leave
// them running. Each is started through a script in dir that execs the
// binary of binDir under `setpriv --pdeathsig KILL` (util-linux).
func DieWithTestProcess(env *envtest.Environment, binDir, dir string) error {
	if env.ControlPlane.Etcd == nil {
		env.ControlPlane.Etcd = &envtest.Etcd{}
	}
	for _, b := range []struct {
		name string
		path *string
	}{{"etcd", &env.ControlPlane.Etcd.Path}, {"kube-apiserver", &env.ControlPlane.GetAPIServer().Path}} {
		binary, err := filepath.Abs(filepath.Join(binDir, b.name))
		if err != nil {
			return err
		}
		script := filepath.Join(dir, b.name+"-dies-with-test")
		body := fmt.Sprintf("#!/bin/sh\nexec setpriv --pdeathsig KILL -- '%s' \"$@\"\n", strings.ReplaceAll(binary, "'", `'\''`))
		if err := os.WriteFile(script, []byte(body), 0o700); err != nil { //nolint:gosec // a script, executable
			return err
		}
		*b.path = script
	}
	return nil
}
