package nodeagent

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"
)

// DefaultKubeletRestartCommand restarts a kubelet run by systemd.
var DefaultKubeletRestartCommand = []string{"systemctl", "restart", "kubelet.service"}

// DefaultKubeletRestartTimeout is the default Kubelet.RestartTimeout.
const DefaultKubeletRestartTimeout = 5 * time.Minute

// Kubelet is the node's real kubelet, whose credentials the agent rotates in
// place (ModeKubelet).
type Kubelet struct {
	Config *KubeletConfig
	// Restart restarts the kubelet (RestartCommand; tests inject a fake).
	Restart func(context.Context) error
	// Healthy asks whether the kubelet is up (HealthzProbe).
	Healthy func(context.Context) error
	// Serves returns the certificate the kubelet serves on its HTTPS port
	// (ServingProbe).
	Serves func(context.Context) (*x509.Certificate, error)
	// RestartTimeout bounds the wait for the kubelet after a restart (0
	// means DefaultKubeletRestartTimeout).
	RestartTimeout time.Duration
}

// restartTimeout is RestartTimeout, or its default.
func (k *Kubelet) restartTimeout() time.Duration {
	if k.RestartTimeout == 0 {
		return DefaultKubeletRestartTimeout
	}
	return k.RestartTimeout
}

// restart restarts the kubelet, giving the command at most RestartTimeout:
// one that never returns (a service manager stuck) would hold every renewal
// of the node behind it.
func (k *Kubelet) restart(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, k.restartTimeout())
	defer cancel()
	return k.Restart(ctx)
}

// restartOutputWait is how long the output of a restart command that failed
// is waited for once it exited, for the error: a process it started in the
// background (the kubelet, by an init script) may hold its output open for
// as long as it runs.
const restartOutputWait = 10 * time.Second

// restartOutputMax bounds the output kept for an error message.
const restartOutputMax = 4 << 10

// RestartCommand runs argv (no shell) to restart the kubelet.
func RestartCommand(argv []string) func(context.Context) error {
	return restartCommand(argv, restartOutputWait)
}

func restartCommand(argv []string, outputWait time.Duration) func(context.Context) error {
	return func(ctx context.Context) error {
		if len(argv) == 0 {
			return errors.New("no kubelet restart command")
		}
		out, err := runDraining(ctx, exec.CommandContext(ctx, argv[0], argv[1:]...), outputWait)
		if err != nil {
			return fmt.Errorf("%s: %w: %s", strings.Join(argv, " "), err, strings.TrimSpace(out))
		}
		return nil
	}
}

// runDraining runs cmd with its output into a pipe and returns once it
// exited: how it exited and, when it failed, the first restartOutputMax
// bytes of its output, waited for at most outputWait (or until ctx ends).
// The pipe is read for as long as a process holds it open, after the return
// too: closed, it would kill a process the command started in the background
// with SIGPIPE at its next log line, the kubelet among them. (That process
// dies so when the agent exits: a restart command must not leave the
// kubelet writing to its output; systemctl does not.)
func runDraining(ctx context.Context, cmd *exec.Cmd, outputWait time.Duration) (string, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return "", err
	}
	cmd.Stdout, cmd.Stderr = w, w
	err = cmd.Start()
	_ = w.Close() // the command's copy stays open in it, and in what it starts
	if err != nil {
		_ = r.Close()
		return "", err
	}
	var mu sync.Mutex
	var out []byte
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		defer func() { _ = r.Close() }()
		buf := make([]byte, 4<<10)
		for {
			n, err := r.Read(buf)
			mu.Lock()
			out = append(out, buf[:min(n, restartOutputMax-len(out))]...)
			mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	if err = cmd.Wait(); err == nil {
		return "", nil
	}
	select {
	case <-ended:
	case <-ctx.Done():
	case <-time.After(outputWait):
	}
	mu.Lock()
	defer mu.Unlock()
	return string(out), err
}

// HealthzProbe asks url (the kubelet's /healthz) and wants 200.
func HealthzProbe(url string) func(context.Context) error {
	client := &http.Client{Timeout: 5 * time.Second}
	return func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		defer func() { _ = resp.Body.Close() }()
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%s: %s: %s", url, resp.Status, strings.TrimSpace(string(body)))
		}
		return nil
	}
}

// ServingProbe returns the certificate served at address (the kubelet's
// HTTPS port). It only reads the certificate: the caller compares it with
// the one it stored.
func ServingProbe(address string) func(context.Context) (*x509.Certificate, error) {
	return func(ctx context.Context) (*x509.Certificate, error) {
		conn, err := (&tls.Dialer{NetDialer: &net.Dialer{Timeout: 5 * time.Second},
			Config: &tls.Config{InsecureSkipVerify: true}}).DialContext(ctx, "tcp", address) //nolint:gosec // reads the served certificate, verified by comparison
		if err != nil {
			return nil, err
		}
		defer func() { _ = conn.Close() }()
		return conn.(*tls.Conn).ConnectionState().PeerCertificates[0], nil
	}
}
