package nodeagent

import (
	"bytes"
	"crypto"
	"crypto/x509"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/carousel-dev/carousel/pkg/pki"
)

var testCA = func() *pki.KeyPair {
	key, _ := pki.GenerateKey(pki.ECDSAP256)
	ca, err := pki.NewCA(pki.CATemplate{CommonName: "client-ca", Validity: 24 * time.Hour}, key, time.Now())
	if err != nil {
		panic(err)
	}
	return ca
}()

// issue plays the signer for a pending key.
func issue(t *testing.T, key crypto.Signer) []byte {
	t.Helper()
	cert, err := testCA.Issue(pki.LeafTemplate{CommonName: "system:node:w1", Organization: []string{"system:nodes"},
		Usages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, Validity: time.Hour}, key.Public(), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return pki.EncodeCertificates(cert)
}

func samePublicKey(a, b crypto.PublicKey) bool {
	eq, ok := a.(interface{ Equal(crypto.PublicKey) bool })
	return ok && eq.Equal(b)
}

// TestStoreSurvivesAKillBetweenAnyTwoSteps stops a renewal after each step
// of Update, as a killed process would, then lets a fresh process (a new
// Store on the same directory) do what the agent does on start: use the
// current pair if any, ask again for the pending key's certificate.
func TestStoreSurvivesAKillBetweenAnyTwoSteps(t *testing.T) {
	for _, step := range []string{"key", "pair", "link", "swap"} {
		t.Run("killed after "+step, func(t *testing.T) {
			dir := t.TempDir()
			first := &Store{Dir: dir}
			oldKey, err := first.PendingKey(pki.ECDSAP256)
			if err != nil {
				t.Fatal(err)
			}
			old, err := first.Update(issue(t, oldKey), oldKey, time.Now().Add(-time.Hour))
			if err != nil {
				t.Fatal(err)
			}

			killed := &Store{Dir: dir, stopAfter: step}
			key, err := killed.PendingKey(pki.ECDSAP256)
			if err != nil {
				t.Fatal(err)
			}
			if step != "key" {
				if _, err := killed.Update(issue(t, key), key, time.Now()); !errors.Is(err, errStopped) {
					t.Fatalf("Update = %v, want it stopped", err)
				}
			}

			restarted := &Store{Dir: dir}
			current, err := restarted.Current()
			if err != nil || current == nil {
				t.Fatalf("no readable current pair after a kill after %s: %v", step, err)
			}
			if current.Cert.Equal(old.Cert) {
				again, err := restarted.PendingKey(pki.ECDSAP256)
				if err != nil {
					t.Fatal(err)
				}
				if !samePublicKey(again.Public(), key.Public()) {
					t.Fatal("the restarted process asks for another key: its CSR would not be the one it was waiting on")
				}
				if _, err := restarted.Update(issue(t, again), again, time.Now()); err != nil {
					t.Fatal(err)
				}
			}
			current, _ = restarted.Current()
			if !samePublicKey(current.Key.Public(), key.Public()) || !samePublicKey(current.Cert.PublicKey, key.Public()) {
				t.Fatal("the current pair is not the renewed key with its certificate")
			}
			next, err := restarted.PendingKey(pki.ECDSAP256)
			if err != nil {
				t.Fatal(err)
			}
			if samePublicKey(next.Public(), key.Public()) {
				t.Fatal("the next renewal would reuse the key that already has a certificate")
			}
			if _, err := os.Stat(filepath.Join(dir, "."+currentFile+".tmp")); err == nil && step != "link" {
				t.Fatal("a temporary symlink was left behind")
			}
		})
	}
}

func TestCurrentWithoutPair(t *testing.T) {
	kp, err := (&Store{Dir: t.TempDir()}).Current()
	if err != nil || kp != nil {
		t.Fatalf("Current() = %v, %v; want nothing", kp, err)
	}
}

func TestUpdateRefusesACertificateForAnotherKey(t *testing.T) {
	s := &Store{Dir: t.TempDir()}
	key, _ := s.PendingKey(pki.ECDSAP256)
	other, _ := pki.GenerateKey(pki.ECDSAP256)
	if _, err := s.Update(issue(t, other), key, time.Now()); err == nil {
		t.Fatal("stored a certificate that is not for the pending key")
	}
}

// A current pair that is a file of its own, not a link (a provisioner wrote
// it), is kept under a stored pair's name when a new pair replaces it.
func TestUpdateKeepsACurrentPairThatIsAFile(t *testing.T) {
	dir := t.TempDir()
	s := &Store{Dir: dir}
	old, err := pki.GenerateKey(pki.ECDSAP256)
	if err != nil {
		t.Fatal(err)
	}
	oldKeyPEM, err := pki.EncodePrivateKey(old)
	if err != nil {
		t.Fatal(err)
	}
	oldPair := append(issue(t, old), oldKeyPEM...)
	if err := os.WriteFile(s.CurrentPath(), oldPair, 0o600); err != nil {
		t.Fatal(err)
	}
	key, err := s.PendingKey(pki.ECDSAP256)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Update(issue(t, key), key, time.Now()); err != nil {
		t.Fatal(err)
	}
	if kp, err := s.Current(); err != nil || !samePublicKey(kp.Key.Public(), key.Public()) {
		t.Fatalf("current = %v, %v; want the new pair", kp, err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var kept bool
	for _, e := range entries {
		if data, err := os.ReadFile(filepath.Join(dir, e.Name())); err == nil && e.Type().IsRegular() && bytes.Equal(data, oldPair) {
			kept = true
		}
	}
	if !kept {
		t.Errorf("the pair that was the current file is gone: %d entries in the store", len(entries))
	}
}

// TestUpdateKeepsPairsStoredInTheSameSecond stores three pairs within one
// second of the clock: each gets its own file (the first named as the kubelet
// names it), none overwrites another, and the symlink points at the newest.
func TestUpdateKeepsPairsStoredInTheSameSecond(t *testing.T) {
	dir := t.TempDir()
	s := &Store{Dir: dir}
	second := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	var keys []crypto.Signer
	for _, at := range []time.Duration{100 * time.Millisecond, 500 * time.Millisecond, 900 * time.Millisecond} {
		key, err := s.PendingKey(pki.ECDSAP256)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Update(issue(t, key), key, second.Add(at)); err != nil {
			t.Fatal(err)
		}
		keys = append(keys, key)
	}

	for i, name := range []string{"kubelet-client-2026-03-01-12-00-00.pem", "kubelet-client-2026-03-01-12-00-00-1.pem", "kubelet-client-2026-03-01-12-00-00-2.pem"} {
		data, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatalf("pair %d: %v", i, err)
		}
		kp, err := parsePair(data)
		if err != nil || !samePublicKey(kp.Cert.PublicKey, keys[i].Public()) {
			t.Fatalf("%s does not hold pair %d (%v): it was overwritten", name, i, err)
		}
	}
	if !regexp.MustCompile(`^kubelet-client-\d{4}-\d{2}-\d{2}-\d{2}-\d{2}-\d{2}\.pem$`).MatchString(pairName(ClientStore, second, 0)) {
		t.Errorf("the first pair of a second is named %s, not as the kubelet names it", pairName(ClientStore, second, 0))
	}
	target, err := os.Readlink(s.CurrentPath())
	if err != nil || target != "kubelet-client-2026-03-01-12-00-00-2.pem" {
		t.Fatalf("%s -> %q (%v), want the newest pair", currentFile, target, err)
	}
	current, err := s.Current()
	if err != nil || !samePublicKey(current.Key.Public(), keys[2].Public()) {
		t.Fatalf("Current() is not the newest pair (%v)", err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 4 {
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		t.Errorf("files left: %v; want three pairs and the symlink", names)
	}
}
