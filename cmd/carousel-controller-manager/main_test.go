package main

import (
	"os"
	"path/filepath"
	"testing"
)

// check-webhook, with no --kubeconfig, reads the kubeconfig KUBECONFIG names,
// as its docs and client-go say (BuildConfigFromFlags did not: it failed with
// no configuration outside a Pod); --kubeconfig comes first.
func TestCheckWebhookReadsTheKubeconfigOfKUBECONFIG(t *testing.T) {
	dir := t.TempDir()
	kubeconfig := func(name, server string) string {
		t.Helper()
		path := filepath.Join(dir, name)
		data := "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: " + server + "}}]\n" +
			"users: [{name: u, user: {}}]\ncontexts: [{name: x, context: {cluster: c, user: u}}]\ncurrent-context: x\n"
		if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	t.Setenv("KUBECONFIG", kubeconfig("env", "https://127.0.0.1:6443"))
	if cfg, err := checkWebhookConfig(""); err != nil || cfg.Host != "https://127.0.0.1:6443" {
		t.Errorf("with KUBECONFIG set: %v, %v; want its server", cfg, err)
	}
	if cfg, err := checkWebhookConfig(kubeconfig("flag", "https://127.0.0.1:7443")); err != nil || cfg.Host != "https://127.0.0.1:7443" {
		t.Errorf("with --kubeconfig too: %v, %v; want the flag's server", cfg, err)
	}
}

// check-webhook -h prints its flags and exits 0, as asking for help does.
func TestCheckWebhookHelpExitsZero(t *testing.T) {
	if code := checkWebhook([]string{"-h"}); code != 0 {
		t.Errorf("check-webhook -h exits %d, want 0", code)
	}
	if code := checkWebhook([]string{"--no-such-flag"}); code != 2 {
		t.Errorf("check-webhook --no-such-flag exits %d, want 2", code)
	}
}
