package plugin

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"k8s.io/client-go/rest"
)

// Once the command's context ended (a Ctrl-C), its requests end too, but
// the ones that undo what it began (cleanupContext) still reach the API
// server: the bootstrap token of an upload whose key was never shown is
// deleted, and the copy with it.
func TestACleanupOutlivesTheCommandsContext(t *testing.T) {
	deleted := 0
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodDelete {
			deleted++
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"kind":"Status","apiVersion":"v1","status":"Success"}`))
	}))
	defer api.Close()
	cfg := &rest.Config{Host: api.URL}
	ctx, ctrlC := context.WithCancel(context.Background())
	cancelledWith(ctx, cfg)
	httpClient, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	send := func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodDelete, api.URL+"/api/v1/namespaces/kube-system/secrets/bootstrap-token-abc123", nil)
		if err != nil {
			return err
		}
		resp, err := httpClient.Do(req)
		if err != nil {
			return err
		}
		return resp.Body.Close()
	}
	ctrlC()
	if err := send(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("a request on the ended command's context: %v, want it cancelled", err)
	}
	cleanup, cancel := cleanupContext(ctx)
	defer cancel()
	if err := send(cleanup); err != nil || deleted != 1 {
		t.Errorf("the cleanup's request: %v, %d deletions reached the API server; want it sent", err, deleted)
	}
}
