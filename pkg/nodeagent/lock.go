package nodeagent

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// renewalLockFile, in the cert dir, is locked (flock) for each renewal, so
// that a `refresh-certs run` and the running agent, two processes, never
// renew at the same time: they share the pending key, the current link and
// the kubeconfig.
const renewalLockFile = ".carousel-node-agent.lock"

// ErrRenewing says that another process renews in the cert dir.
var ErrRenewing = errors.New("another process renews in this cert dir (the node agent, or refresh-certs run); try again once it is done")

// lockRenewals serialises m's renewals within the process (renewing: a
// renewal waits for the one under way) and with other processes (a
// non-blocking flock of renewalLockFile, which the kernel releases if the
// process dies): there it fails at once with ErrRenewing rather than wait
// for a renewal that may itself wait for a CSR's approval. Call the
// returned function to unlock.
func (m *Manager) lockRenewals() (func(), error) {
	m.renewing.Lock()
	if err := os.MkdirAll(m.cfg.CertDir, 0o700); err != nil {
		m.renewing.Unlock()
		return nil, err
	}
	path := filepath.Join(m.cfg.CertDir, renewalLockFile)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		m.renewing.Unlock()
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		_ = f.Close()
		m.renewing.Unlock()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("%s: %w", path, ErrRenewing)
		}
		return nil, fmt.Errorf("locking %s: %w", path, err)
	}
	removeLeftoverTemporaryFiles(m.cfg.CertDir)
	return func() {
		_ = f.Close() // releases the lock
		m.renewing.Unlock()
	}, nil
}

// removeLeftoverTemporaryFiles removes, from the cert dir, the temporary
// files (writeTemp: ".<name>.<random digits>") of pairs and pending keys
// that a process killed in the middle of a write left behind: each holds a
// private key that nothing would ever use or remove. It runs with the
// renewal lock held, under which alone such temporary files are written
// (Store.PendingKey, Store.Update), so none is being written in this
// process or another. The kubelet names its own files otherwise. Best
// effort: a file that cannot be removed is left for the next renewal.
func removeLeftoverTemporaryFiles(certDir string) {
	entries, err := os.ReadDir(certDir)
	if err != nil {
		return
	}
	for _, e := range entries {
		if e.Type().IsRegular() && isTemporaryFile(e.Name()) {
			_ = os.Remove(filepath.Join(certDir, e.Name()))
		}
	}
}

// isTemporaryFile reports whether name is that of a temporary file writeTemp
// made in the cert dir for a pair or a pending key.
func isTemporaryFile(name string) bool {
	if !strings.HasPrefix(name, ".") {
		return false
	}
	dot := strings.LastIndexByte(name, '.')
	target, suffix := name[1:max(dot, 1)], name[dot+1:]
	if suffix == "" || strings.Trim(suffix, "0123456789") != "" {
		return false
	}
	return strings.HasPrefix(target, ClientStore+"-") || strings.HasPrefix(target, ServingStore+"-")
}
