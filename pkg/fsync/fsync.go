// Package fsync makes what a program wrote in a directory durable: the node
// agent's kubelet files and kubectl carousel's downloaded keys.
package fsync

import (
	"os"
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
