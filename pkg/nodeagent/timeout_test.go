package nodeagent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/carousel-dev/carousel/pkg/pki"
)

// TestARequestWithoutAnAnswerEndsAfterRequestTimeout: an API server, or
// something on the way, that takes the agent's request and never answers
// holds it up for the manager's requestTimeout, not for good.
func TestARequestWithoutAnAnswerEndsAfterRequestTimeout(t *testing.T) {
	key, err := pki.GenerateKey(pki.ECDSAP256)
	if err != nil {
		t.Fatal(err)
	}
	csr, err := ClientCSR("node-csr-w1", "w1", key, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		call func(context.Context, *Manager) error
	}{
		{"the credentials' refusal", func(ctx context.Context, m *Manager) error {
			if r := m.refusal(ctx); r != notRefused {
				return fmt.Errorf("refusal = %v, want none: no answer says nothing of the credentials", r)
			}
			return nil
		}},
		{"a CSR's creation", func(ctx context.Context, m *Manager) error {
			if _, err := m.awaitCertificate(ctx, m.Client(), csr, key, time.Hour); err == nil {
				return errors.New("a CSR that was never created gave no error")
			}
			return nil
		}},
		{"the check of the bootstrap kubeconfig", func(ctx context.Context, m *Manager) error {
			if err := m.checkBootstrapKubeconfig(ctx); err == nil || errors.Is(err, errBootstrapKubeconfigUnusable) {
				return fmt.Errorf("checkBootstrapKubeconfig = %w, want an error that says nothing of the kubeconfig", err)
			}
			return nil
		}},
		{"the registration of the Node (stand-in)", func(ctx context.Context, m *Manager) error {
			if err := (&Node{Manager: m}).register(ctx); err == nil {
				return errors.New("a registration that was never answered gave no error")
			}
			return nil
		}},
		{"a heartbeat (stand-in)", func(ctx context.Context, m *Manager) error {
			if err := (&Node{Manager: m, HeartbeatInterval: time.Second}).Heartbeat(ctx); err == nil {
				return errors.New("a heartbeat that was never answered gave no error")
			}
			return nil
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			arrived, stop := make(chan struct{}, 1), make(chan struct{})
			srv := httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
				// Read to its end, the request's context ends when the client goes.
				_, _ = io.Copy(io.Discard, r.Body)
				arrived <- struct{}{}
				select {
				case <-r.Context().Done():
				case <-stop:
				}
			}))
			t.Cleanup(srv.Close)
			t.Cleanup(func() { close(stop) }) // first: a call that still waits fails the test, not hangs it
			cs, err := kubernetes.NewForConfig(&rest.Config{Host: srv.URL})
			if err != nil {
				t.Fatal(err)
			}
			bootstrapKubeconfig := filepath.Join(t.TempDir(), "bootstrap-kubeconfig")
			kubeconfig := fmt.Sprintf("apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: %q}}]\n"+
				"users: [{name: u, user: {token: abcdef.0123456789abcdef}}]\ncontexts: [{name: x, context: {cluster: c, user: u}}]\ncurrent-context: x\n", srv.URL)
			if err := os.WriteFile(bootstrapKubeconfig, []byte(kubeconfig), 0o600); err != nil {
				t.Fatal(err)
			}
			m := &Manager{cfg: Config{Clock: clocktesting.NewFakeClock(time.Now()), NodeName: "w1", BootstrapKubeconfigPath: bootstrapKubeconfig},
				client: cs, newClient: newClientset, requestTimeout: 100 * time.Millisecond}
			done := make(chan error, 1)
			go func() { done <- tc.call(context.Background(), m) }()
			select {
			case <-arrived:
			case <-time.After(time.Minute):
				t.Fatal("the request never reached the server")
			}
			select {
			case err := <-done:
				if err != nil {
					t.Error(err)
				}
			case <-time.After(time.Minute):
				t.Fatalf("the call still waits a minute after its request was sent, with a request timeout of %s", m.requestTimeout)
			}
		})
	}
}
