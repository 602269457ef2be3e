package nodeagent

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// kubeletKubeconfig is a kubeconfig as the kubelet writes it after TLS
// bootstrapping, with a user-added extension and a second cluster.
const kubeletKubeconfig = `apiVersion: v1
kind: Config
clusters:
- name: default-cluster
  cluster:
    server: https://10.0.0.1:6443
    certificate-authority-data: b2xkLWNh
    tls-server-name: kubernetes
- name: other
  cluster:
    server: https://10.9.9.9:6443
    certificate-authority-data: b3RoZXI=
contexts:
- name: default-context
  context:
    cluster: default-cluster
    user: default-auth
    namespace: default
current-context: default-context
users:
- name: default-auth
  user:
    client-certificate: /var/lib/kubelet/pki/kubelet-client-current.pem
    client-key: /var/lib/kubelet/pki/kubelet-client-current.pem
`

func TestWithCertificateAuthorityKeepsTheRest(t *testing.T) {
	out, changed, err := withCertificateAuthority([]byte(kubeletKubeconfig), []byte("new-ca"))
	if err != nil || !changed {
		t.Fatalf("withCertificateAuthority = %v, %v", changed, err)
	}
	before, _ := clientcmd.Load([]byte(kubeletKubeconfig))
	after, err := clientcmd.Load(out)
	if err != nil {
		t.Fatal(err)
	}
	if got := string(after.Clusters["default-cluster"].CertificateAuthorityData); got != "new-ca" {
		t.Fatalf("certificate-authority-data = %q", got)
	}
	// Everything but that one field is as it was.
	after.Clusters["default-cluster"].CertificateAuthorityData = before.Clusters["default-cluster"].CertificateAuthorityData
	if a, b := mustWrite(t, before), mustWrite(t, after); !bytes.Equal(a, b) {
		t.Fatalf("the kubeconfig changed besides the bundle:\n%s\nwant\n%s", b, a)
	}

	again, changed, err := withCertificateAuthority(out, []byte("new-ca"))
	if err != nil || changed || !bytes.Equal(again, out) {
		t.Fatalf("a second write of the same bundle: changed %v, err %v", changed, err)
	}
}

// The bundle replaces what clientcmd refuses beside certificate-authority-data:
// a certificate-authority file reference, and insecure-skip-tls-verify (a
// kubeconfig that skipped the verification of its server verifies it with
// the bundle).
func TestWithCertificateAuthorityReplacesWhatClientcmdRefusesBesideIt(t *testing.T) {
	for name, replacement := range map[string]string{
		"a file reference":         "certificate-authority: /etc/kubernetes/ca.crt",
		"insecure-skip-tls-verify": "insecure-skip-tls-verify: true",
	} {
		in := strings.Replace(kubeletKubeconfig, "certificate-authority-data: b2xkLWNh", replacement, 1)
		out, changed, err := withCertificateAuthority([]byte(in), []byte("new-ca"))
		if err != nil || !changed {
			t.Fatalf("%s: withCertificateAuthority = %v, %v", name, changed, err)
		}
		cfg, err := clientcmd.Load(out)
		if err != nil {
			t.Fatal(err)
		}
		if c := cfg.Clusters["default-cluster"]; c.CertificateAuthority != "" || c.InsecureSkipTLSVerify || string(c.CertificateAuthorityData) != "new-ca" {
			t.Fatalf("%s: cluster = %+v", name, c)
		}
	}
}

func TestWithCertificateAuthorityRefuses(t *testing.T) {
	for name, in := range map[string]string{
		"no such context":                  strings.Replace(kubeletKubeconfig, "current-context: default-context", "current-context: nope", 1),
		"no current context, two clusters": strings.Replace(kubeletKubeconfig, "current-context: default-context", "", 1),
		"not a kubeconfig":                 "{",
	} {
		if _, _, err := withCertificateAuthority([]byte(in), []byte("ca")); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	if _, _, err := withCertificateAuthority([]byte(kubeletKubeconfig), nil); err == nil {
		t.Error("an empty bundle: no error")
	}
}

func TestReadKubeconfig(t *testing.T) {
	dir := t.TempDir()
	in := strings.NewReplacer("certificate-authority-data: b2xkLWNh", "certificate-authority: ca.crt",
		"/var/lib/kubelet/pki/kubelet-client-current.pem", "pki/kubelet-client-current.pem").Replace(kubeletKubeconfig)
	path := filepath.Join(dir, "kubeconfig")
	mustWriteFile(t, path, in, 0o600)
	mustWriteFile(t, filepath.Join(dir, "ca.crt"), "file-ca", 0o644)
	info, err := readKubeconfig(path)
	if err != nil {
		t.Fatal(err)
	}
	want := kubeconfigInfo{Server: "https://10.0.0.1:6443", CA: []byte("file-ca"),
		ClientCertificate: filepath.Join(dir, "pki/kubelet-client-current.pem"), ClientKey: filepath.Join(dir, "pki/kubelet-client-current.pem")}
	if info.Server != want.Server || string(info.CA) != string(want.CA) || info.ClientCertificate != want.ClientCertificate || info.ClientKey != want.ClientKey {
		t.Fatalf("readKubeconfig = %+v, want %+v", info, want)
	}
}

func TestPlanFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "ca.crt")

	t.Run("a new file gets the permissions asked for", func(t *testing.T) {
		edit, err := planFile(path, 0o644, replaceWith([]byte("one")))
		if err != nil || edit == nil {
			t.Fatalf("planFile = %v, %v", edit, err)
		}
		if err := edit.apply(); err != nil {
			t.Fatal(err)
		}
		assertFile(t, path, "one", 0o644)
	})
	t.Run("the same content is no edit", func(t *testing.T) {
		if edit, err := planFile(path, 0o644, replaceWith([]byte("one"))); err != nil || edit != nil {
			t.Fatalf("planFile = %v, %v; want no edit", edit, err)
		}
	})
	t.Run("an existing file keeps its permissions", func(t *testing.T) {
		if err := os.Chmod(path, 0o640); err != nil {
			t.Fatal(err)
		}
		edit, err := planFile(path, 0o600, replaceWith([]byte("two")))
		if err != nil || edit == nil {
			t.Fatalf("planFile = %v, %v", edit, err)
		}
		if err := edit.apply(); err != nil {
			t.Fatal(err)
		}
		assertFile(t, path, "two", 0o640)
	})
	t.Run("an existing file keeps its owner and group", func(t *testing.T) {
		if os.Geteuid() != 0 {
			t.Skip("giving a file another owner needs root")
		}
		const uid, gid = 4321, 8765 // a kubelet file root does not own, as a group reader's
		if err := os.Chown(path, uid, gid); err != nil {
			t.Fatal(err)
		}
		edit, err := planFile(path, 0o600, replaceWith([]byte("owned")))
		if err != nil || edit == nil {
			t.Fatalf("planFile = %v, %v", edit, err)
		}
		if err := edit.apply(); err != nil {
			t.Fatal(err)
		}
		info, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if st := info.Sys().(*syscall.Stat_t); st.Uid != uid || st.Gid != gid {
			t.Errorf("owner %d:%d after the edit, want %d:%d", st.Uid, st.Gid, uid, gid)
		}
		assertFile(t, path, "owned", 0o640)
	})
	t.Run("a symlink is followed and kept", func(t *testing.T) {
		link := filepath.Join(dir, "link.crt")
		if err := os.Symlink("ca.crt", link); err != nil {
			t.Fatal(err)
		}
		edit, err := planFile(link, 0o644, replaceWith([]byte("three")))
		if err != nil || edit == nil {
			t.Fatalf("planFile = %v, %v", edit, err)
		}
		if err := edit.apply(); err != nil {
			t.Fatal(err)
		}
		if target, err := os.Readlink(link); err != nil || target != "ca.crt" {
			t.Fatalf("the symlink now points at %q (%v)", target, err)
		}
		assertFile(t, path, "three", 0o640)
	})
	t.Run("no temporary file is left", func(t *testing.T) {
		entries, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			if strings.HasPrefix(e.Name(), ".") {
				t.Errorf("left behind: %s", e.Name())
			}
		}
	})
	t.Run("a kubeconfig edit needs a kubeconfig", func(t *testing.T) {
		if _, err := planFile(filepath.Join(dir, "missing"), 0o600, kubeconfigCA([]byte("ca"))); err == nil {
			t.Fatal("no error")
		}
	})
}

func mustWrite(t *testing.T, cfg *clientcmdapi.Config) []byte {
	t.Helper()
	out, err := clientcmd.Write(*cfg)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func mustWriteFile(t *testing.T, path, data string, perm os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(data), perm); err != nil {
		t.Fatal(err)
	}
}

func assertFile(t *testing.T, path, data string, perm os.FileMode) {
	t.Helper()
	info, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != data || info.Mode().Perm() != perm {
		t.Fatalf("%s holds %q with mode %v, want %q with %v", path, got, info.Mode().Perm(), data, perm)
	}
}

// writeTestKubeconfig writes a kubeconfig at path whose current context is
// cluster with user.
func writeTestKubeconfig(t *testing.T, path string, cluster *clientcmdapi.Cluster, user *clientcmdapi.AuthInfo) {
	t.Helper()
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["default-cluster"] = cluster
	cfg.AuthInfos["default-auth"] = user
	cfg.Contexts["default-context"] = &clientcmdapi.Context{Cluster: "default-cluster", AuthInfo: "default-auth"}
	cfg.CurrentContext = "default-context"
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
}
