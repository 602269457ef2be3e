package framework

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestPodFilesAreCopiesTakenAtStart: a process gets copies of the files in
// the control plane's directory as they are when it starts, which a later
// write there does not change; a file that is not there fails the start,
// as a subPath mount of a missing key fails the container.
func TestPodFilesAreCopiesTakenAtStart(t *testing.T) {
	m := &ManagedControlPlane{Dir: t.TempDir()}
	store := filepath.Join(m.Dir, "apiserver.crt")
	if err := os.WriteFile(store, []byte("first"), 0o600); err != nil {
		t.Fatal(err)
	}
	files := m.podFiles("kube-apiserver")
	path := files.file("apiserver.crt")
	if files.err != nil {
		t.Fatal(files.err)
	}
	if err := writeFileAtomic(store, []byte("second")); err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(path); err != nil || string(got) != "first" {
		t.Fatalf("the running pod's copy is %q (%v), want the file as it was when it started", got, err)
	}
	if again := m.podFiles("kube-apiserver"); again.file("apiserver.crt") != path || again.err != nil {
		t.Fatalf("a restart of the pod gets %v", again.err)
	} else if got, _ := os.ReadFile(path); string(got) != "second" {
		t.Fatalf("a restarted pod's copy is %q, want the file as it is now", got)
	}

	missing := m.podFiles("etcd-m0")
	missing.file("etcd-server.crt")
	missing.file("apiserver.crt")
	if missing.err == nil || !strings.Contains(missing.err.Error(), "mounting etcd-server.crt") {
		t.Fatalf("err = %v, want the first missing file named", missing.err)
	}
}
