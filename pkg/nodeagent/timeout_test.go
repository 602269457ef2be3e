package nodeagent

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/carousel-dev/carousel/pkg/pki"
)

// TestARequestWithoutAnAnswerEndsAfterRequestTimeout: an API server, or
// something on the way, that takes the agent's request and never answers
// holds it up for the manager's requestTimeout, not for good: the
// SelfSubjectReview that asks whether the credentials are refused, and the
// creation of a CSR.
func TestARequestWithoutAnAnswerEndsAfterRequestTimeout(t *testing.T) {
	arrived, stop := make(chan struct{}, 1), make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
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
	key, err := pki.GenerateKey(pki.ECDSAP256)
	if err != nil {
		t.Fatal(err)
	}
	csr, err := ClientCSR("node-csr-w1", "w1", key, time.Hour)
	if err != nil {
		t.Fatal(err)
	}

	for name, call := range map[string]func(context.Context, *testing.T, *Manager) error{
		"credentials' refusal": func(ctx context.Context, t *testing.T, m *Manager) error {
			if r := m.refusal(ctx); r != notRefused {
				t.Errorf("refusal = %v, want none: no answer says nothing of the credentials", r)
			}
			return nil
		},
		"CSR creation": func(ctx context.Context, _ *testing.T, m *Manager) error {
			_, err := m.awaitCertificate(ctx, cs, csr, key, time.Hour)
			return err
		},
	} {
		t.Run(name, func(t *testing.T) {
			m := &Manager{cfg: Config{Clock: clocktesting.NewFakeClock(time.Now())}, client: cs, requestTimeout: 100 * time.Millisecond}
			done := make(chan error, 1)
			go func() { done <- call(context.Background(), t, m) }()
			select {
			case <-arrived:
			case <-time.After(time.Minute):
				t.Fatal("the request never reached the server")
			}
			select {
			case err := <-done:
				if name == "CSR creation" && err == nil {
					t.Error("a CSR that was never created gave no error")
				}
			case <-time.After(time.Minute):
				t.Fatalf("the call still waits a minute after its request was sent, with a request timeout of %s", m.requestTimeout)
			}
		})
	}
}
