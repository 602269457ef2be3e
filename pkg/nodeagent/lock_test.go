package nodeagent

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/carousel-dev/carousel/pkg/pki"
)

// Two processes renewing in one cert dir (the agent and a refresh-certs run,
// two Managers here, each with its own lock file description) take turns:
// the second fails at once, before it reads or writes anything, generates a
// key or creates a CSR, and goes through once the first is done.
func TestRenewalsOfTwoProcessesInOneCertDirTakeTurns(t *testing.T) {
	for _, mode := range []Mode{ModeKubelet, ModeStandIn} {
		t.Run(string(mode), func(t *testing.T) { testRenewalsTakeTurns(t, mode) })
	}
}

func testRenewalsTakeTurns(t *testing.T, mode Mode) {
	dir := t.TempDir()
	certDir := filepath.Join(dir, "pki")
	store := storeWithAPair(t, certDir)
	writeTestKubeconfig(t, filepath.Join(dir, "kubeconfig"), &clientcmdapi.Cluster{Server: "https://192.0.2.10:6443", CertificateAuthorityData: testCA.CertPEM()},
		&clientcmdapi.AuthInfo{ClientCertificate: store.CurrentPath(), ClientKey: store.CurrentPath()})
	clk := clocktesting.NewFakeClock(time.Now())
	signer := newFakeSigner(func(_ int, csr *certificatesv1.CertificateSigningRequest) { approve(t, csr, time.Hour, clk.Now()) })
	newManager := func() *Manager {
		m := NewManager(Config{Mode: mode, NodeName: "w1", CertDir: certDir, KubeconfigPath: filepath.Join(dir, "kubeconfig"), Clock: clk})
		m.newClient = signer.client
		return m
	}
	agent, refresh := newManager(), newManager()

	kubeconfig, err := os.ReadFile(filepath.Join(dir, "kubeconfig"))
	if err != nil {
		t.Fatal(err)
	}
	unlock, err := agent.lockRenewals()
	if err != nil {
		t.Fatal(err)
	}
	err = refresh.Refresh(context.Background(), "seed1", time.Hour, time.Minute)
	if !errors.Is(err, ErrRenewing) {
		t.Fatalf("Refresh while the agent renews = %v, want ErrRenewing", err)
	}
	if created := signer.Created(); len(created) != 0 {
		t.Errorf("CSRs created while the agent renews: %s", csrNames(created))
	}
	if _, err := os.Stat(store.pendingKeyPath()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a pending key while the agent renews: %v", err)
	}
	if now, err := os.ReadFile(filepath.Join(dir, "kubeconfig")); err != nil || string(now) != string(kubeconfig) {
		t.Errorf("the kubeconfig was written while the agent renews (%v)", err)
	}

	unlock()
	if err := refresh.Refresh(context.Background(), "seed1", time.Hour, time.Minute); err != nil {
		t.Fatalf("Refresh once the agent is done = %v", err)
	}
	if created := signer.Created(); len(created) != 1 {
		t.Errorf("CSRs created: %s, want the refresh's", csrNames(created))
	}
}

// A renewal removes the temporary files of pairs and pending keys that a
// process killed in the middle of a write left in the cert dir (each holds a
// key), and nothing else.
func TestARenewalRemovesTheTemporaryFilesOfAKilledWrite(t *testing.T) {
	certDir := t.TempDir()
	store := storeWithAPair(t, certDir)
	var leftovers []string
	for _, prefix := range []string{".kubelet-client-pending.key", ".kubelet-server-pending.key", ".kubelet-client-2026-11-29-12-00-00.pem"} {
		tmp, err := writeTemp(certDir, prefix, []byte("a key"))
		if err != nil {
			t.Fatal(err)
		}
		leftovers = append(leftovers, tmp)
	}
	kept := []string{store.CurrentPath(), filepath.Join(certDir, ".carousel-node-agent-renewal.json.123"),
		filepath.Join(certDir, ".kubelet-client-pending.key.tmp"), filepath.Join(certDir, ".other.123"), filepath.Join(certDir, "kubelet.crt")}
	for _, path := range kept[1:] {
		mustWriteFile(t, path, "kept", 0o600)
	}

	unlock, err := NewManager(Config{CertDir: certDir}).lockRenewals()
	if err != nil {
		t.Fatal(err)
	}
	unlock()
	for _, path := range leftovers {
		if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s is still there (%v)", filepath.Base(path), err)
		}
	}
	for _, path := range kept {
		if _, err := os.Stat(path); err != nil {
			t.Errorf("%s: %v, want it kept", filepath.Base(path), err)
		}
	}
}

// storeWithAPair is the client store in certDir with a current pair.
func storeWithAPair(t *testing.T, certDir string) *Store {
	t.Helper()
	key, err := pki.GenerateKey(pki.ECDSAP256)
	if err != nil {
		t.Fatal(err)
	}
	store := &Store{Dir: certDir}
	if _, err := store.Update(issue(t, key), key, time.Now()); err != nil {
		t.Fatal(err)
	}
	return store
}
