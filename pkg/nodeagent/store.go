// Package nodeagent is the node side of kubelet TLS bootstrapping (KEP-266):
// a crash-safe certificate store, a certificate manager that bootstraps with
// a bootstrap token and rotates before expiry, and the Node agent that acts
// for the kubelet (registration, heartbeat) and carries out in-place
// credential renewals during a CA rotation.
package nodeagent

import (
	"crypto"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/carousel-dev/carousel/pkg/fsync"
	"github.com/carousel-dev/carousel/pkg/pki"
)

// The kubelet's two stores in its certificate directory: the client pairs
// (kubelet-client-current.pem -> kubelet-client-<timestamp>.pem) and, with
// serverTLSBootstrap, the serving pairs (kubelet-server-...).
const (
	ClientStore  = "kubelet-client"
	ServingStore = "kubelet-server"
	currentFile  = ClientStore + "-current.pem"
	timeLayout   = "2006-01-02-15-04-05"
	// maxPairsPerSecond bounds the suffixes tried for pairs stored in one second.
	maxPairsPerSecond = 1000
)

// Store keeps the node's client key pairs in a directory. Every step is
// atomic (write a temporary file, sync, rename), so a process killed between
// any two steps leaves either the old state or the new one:
//
//  1. a key is generated once and kept as the pending key until a certificate
//     for it is issued, so a restart asks for the same key (and CSR) again;
//     a denied or failed CSR discards it (DiscardPendingKey);
//  2. the issued pair is written as kubelet-client-<timestamp>.pem, a new
//     file that never replaces an existing one (see pairName);
//  3. kubelet-client-current.pem, a symlink, is swapped to point at it;
//  4. the pending key is removed.
//
// The layout is the kubelet's, as client-go's util/certificate FileStore
// writes it, so that a kubelet reads the pairs. The store is kept apart from
// FileStore for the pending key: the certificate manager client-go offers
// holds the key of a CSR in memory, so a process restarted while it waits
// makes a new key and a second CSR; here the key survives the restart, and
// with it the CSR's name (CSRName), which the agent then finds and waits on.
// Each file is also synced before the rename that publishes it, so that a
// power cut does not leave a current symlink to an empty pair.
type Store struct {
	Dir string
	// Name is the store's file name prefix: ClientStore (when empty) or
	// ServingStore.
	Name string

	// stopAfter, in tests, ends Update after the named step as a killed
	// process would: the steps are "pair", "link", "swap".
	stopAfter string
}

var errStopped = errors.New("stopped after a step (test)")

func (s *Store) name() string {
	if s.Name == "" {
		return ClientStore
	}
	return s.Name
}

// CurrentPath is the path consumers (the kubeconfig) use for the pair.
func (s *Store) CurrentPath() string { return filepath.Join(s.Dir, s.name()+"-current.pem") }

func (s *Store) pendingKeyPath() string { return filepath.Join(s.Dir, s.name()+"-pending.key") }

// Current returns the current key pair, or nil when there is none.
func (s *Store) Current() (*pki.KeyPair, error) {
	data, err := os.ReadFile(s.CurrentPath())
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	kp, err := parsePair(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", s.CurrentPath(), err)
	}
	return kp, nil
}

// parsePair parses a file holding the certificate block(s) and then the key
// block, as the kubelet writes them.
func parsePair(data []byte) (*pki.KeyPair, error) {
	var certs, key []byte
	for rest := data; ; {
		var block *pem.Block
		if block, rest = pem.Decode(rest); block == nil {
			break
		}
		if block.Type == "CERTIFICATE" {
			certs = append(certs, pem.EncodeToMemory(block)...)
		} else {
			key = append(key, pem.EncodeToMemory(block)...)
		}
	}
	return pki.ParseKeyPair(certs, key)
}

// PendingKey returns the key waiting for a certificate, generating and
// persisting one of alg when there is none. A pending key that the current
// certificate already belongs to (the process stopped before step 4) is
// not pending any more: a new one is generated.
func (s *Store) PendingKey(alg pki.KeyAlgorithm) (crypto.Signer, error) {
	path := s.pendingKeyPath()
	if data, err := os.ReadFile(path); err == nil {
		key, err := pki.ParsePrivateKey(data)
		// A corrupt pending key carries no state worth keeping: no
		// certificate was ever issued for it.
		if err == nil && !s.isCurrentKey(key) {
			return key, nil
		}
	}
	key, err := pki.GenerateKey(alg)
	if err != nil {
		return nil, err
	}
	keyPEM, err := pki.EncodePrivateKey(key)
	if err != nil {
		return nil, err
	}
	if err := writeAtomic(path, keyPEM); err != nil {
		return nil, err
	}
	return key, nil
}

// DiscardPendingKey removes the pending key, so that the next PendingKey is
// a fresh one. It is for a key whose CSR was denied or failed: asking again
// for it would only find that CSR again.
func (s *Store) DiscardPendingKey() error {
	if err := os.Remove(s.pendingKeyPath()); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return fsync.Dir(s.Dir)
}

func (s *Store) isCurrentKey(key crypto.Signer) bool {
	current, err := s.Current()
	if err != nil || current == nil {
		return false
	}
	eq, ok := key.Public().(interface{ Equal(crypto.PublicKey) bool })
	return ok && eq.Equal(current.Cert.PublicKey)
}

// Update stores an issued certificate for the pending key and makes it current.
func (s *Store) Update(certPEM []byte, key crypto.Signer, now time.Time) (*pki.KeyPair, error) {
	keyPEM, err := pki.EncodePrivateKey(key)
	if err != nil {
		return nil, err
	}
	pairPEM := append(append([]byte{}, certPEM...), keyPEM...)
	kp, err := parsePair(pairPEM)
	if err != nil {
		return nil, fmt.Errorf("the issued certificate does not match the pending key: %w", err)
	}
	name, err := writeNew(s.Dir, func(n int) string { return pairName(s.name(), now, n) }, pairPEM)
	if err != nil {
		return nil, err
	}
	if s.stopAfter == "pair" {
		return nil, errStopped
	}
	if err := s.keepCurrentFile(); err != nil {
		return nil, err
	}
	tmpLink := filepath.Join(s.Dir, "."+filepath.Base(s.CurrentPath())+".tmp")
	_ = os.Remove(tmpLink)
	if err := os.Symlink(name, tmpLink); err != nil {
		return nil, err
	}
	if s.stopAfter == "link" {
		return nil, errStopped
	}
	if err := os.Rename(tmpLink, s.CurrentPath()); err != nil {
		return nil, err
	}
	if err := fsync.Dir(s.Dir); err != nil {
		return nil, err
	}
	if s.stopAfter == "swap" {
		return nil, errStopped
	}
	if err := os.Remove(s.pendingKeyPath()); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	return kp, nil
}

// keepCurrentFile gives the current pair, when it is a file of its own
// rather than the kubelet's link to a stored pair (one a provisioner wrote),
// a stored pair's name too, from the time it was written, so that the link
// that replaces it does not lose its key. client-go's store refuses such a
// file; the agent keeps it.
func (s *Store) keepCurrentFile() error {
	info, err := os.Lstat(s.CurrentPath())
	if errors.Is(err, fs.ErrNotExist) || err == nil && !info.Mode().IsRegular() {
		return nil
	}
	if err != nil {
		return err
	}
	for n := range maxPairsPerSecond {
		err := os.Link(s.CurrentPath(), filepath.Join(s.Dir, pairName(s.name(), info.ModTime(), n)))
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		if err != nil {
			return fmt.Errorf("keeping the pair in %s, a file, before it is replaced: %w", s.CurrentPath(), err)
		}
		return fsync.Dir(s.Dir)
	}
	return fmt.Errorf("keeping the pair in %s, a file, before it is replaced: %d pairs of its time exist", s.CurrentPath(), maxPairsPerSecond)
}

// pairName is the file name of a pair of store stored at now:
// <store>-<timestamp>.pem, as the kubelet names it, with the time in UTC to
// the second. Pairs stored later in the same second get a suffix n:
// <store>-<timestamp>-<n>.pem.
func pairName(store string, now time.Time, n int) string {
	name := store + "-" + now.UTC().Format(timeLayout)
	if n > 0 {
		name += "-" + strconv.Itoa(n)
	}
	return name + ".pem"
}

// writeNew writes data under the first of name(0), name(1), ... that does not
// exist in dir, and returns that name. The file appears complete or not at
// all (a synced temporary file is hard-linked to its name) and never replaces
// an existing one, even one another process creates meanwhile.
func writeNew(dir string, name func(n int) string, data []byte) (string, error) {
	tmp, err := writeTemp(dir, "."+name(0), data)
	if err != nil {
		return "", err
	}
	defer func() { _ = os.Remove(tmp) }()
	for n := range maxPairsPerSecond {
		err := os.Link(tmp, filepath.Join(dir, name(n)))
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		if err != nil {
			return "", err
		}
		return name(n), fsync.Dir(dir)
	}
	return "", fmt.Errorf("%s: %d files of that name exist", name(0), maxPairsPerSecond)
}

// writeAtomic writes data to path through a synced temporary file and a rename.
func writeAtomic(path string, data []byte) error {
	tmp, err := writeTemp(filepath.Dir(path), "."+filepath.Base(path), data)
	if err != nil {
		return err
	}
	defer func() { _ = os.Remove(tmp) }()
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	return fsync.Dir(filepath.Dir(path))
}

// writeTemp writes data to a new synced file in dir, named prefix and a
// random suffix, creating dir when needed (on disk: a first bootstrap's pki
// directory must not vanish in a power cut that the kubeconfig pointing into
// it survives), and returns its path.
func writeTemp(dir, prefix string, data []byte) (string, error) {
	if err := fsync.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	f, err := os.CreateTemp(dir, prefix+".*")
	if err != nil {
		return "", err
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = os.Remove(f.Name())
		return "", err
	}
	return f.Name(), nil
}
