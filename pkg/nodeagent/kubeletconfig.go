package nodeagent

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"

	kubeletconfigv1beta1 "k8s.io/kubelet/config/v1beta1"
	"sigs.k8s.io/yaml"
)

// DefaultKubeletConfigPath is where the kubelet's --config usually is.
const DefaultKubeletConfigPath = "/var/lib/kubelet/config.yaml"

// The kubelet's defaults for the fields the agent reads
// (k8s.io/kubernetes/pkg/kubelet/apis/config/v1beta1/defaults.go).
const (
	defaultHealthzBindAddress = "127.0.0.1"
	defaultHealthzPort        = 10248
	defaultPort               = 10250
)

// servingAddress is where the kubelet serves HTTPS: address (every address
// when empty or unspecified, then reached on the loopback of its family) and
// port.
func servingAddress(address string, port int32) string {
	if address == "" {
		address = "0.0.0.0"
	}
	return net.JoinHostPort(reachable(address), strconv.Itoa(int(port)))
}

// reachable is how the agent reaches a kubelet that binds address: an
// unspecified address (0.0.0.0, ::) on the loopback of its family (a kubelet
// on :: alone, with net.ipv6.bindv6only set, is not on 127.0.0.1).
func reachable(address string) string {
	ip := net.ParseIP(address)
	switch {
	case ip == nil || !ip.IsUnspecified():
		return address
	case ip.To4() == nil:
		return "::1"
	}
	return "127.0.0.1"
}

// KubeletConfig is what the agent learns from the kubelet's configuration
// file, instead of being told it a second time.
type KubeletConfig struct {
	// ClientCAFile is authentication.x509.clientCAFile, made absolute the
	// way the kubelet does (relative to the configuration file): the agent
	// writes the kubelet trust bundle there.
	ClientCAFile string
	// HealthzURL is the kubelet's /healthz, from healthzBindAddress and healthzPort.
	HealthzURL string
	// ServingAddress is the kubelet's HTTPS host:port, from address and
	// port; loopback when it listens on every address.
	ServingAddress string
}

// LoadKubeletConfig reads the kubelet's KubeletConfiguration file and checks
// that it lets the agent rotate the kubelet's credentials in place (see
// checkKubeletConfig). Drop-in files (the kubelet's --config-dir) are not read.
func LoadKubeletConfig(path string) (*KubeletConfig, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("kubelet config: %w", err)
	}
	cfg, err := parseKubeletConfig(data, filepath.Dir(path))
	if err != nil {
		return nil, fmt.Errorf("kubelet config %s: %w", path, err)
	}
	return cfg, nil
}

// parseKubeletConfig parses a KubeletConfiguration and checks it; relative
// paths are relative to dir.
func parseKubeletConfig(data []byte, dir string) (*KubeletConfig, error) {
	var kc kubeletconfigv1beta1.KubeletConfiguration
	if err := yaml.Unmarshal(data, &kc); err != nil {
		return nil, err
	}
	if err := checkKubeletConfig(&kc); err != nil {
		return nil, err
	}
	caFile := kc.Authentication.X509.ClientCAFile
	if !filepath.IsAbs(caFile) {
		caFile = filepath.Join(dir, caFile)
	}
	port := int32(defaultHealthzPort)
	if kc.HealthzPort != nil {
		port = *kc.HealthzPort
	}
	servingPort := int32(defaultPort)
	if kc.Port != 0 {
		servingPort = kc.Port
	}
	return &KubeletConfig{ClientCAFile: caFile, HealthzURL: healthzURL(kc.HealthzBindAddress, port),
		ServingAddress: servingAddress(kc.Address, servingPort)}, nil
}

// checkKubeletConfig says, for every field that is in the way, why a kubelet
// so configured cannot have its credentials rotated in place.
func checkKubeletConfig(kc *kubeletconfigv1beta1.KubeletConfiguration) error {
	var errs []error
	if kc.Kind != "KubeletConfiguration" || kc.APIVersion != kubeletconfigv1beta1.SchemeGroupVersion.String() {
		errs = append(errs, fmt.Errorf("apiVersion %q, kind %q: want %s, KubeletConfiguration",
			kc.APIVersion, kc.Kind, kubeletconfigv1beta1.SchemeGroupVersion))
	}
	if kc.Authentication.X509.ClientCAFile == "" {
		errs = append(errs, errors.New("authentication.x509.clientCAFile is not set: the agent installs the kubelet CA bundle there "+
			"(e.g. /var/lib/kubelet/ca.crt), and without it the kubelet does not authenticate the API server's client certificate"))
	}
	if !kc.RotateCertificates {
		errs = append(errs, errors.New("rotateCertificates is not true: the kubelet must rotate its client certificate itself; "+
			"the agent renews it only when a CA rotation asks for it"))
	}
	if !kc.ServerTLSBootstrap {
		errs = append(errs, errors.New("serverTLSBootstrap is not true: the kubelet must request its serving certificate by CSR, "+
			"so that it gets one from the new kubelet CA when the agent removes the old one"))
	}
	if kc.HealthzPort != nil && *kc.HealthzPort == 0 {
		errs = append(errs, errors.New("healthzPort is 0 (healthz disabled): the agent checks the kubelet's /healthz after restarting it"))
	}
	if len(errs) > 0 {
		return fmt.Errorf("the kubelet's credentials cannot be rotated in place: %w", errors.Join(errs...))
	}
	return nil
}

// healthzURL is the URL of the kubelet's /healthz when it binds address
// (empty: the kubelet's default, 127.0.0.1) and port. An unspecified address
// (0.0.0.0, ::) is reached on the loopback of its family.
func healthzURL(address string, port int32) string {
	if address == "" {
		address = defaultHealthzBindAddress
	}
	return "http://" + net.JoinHostPort(reachable(address), strconv.Itoa(int(port))) + "/healthz"
}
