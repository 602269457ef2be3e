package nodeagent

import (
	"crypto/x509"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/carousel-dev/carousel/pkg/pki"
)

func newTestCA(t *testing.T, name string, now time.Time) *pki.KeyPair {
	t.Helper()
	key, err := pki.GenerateKey(pki.ECDSAP256)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := pki.NewCA(pki.CATemplate{CommonName: name, Validity: 24 * time.Hour}, key, now)
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

// writeServingPair writes a kubelet serving pair signed by ca as the
// kubelet does: kubelet-server-<timestamp>.pem, and the symlink
// kubelet-server-current.pem to it.
func writeServingPair(t *testing.T, certDir string, ca *pki.KeyPair, now time.Time) {
	t.Helper()
	kp, err := ca.IssueKeyPair(pki.LeafTemplate{CommonName: "system:node:w1", Organization: []string{"system:nodes"},
		IPAddresses: []net.IP{net.ParseIP("10.0.0.5")}, Usages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, Validity: time.Hour}, pki.ECDSAP256, now)
	if err != nil {
		t.Fatal(err)
	}
	keyPEM, err := kp.KeyPEM()
	if err != nil {
		t.Fatal(err)
	}
	name := "kubelet-server-" + now.UTC().Format(timeLayout) + ".pem"
	mustWriteFile(t, filepath.Join(certDir, name), string(append(kp.CertPEM(), keyPEM...)), 0o600)
	link := filepath.Join(certDir, servingCurrentFile)
	_ = os.Remove(link)
	if err := os.Symlink(name, link); err != nil {
		t.Fatal(err)
	}
}

func TestCheckServing(t *testing.T) {
	now := time.Now()
	ca0, ca1 := newTestCA(t, "kubelet-ca-0", now), newTestCA(t, "kubelet-ca-1", now)
	both := append(ca0.CertPEM(), ca1.CertPEM()...)
	for _, tt := range []struct {
		name    string
		signer  *pki.KeyPair // nil: no serving pair
		garbage bool
		bundle  []byte
		at      time.Time
		want    servingState
	}{
		{"none", nil, false, both, now, servingAbsent},
		{"from CA0, while the bundle holds both", ca0, false, both, now, servingTrusted},
		{"from CA0, once the bundle holds only CA1", ca0, false, ca1.CertPEM(), now, servingUntrusted},
		{"from CA1, once the bundle holds only CA1", ca1, false, ca1.CertPEM(), now, servingTrusted},
		{"expired", ca1, false, ca1.CertPEM(), now.Add(2 * time.Hour), servingUntrusted},
		{"not a pair", nil, true, both, now, servingUntrusted},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			if tt.signer != nil {
				writeServingPair(t, dir, tt.signer, now)
			}
			if tt.garbage {
				mustWriteFile(t, filepath.Join(dir, servingCurrentFile), "garbage", 0o600)
			}
			state, why, err := checkServing(filepath.Join(dir, servingCurrentFile), tt.bundle, tt.at)
			if err != nil {
				t.Fatal(err)
			}
			if state != tt.want || (state == servingUntrusted) != (why != nil) {
				t.Fatalf("checkServing = %s (%v), want %s", state, why, tt.want)
			}
		})
	}
	if _, _, err := checkServing(filepath.Join(t.TempDir(), servingCurrentFile), []byte("not a bundle"), now); err == nil {
		t.Error("a bundle that does not parse is no error")
	}
}
