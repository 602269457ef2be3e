package credentials

import (
	"bytes"
	"encoding/base64"
	"strings"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
)

// APIServerURL is the server a kubeconfig points at: the Cluster's endpoint,
// or else the conventional in-namespace Service of its API server.
func APIServerURL(c *v1alpha1.Cluster) string {
	if c.Spec.ControlPlane.Endpoint != "" {
		return c.Spec.ControlPlane.Endpoint
	}
	return "https://kube-apiserver." + c.Namespace + ".svc"
}

// Kubeconfig renders a kubeconfig with one cluster, user and context. The
// output is deterministic, so an unchanged credential renders unchanged bytes.
//
// The bytes are clientcmd.Write's. When every name is a plain YAML scalar
// and the data are PEM (the operator's kubeconfigs, unless a Cluster's name
// reads in YAML as a number, boolean or null), they are written directly:
// clientcmd.Write encodes the config to JSON, decodes that and encodes it
// again as YAML, some 87 kB of garbage for a 3 kB kubeconfig: 8 % of what
// a 1,000-Cluster fleet allocated through two rotations, even with a memo
// that skipped the renderings of unchanged inputs (the direct way costs
// about what that memo's lookup did, so there is none now). FuzzKubeconfig
// holds both ways to the same bytes; any other input goes through
// clientcmd.Write.
func Kubeconfig(clusterName, server string, caBundle, certPEM, keyPEM []byte, user string) ([]byte, error) {
	if plainScalar(clusterName) && plainScalar(server) && plainScalar(user) && isPEM(caBundle) && isPEM(certPEM) && isPEM(keyPEM) {
		return renderKubeconfig(clusterName, server, caBundle, certPEM, keyPEM, user), nil
	}
	return writeKubeconfig(clusterName, server, caBundle, certPEM, keyPEM, user)
}

// writeKubeconfig is Kubeconfig through clientcmd.Write.
func writeKubeconfig(clusterName, server string, caBundle, certPEM, keyPEM []byte, user string) ([]byte, error) {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters[clusterName] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: caBundle}
	cfg.AuthInfos[user] = &clientcmdapi.AuthInfo{ClientCertificateData: certPEM, ClientKeyData: keyPEM}
	cfg.Contexts[clusterName] = &clientcmdapi.Context{Cluster: clusterName, AuthInfo: user}
	cfg.CurrentContext = clusterName
	return clientcmd.Write(*cfg)
}

// renderKubeconfig writes what clientcmd.Write makes of Kubeconfig's config,
// whose names are plain scalars and whose data are PEM: the keys in
// the order sigs.k8s.io/yaml sorts them, the data in standard base64.
func renderKubeconfig(clusterName, server string, caBundle, certPEM, keyPEM []byte, user string) []byte {
	b64 := base64.StdEncoding
	out := make([]byte, 0, 320+3*len(clusterName)+len(server)+2*len(user)+
		b64.EncodedLen(len(caBundle))+b64.EncodedLen(len(certPEM))+b64.EncodedLen(len(keyPEM)))
	out = append(out, "apiVersion: v1\nclusters:\n- cluster:\n    certificate-authority-data: "...)
	out = b64.AppendEncode(out, caBundle)
	out = append(append(out, "\n    server: "...), server...)
	out = append(append(out, "\n  name: "...), clusterName...)
	out = append(append(out, "\ncontexts:\n- context:\n    cluster: "...), clusterName...)
	out = append(append(out, "\n    user: "...), user...)
	out = append(append(out, "\n  name: "...), clusterName...)
	out = append(append(out, "\ncurrent-context: "...), clusterName...)
	out = append(append(out, "\nkind: Config\nusers:\n- name: "...), user...)
	out = append(out, "\n  user:\n    client-certificate-data: "...)
	out = b64.AppendEncode(out, certPEM)
	out = append(out, "\n    client-key-data: "...)
	out = b64.AppendEncode(out, keyPEM)
	return append(out, '\n')
}

// isPEM: data starts as PEM does, so its base64 starts "LS0tLS1CRUdJTi",
// which YAML writes unquoted whatever follows; other data could encode to
// what YAML reads as a number or boolean ("1234", "true"), which it quotes.
func isPEM(data []byte) bool { return bytes.HasPrefix(data, []byte("-----BEGIN ")) }

// plainScalar reports whether YAML writes s as it is, unquoted: it starts
// with a letter, has only letters, digits and . / _ - : (not last), and is
// no word YAML 1.1 reads as a boolean or null. This is narrower than what
// YAML allows, which is enough: anything else goes through clientcmd.Write.
func plainScalar(s string) bool {
	if s == "" || s[len(s)-1] == ':' {
		return false
	}
	for i := range len(s) {
		switch c := s[i]; {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z':
		case i == 0:
			return false
		case '0' <= c && c <= '9', c == '.', c == '/', c == '_', c == '-', c == ':':
		default:
			return false
		}
	}
	switch strings.ToLower(s) {
	case "y", "n", "yes", "no", "on", "off", "true", "false", "null":
		return false
	}
	return true
}

// TokenKubeconfig renders a kubeconfig for server, trusted with caBundle,
// that authenticates with a bearer token: what an API server's webhook
// backends (audit, authentication) read with --*-config-file.
func TokenKubeconfig(clusterName, server string, caBundle []byte, token, user string) ([]byte, error) {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters[clusterName] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: caBundle}
	cfg.AuthInfos[user] = &clientcmdapi.AuthInfo{Token: token}
	cfg.Contexts[clusterName] = &clientcmdapi.Context{Cluster: clusterName, AuthInfo: user}
	cfg.CurrentContext = clusterName
	return clientcmd.Write(*cfg)
}
