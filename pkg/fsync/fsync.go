// Package fsync makes what a program wrote in a directory durable: the node
// agent's kubelet files and kubectl carousel's downloaded keys.
package fsync

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
)

// Dir syncs the directory dir, so that the names created, renamed or removed
// in it are on disk, as a file's Sync does for its content. On Windows it
// does nothing: a directory cannot be flushed there (FlushFileBuffers needs
// a handle open for writing, which a directory cannot have), and NTFS
// journals the names in it.
func Dir(dir string) error {
	if runtime.GOOS == "windows" {
		return nil
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer func() { _ = d.Close() }()
	return d.Sync()
}

// MkdirAll is os.MkdirAll, with each directory it creates on disk: the
// parent of each is synced (Dir), so that a crash after the caller synced
// files in dir cannot lose dir itself.
func MkdirAll(dir string, perm os.FileMode) error {
	dir = filepath.Clean(dir) // what is created is what is synced
	var created []string
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Lstat(d); err == nil || !errors.Is(err, fs.ErrNotExist) {
			break
		}
		created = append(created, d)
		if filepath.Dir(d) == d {
			break
		}
	}
	if err := os.MkdirAll(dir, perm); err != nil {
		return err
	}
	for _, d := range created {
		if err := Dir(filepath.Dir(d)); err != nil {
			return err
		}
	}
	return nil
}
