package fsync

import (
	"os"
	"path/filepath"
	"testing"
)

func TestDir(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "f"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := Dir(dir); err != nil {
		t.Errorf("Dir(%s) = %v", dir, err)
	}
	if err := Dir(filepath.Join(dir, "gone")); !os.IsNotExist(err) {
		t.Errorf("Dir of a directory that does not exist = %v, want it not to exist", err)
	}
}
