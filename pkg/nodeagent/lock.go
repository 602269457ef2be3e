package nodeagent

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
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
	return func() {
		_ = f.Close() // releases the lock
		m.renewing.Unlock()
	}, nil
}
