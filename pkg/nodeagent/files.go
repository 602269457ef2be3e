package nodeagent

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"github.com/carousel-dev/carousel/pkg/fsync"
)

// fileEdit is a planned atomic replacement of a file's content.
type fileEdit struct {
	// path is the file written: a symlink given is followed, so that it
	// keeps pointing where it did.
	path string
	data []byte
	perm fs.FileMode
	// owner is the existing file's owner and group, which the new content
	// keeps; nil for a new file.
	owner *fileOwner
}

type fileOwner struct{ uid, gid int }

// planFile returns the edit that gives the file at path the content
// edit(current) (current is nil when there is no file), or nil when the file
// already has that content. A new file gets perm; an existing one keeps its
// permissions, owner and group.
func planFile(path string, perm fs.FileMode, edit func(current []byte) ([]byte, error)) (*fileEdit, error) {
	if resolved, err := filepath.EvalSymlinks(path); err == nil {
		path = resolved
	}
	current, err := os.ReadFile(path)
	var owner *fileOwner
	switch {
	case err == nil:
		info, err := os.Stat(path)
		if err != nil {
			return nil, err
		}
		perm = info.Mode().Perm()
		if st, ok := info.Sys().(*syscall.Stat_t); ok {
			owner = &fileOwner{uid: int(st.Uid), gid: int(st.Gid)}
		}
	case errors.Is(err, fs.ErrNotExist):
		current = nil
	default:
		return nil, err
	}
	data, err := edit(current)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if current != nil && bytes.Equal(current, data) {
		return nil, nil
	}
	return &fileEdit{path: path, data: data, perm: perm, owner: owner}, nil
}

// apply writes the edit atomically: a synced temporary file in the same
// directory, renamed over the file, and the directory synced.
func (e *fileEdit) apply() error {
	tmp, err := writeTemp(filepath.Dir(e.path), "."+filepath.Base(e.path), e.data)
	if err != nil {
		return err
	}
	defer func() { _ = os.Remove(tmp) }()
	// Owner first: a change of owner may clear mode bits. Without CAP_CHOWN
	// (a unit installed before it granted it) the file is root's, as it was
	// then, rather than not written.
	if e.owner != nil && (e.owner.uid != os.Geteuid() || e.owner.gid != os.Getegid()) {
		if err := os.Lchown(tmp, e.owner.uid, e.owner.gid); err != nil && !errors.Is(err, fs.ErrPermission) {
			return fmt.Errorf("keeping the owner of %s: %w", e.path, err)
		}
	}
	if err := os.Chmod(tmp, e.perm); err != nil {
		return err
	}
	if err := os.Rename(tmp, e.path); err != nil {
		return err
	}
	return fsync.Dir(filepath.Dir(e.path))
}

// replaceWith is an edit that replaces the whole content with data.
func replaceWith(data []byte) func([]byte) ([]byte, error) {
	return func([]byte) ([]byte, error) { return data, nil }
}

// kubeconfigCA is an edit that sets the certificate-authority-data of a
// kubeconfig (see withCertificateAuthority); it needs an existing kubeconfig.
func kubeconfigCA(ca []byte) func([]byte) ([]byte, error) {
	return func(current []byte) ([]byte, error) {
		if current == nil {
			return nil, errors.New("no kubeconfig to write the trust bundle into")
		}
		out, _, err := withCertificateAuthority(current, ca)
		return out, err
	}
}
