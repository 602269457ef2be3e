package framework

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// childEnv makes the test binary act as a server child: it listens on
// 127.0.0.1 at the port in its first argument and says so, or exits with the
// error, as the environment's servers do.
const childEnv = "CAROUSEL_FRAMEWORK_TEST_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		os.Exit(serve(os.Args[1]))
	}
	if os.Getenv(hostStateChildEnv) != "" {
		os.Exit(printNetworkNamespaces())
	}
	os.Exit(m.Run())
}

// serve is the server child: it listens on port until it is killed.
func serve(port string) int {
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", port))
	if err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		return 1
	}
	fmt.Println("listening on", l.Addr())
	for {
		conn, err := l.Accept()
		if err != nil {
			return 0
		}
		_ = conn.Close()
	}
}

// safetyNet bounds a test that would otherwise hang; it is shorter than the
// one-minute waits of the code under test, so that reaching it fails the test.
func safetyNet(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// logSays returns a condition that holds once the file at path contains s.
func logSays(path, s string) func(context.Context) (bool, error) {
	return func(context.Context) (bool, error) {
		out, err := os.ReadFile(path)
		return err == nil && strings.Contains(string(out), s), nil
	}
}

func TestStartChildStartsAgainOnNewPortsWhenItsPortIsTaken(t *testing.T) {
	t.Setenv(childEnv, "serve")
	log := filepath.Join(t.TempDir(), "server.log")
	var tried []int
	p, err := startChild(safetyNet(t), child{
		name: "server", binary: os.Args[0], logPath: log, ports: 1, timeout: time.Minute,
		args: func(_ context.Context, ports []int) ([]string, error) {
			tried = append(tried, ports[0])
			if len(tried) == 1 {
				// Another program takes the port between its pick and the child's start.
				l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0])))
				if err != nil {
					return nil, err
				}
				t.Cleanup(func() { _ = l.Close() })
			}
			return []string{strconv.Itoa(ports[0])}, nil
		},
		ready: logSays(log, "listening on"),
	})
	if err != nil {
		t.Fatalf("startChild: %v", err)
	}
	defer stop(p)
	if len(tried) != 2 || tried[0] == tried[1] {
		t.Fatalf("ports tried: %v, want the taken one and then another", tried)
	}
	if p.exited() {
		t.Fatal("the child exited")
	}
	out, _ := os.ReadFile(log)
	if want := "listening on 127.0.0.1:" + strconv.Itoa(tried[1]); !strings.Contains(string(out), want) {
		t.Fatalf("log %q does not say %q", out, want)
	}
}

func TestStartChildFailsAtOnceWithTheLogTailWhenTheChildExits(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh")
	}
	ctx := safetyNet(t)
	_, err = startChild(ctx, child{
		name: "crasher", binary: sh, logPath: filepath.Join(t.TempDir(), "crasher.log"), timeout: time.Minute,
		args:  fixedArgs("-c", `i=1; while [ $i -le 30 ]; do echo "line $i"; i=$((i+1)); done; echo "fatal: no certificate" >&2; exit 3`),
		ready: func(context.Context) (bool, error) { return false, nil },
	})
	assertExited(t, ctx, err, "crasher", "line 12", "fatal: no certificate")
}

func TestControlPlaneStartFailsAtOnceWhenEtcdExits(t *testing.T) {
	bin := t.TempDir()
	etcd := "#!/bin/sh\ni=1; while [ $i -le 30 ]; do echo \"etcd line $i\"; i=$((i+1)); done\necho 'open etcd-server.crt: no such file or directory' >&2\nexit 1\n"
	if err := os.WriteFile(filepath.Join(bin, "etcd"), []byte(etcd), 0o700); err != nil {
		t.Fatal(err)
	}
	ctx := safetyNet(t)
	cp := &ManagedControlPlane{BinDir: bin, Dir: t.TempDir()}
	// The member's files, as the platform writes them (WriteCredentials):
	// it starts, and exits on its own.
	for _, f := range []string{"etcd-server.crt", "etcd-server.key", "etcd-peer.crt", "etcd-peer.key", "etcd-ca.crt"} {
		if err := os.WriteFile(filepath.Join(cp.Dir, f), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	defer cp.Stop()
	err := cp.Start(ctx)
	assertExited(t, ctx, err, "etcd", "etcd line 12", "open etcd-server.crt: no such file or directory")
}

// assertExited asserts that err reports, before the safety net, that the
// named process exited, with its last 20 log lines, from first to last.
func assertExited(t *testing.T, ctx context.Context, err error, name, first, last string) {
	t.Helper()
	if ctx.Err() != nil {
		t.Fatalf("reached the safety net: %v", err)
	}
	var exit *ExitError
	if !errors.As(err, &exit) {
		t.Fatalf("error %v is not an *ExitError", err)
	}
	if exit.Name != name || len(exit.Tail) != 20 || exit.Tail[0] != first || exit.Tail[19] != last {
		t.Fatalf("ExitError of %q with tail %q, want %s's last 20 lines, %q to %q", exit.Name, exit.Tail, name, first, last)
	}
	if msg := err.Error(); !strings.Contains(msg, name+" exited early") || !strings.Contains(msg, last) {
		t.Fatalf("error %q does not name %s and show its log", msg, name)
	}
}

func TestHeldPortKeepsOtherProgramsOffButLetsChildrenBindIt(t *testing.T) {
	var ports portSet
	defer ports.release()
	port, err := ports.hold(0)
	if err != nil {
		t.Fatal(err)
	}
	address := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	if l, err := net.Listen("tcp", address); err == nil {
		_ = l.Close()
		t.Fatal("another program could listen on the held port")
	}
	// A child binds it with SO_REUSEPORT, as etcd --socket-reuse-port and
	// kube-apiserver --permit-port-sharing do, and binds it again after a restart.
	for range 2 {
		l, err := reusePortListen(address)
		if err != nil {
			t.Fatalf("a child could not listen on the held port: %v", err)
		}
		conn, err := net.Dial("tcp", address)
		if err != nil {
			t.Fatalf("dialing the child: %v", err)
		}
		_ = conn.Close()
		_ = l.Close()
	}
}

// reusePortListen listens on address with SO_REUSEPORT.
func reusePortListen(address string) (net.Listener, error) {
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		var err error
		if cerr := c.Control(func(fd uintptr) { err = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, soReusePort, 1) }); cerr != nil {
			return cerr
		}
		return err
	}}
	return lc.Listen(context.Background(), "tcp", address)
}
