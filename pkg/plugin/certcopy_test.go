package plugin

import (
	"bytes"
	"crypto/rand"
	"strings"
	"testing"
)

func TestSealedCertificatesOpenOnlyWithTheirKeyAndCluster(t *testing.T) {
	key := make([]byte, keyBytes)
	_, _ = rand.Read(key)
	files := map[string][]byte{"cluster-ca-tls.key": []byte("secret"), "sa.key": []byte("also secret")}
	sealed, err := sealCertificates(files, key, "team-a/prod")
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(sealed, []byte("secret")) {
		t.Fatal("the sealed copy contains the plaintext")
	}
	got, err := openCertificates(sealed, key, "team-a/prod")
	if err != nil || string(got["sa.key"]) != "also secret" || len(got) != 2 {
		t.Fatalf("open = %v, %v", got, err)
	}
	other := make([]byte, keyBytes)
	_, _ = rand.Read(other)
	for name, open := range map[string]func() error{
		"wrong key":     func() error { _, err := openCertificates(sealed, other, "team-a/prod"); return err },
		"other cluster": func() error { _, err := openCertificates(sealed, key, "team-b/prod"); return err },
		"tampered": func() error {
			bad := bytes.Clone(sealed)
			bad[len(bad)-1] ^= 1
			_, err := openCertificates(bad, key, "team-a/prod")
			return err
		},
	} {
		if err := open(); err == nil || !strings.Contains(err.Error(), "does not open this upload") {
			t.Errorf("%s: err = %v", name, err)
		}
	}
	if _, err := openCertificates(sealed, key[:16], "team-a/prod"); err == nil || !strings.Contains(err.Error(), "must be 32 bytes") {
		t.Errorf("short key: err = %v", err)
	}
}
