package nodeagent

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const kubeletConfigHeader = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"

func TestParseKubeletConfig(t *testing.T) {
	const rotatable = kubeletConfigHeader + `rotateCertificates: true
serverTLSBootstrap: true
authentication:
  x509:
    clientCAFile: /var/lib/kubelet/ca.crt
`
	for _, tt := range []struct {
		name    string
		config  string
		want    KubeletConfig
		refuses []string // each in the error
	}{
		{name: "rotatable, healthz at the kubelet's defaults", config: rotatable,
			want: KubeletConfig{ClientCAFile: "/var/lib/kubelet/ca.crt", HealthzURL: "http://127.0.0.1:10248/healthz", ServingAddress: "127.0.0.1:10250"}},
		{name: "relative clientCAFile is relative to the config file, as for the kubelet",
			config: strings.Replace(rotatable, "/var/lib/kubelet/ca.crt", "pki/ca.crt", 1),
			want:   KubeletConfig{ClientCAFile: "/etc/kubelet/pki/ca.crt", HealthzURL: "http://127.0.0.1:10248/healthz", ServingAddress: "127.0.0.1:10250"}},
		{name: "healthz elsewhere", config: rotatable + "healthzBindAddress: 10.0.0.5\nhealthzPort: 10300\n",
			want: KubeletConfig{ClientCAFile: "/var/lib/kubelet/ca.crt", HealthzURL: "http://10.0.0.5:10300/healthz", ServingAddress: "127.0.0.1:10250"}},
		{name: "HTTPS on one address and port", config: rotatable + "address: 10.0.0.5\nport: 10350\n",
			want: KubeletConfig{ClientCAFile: "/var/lib/kubelet/ca.crt", HealthzURL: "http://127.0.0.1:10248/healthz", ServingAddress: "10.0.0.5:10350"}},
		{name: "HTTPS on every address, reached on loopback", config: rotatable + "address: 0.0.0.0\n",
			want: KubeletConfig{ClientCAFile: "/var/lib/kubelet/ca.crt", HealthzURL: "http://127.0.0.1:10248/healthz", ServingAddress: "127.0.0.1:10250"}},
		{name: "HTTPS on every IPv6 address, reached on the IPv6 loopback", config: rotatable + "address: \"::\"\n",
			want: KubeletConfig{ClientCAFile: "/var/lib/kubelet/ca.crt", HealthzURL: "http://127.0.0.1:10248/healthz", ServingAddress: "[::1]:10250"}},
		{name: "fields the agent does not read are accepted", config: rotatable + "cgroupDriver: systemd\nsomeFutureField: 1\n",
			want: KubeletConfig{ClientCAFile: "/var/lib/kubelet/ca.crt", HealthzURL: "http://127.0.0.1:10248/healthz", ServingAddress: "127.0.0.1:10250"}},
		{name: "no clientCAFile", config: strings.Replace(rotatable, "    clientCAFile: /var/lib/kubelet/ca.crt\n", "", 1),
			refuses: []string{"clientCAFile is not set"}},
		{name: "the kubelet does not rotate", config: strings.Replace(rotatable, "rotateCertificates: true", "rotateCertificates: false", 1),
			refuses: []string{"rotateCertificates is not true"}},
		{name: "no serving certificate by CSR", config: strings.Replace(rotatable, "serverTLSBootstrap: true\n", "", 1),
			refuses: []string{"serverTLSBootstrap is not true"}},
		{name: "healthz disabled", config: rotatable + "healthzPort: 0\n", refuses: []string{"healthzPort is 0"}},
		{name: "not a KubeletConfiguration", config: strings.Replace(rotatable, "kind: KubeletConfiguration", "kind: KubeProxyConfiguration", 1),
			refuses: []string{"want kubelet.config.k8s.io/v1beta1, KubeletConfiguration"}},
		{name: "every refusal at once", config: kubeletConfigHeader + "healthzPort: 0\n",
			refuses: []string{"clientCAFile is not set", "rotateCertificates is not true", "serverTLSBootstrap is not true", "healthzPort is 0"}},
		{name: "not YAML", config: "{", refuses: []string{"yaml"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseKubeletConfig([]byte(tt.config), "/etc/kubelet")
			if len(tt.refuses) == 0 {
				if err != nil {
					t.Fatal(err)
				}
				if *got != tt.want {
					t.Fatalf("got %+v, want %+v", *got, tt.want)
				}
				return
			}
			if err == nil {
				t.Fatalf("got %+v, want an error", *got)
			}
			for _, want := range tt.refuses {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not say %q", err, want)
				}
			}
		})
	}
}

func TestLoadKubeletConfigNamesTheFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(path, []byte(kubeletConfigHeader), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadKubeletConfig(path); err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "cannot be rotated in place") {
		t.Fatalf("LoadKubeletConfig = %v", err)
	}
	if _, err := LoadKubeletConfig(filepath.Join(t.TempDir(), "missing.yaml")); err == nil {
		t.Fatal("a missing kubelet config is not an error")
	}
}

func TestHealthzURL(t *testing.T) {
	for _, tt := range []struct {
		address string
		port    int32
		want    string
	}{
		{"", 10248, "http://127.0.0.1:10248/healthz"},
		{"127.0.0.1", 10248, "http://127.0.0.1:10248/healthz"},
		{"0.0.0.0", 10248, "http://127.0.0.1:10248/healthz"},
		{"::", 10248, "http://[::1]:10248/healthz"},
		{"fd00::5", 1234, "http://[fd00::5]:1234/healthz"},
		{"localhost", 10248, "http://localhost:10248/healthz"},
	} {
		if got := healthzURL(tt.address, tt.port); got != tt.want {
			t.Errorf("healthzURL(%q, %d) = %q, want %q", tt.address, tt.port, got, tt.want)
		}
	}
}
