package nodeagent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
)

// RefreshCSRName is the name of the CSR `refresh-certs run --seed` creates,
// so that `refresh-certs plan` can name it before anything happens.
func RefreshCSRName(node, seed string) string { return "node-csr-refresh-" + node + "-" + seed }

// Plan prints, without side effects, the CSRs a refresh with this seed will
// create and how to approve them, and the run command, with the flags given
// (the node name, the files).
func Plan(w io.Writer, node, seed string, ttl, timeout time.Duration, given ...string) {
	name := RefreshCSRName(node, seed)
	_, _ = fmt.Fprintf(w, "refresh-certs run --seed %s will create, for node %s:\n", seed, node)
	_, _ = fmt.Fprintf(w, "  CSR %s  signer %s  client certificate valid %s\n", name, certificatesv1.KubeAPIServerClientKubeletSignerName, ttl)
	_, _ = fmt.Fprintf(w, "If the cluster does not approve it automatically, approve it with:\n  kubectl certificate approve %s\n", name)
	_, _ = fmt.Fprintf(w, "Run:\n  carousel-node-agent refresh-certs run %s--seed %s --ttl %s --timeout %s\n", flagsOf(given), seed, ttl, timeout)
}

func flagsOf(given []string) string {
	if len(given) == 0 {
		return ""
	}
	return strings.Join(given, " ") + " "
}

// Refresh requests a new client certificate now, with the current
// credentials, as the CSR RefreshCSRName(node, seed), and waits at most
// timeout for it. A denied, failed or unanswered CSR is an error that says so.
func (m *Manager) Refresh(ctx context.Context, seed string, ttl, timeout time.Duration) error {
	// Before anything is read: use writes the kubeconfig (in ModeStandIn),
	// which a renewal of another process may be writing.
	unlock, err := m.lockRenewals()
	if err != nil {
		return err
	}
	defer unlock()
	// In ModeKubelet, the pair must be the kubelet's, for its node name:
	// a refresh for another would have the kubelet authenticate as it.
	if err := m.Reload(); err != nil {
		return err
	}
	kp, err := m.store.Current()
	if err != nil {
		return err
	}
	if kp == nil {
		return errors.New("no client certificate yet: run the agent first so that it bootstraps")
	}
	server, ca, err := m.serverAndCA()
	if err != nil {
		return err
	}
	if err := m.use(kp, server, ca); err != nil {
		return err
	}
	name := RefreshCSRName(m.cfg.NodeName, seed)
	ctx, cancel := withClockTimeout(ctx, m.cfg.Clock, timeout)
	defer cancel()
	err = m.renewWith(ctx, m.Client(), server, ca, name, ttl, timeout)
	switch {
	case err != nil && errors.Is(context.Cause(ctx), context.DeadlineExceeded):
		return fmt.Errorf("timed out after %s waiting for CSR %s to be approved and signed; approve it with: kubectl certificate approve %s", timeout, name, name)
	case refusedRequest(err):
		return fmt.Errorf("refresh failed: %w; a refused CSR is final: take a new seed from 'refresh-certs plan'", err)
	}
	return err
}
