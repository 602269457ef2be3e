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
	"os/exec"
	"strings"
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

// restartOutputWait is how long a restart command's output is waited for
// once the command has exited, or been killed: a process it started in the
// background (the kubelet, by an init script) may hold its output open.
const restartOutputWait = 10 * time.Second

// RestartCommand runs argv (no shell) to restart the kubelet.
func RestartCommand(argv []string) func(context.Context) error {
	return restartCommand(argv, restartOutputWait)
}

func restartCommand(argv []string, outputWait time.Duration) func(context.Context) error {
	return func(ctx context.Context) error {
		if len(argv) == 0 {
			return errors.New("no kubelet restart command")
		}
		cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
		cmd.WaitDelay = outputWait
		out, err := cmd.CombinedOutput()
		if errors.Is(err, exec.ErrWaitDelay) {
			err = nil // it exited 0: what it left running holds its output
		}
		if err != nil {
			return fmt.Errorf("%s: %w: %s", strings.Join(argv, " "), err, strings.TrimSpace(string(out)))
		}
		return nil
	}
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
