// Package fsync makes what a program wrote in a directory durable: the node
// agent's kubelet files and kubectl carousel's downloaded keys.
package fsync

import "os"

// Dir syncs the directory dir, so that the names created, renamed or removed
// in it are on disk, as a file's Sync does for its content.
func Dir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer func() { _ = d.Close() }()
	return d.Sync()
}
