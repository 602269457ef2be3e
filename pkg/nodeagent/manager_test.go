package nodeagent

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/carousel-dev/carousel/pkg/pki"
)

func TestRotationDeadline(t *testing.T) {
	notBefore := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	notAfter := notBefore.Add(100 * time.Hour)
	for _, tt := range []struct {
		jitter float64
		want   time.Duration
	}{{0, 70 * time.Hour}, {0.5, 80 * time.Hour}, {0.999999, 90 * time.Hour}} {
		got := RotationDeadline(notBefore, notAfter, tt.jitter).Sub(notBefore)
		if got < tt.want-time.Second || got > tt.want {
			t.Errorf("jitter %v: rotation after %s, want %s", tt.jitter, got, tt.want)
		}
	}
}

func TestCSRNameFollowsTheKey(t *testing.T) {
	a, _ := pki.GenerateKey(pki.ECDSAP256)
	b, _ := pki.GenerateKey(pki.ECDSAP256)
	na, _ := CSRName("w1", a.Public())
	again, _ := CSRName("w1", a.Public())
	nb, _ := CSRName("w1", b.Public())
	other, _ := CSRName("w2", a.Public())
	if na != again || na == nb || na == other || !strings.HasPrefix(na, "node-csr-") {
		t.Fatalf("names %q %q %q %q", na, again, nb, other)
	}
}

// TestStartGivesUpAfterTheStartupTimeout runs against an API server that is
// not there, on a fake clock: Start keeps retrying with backoff and returns an
// error once five (fake) minutes have passed, not before.
func TestStartGivesUpAfterTheStartupTimeout(t *testing.T) {
	dir := t.TempDir()
	bootstrap := filepath.Join(dir, "bootstrap-kubeconfig")
	if err := os.WriteFile(bootstrap, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1", insecure-skip-tls-verify: true}}]
users: [{name: u, user: {token: abcdef.0123456789abcdef}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
`), 0o600); err != nil {
		t.Fatal(err)
	}
	clk := clocktesting.NewFakeClock(time.Now())
	m := NewManager(Config{NodeName: "w1", CertDir: filepath.Join(dir, "pki"), KubeconfigPath: filepath.Join(dir, "kubeconfig"),
		BootstrapKubeconfigPath: bootstrap, Clock: clk, StartupTimeout: 5 * time.Minute})
	done := make(chan error, 1)
	go func() { done <- m.Start(context.Background()) }()

	elapsed := time.Duration(0)
	for elapsed < 10*time.Minute {
		select {
		case err := <-done:
			if elapsed < 5*time.Minute {
				t.Fatalf("gave up after %s of fake time", elapsed)
			}
			if err == nil || !strings.Contains(err.Error(), "no client certificate within 5m0s") {
				t.Fatalf("Start = %v", err)
			}
			return
		case <-time.After(20 * time.Millisecond):
		}
		if clk.HasWaiters() {
			clk.Step(10 * time.Second)
			elapsed += 10 * time.Second
		}
	}
	t.Fatal("Start did not give up within ten fake minutes")
}
