package framework

import (
	"path/filepath"
	"testing"
)

// A node's processes run in a mount namespace whose working directory is /:
// a relative work directory would name nothing there.
func TestStartTakesARelativeWorkDirAsAbsolute(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	e, err := Start(t.Context(), Options{WorkDir: "env", KubeBinDir: filepath.Join(dir, "no-binaries")})
	t.Cleanup(e.Stop)
	if err == nil {
		t.Fatal("started without binaries")
	}
	if want := filepath.Join(dir, "env"); e.WorkDir != want {
		t.Errorf("WorkDir %q, want %q", e.WorkDir, want)
	}
}
