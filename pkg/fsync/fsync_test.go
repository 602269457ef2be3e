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

func TestMkdirAll(t *testing.T) {
	base := t.TempDir()
	dir := filepath.Join(base, "a", "b", "c")
	if err := MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{filepath.Join(base, "a"), filepath.Join(base, "a", "b"), dir} {
		info, err := os.Stat(d)
		if err != nil {
			t.Fatal(err)
		}
		if !info.IsDir() || info.Mode().Perm() != 0o700 {
			t.Errorf("%s: %v, want a directory with mode 0700", d, info.Mode())
		}
	}
	if err := MkdirAll(dir, 0o700); err != nil {
		t.Errorf("MkdirAll of a directory that exists = %v", err)
	}
	file := filepath.Join(base, "f")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := MkdirAll(filepath.Join(file, "d"), 0o700); err == nil {
		t.Error("MkdirAll under a file succeeded")
	}
}
