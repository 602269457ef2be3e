package credentials

import (
	"crypto/sha256"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/lru"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
	"github.com/carousel-dev/carousel/pkg/pki"
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
func Kubeconfig(clusterName, server string, caBundle, certPEM, keyPEM []byte, user string) ([]byte, error) {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters[clusterName] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: caBundle}
	cfg.AuthInfos[user] = &clientcmdapi.AuthInfo{ClientCertificateData: certPEM, ClientKeyData: keyPEM}
	cfg.Contexts[clusterName] = &clientcmdapi.Context{Cluster: clusterName, AuthInfo: user}
	cfg.CurrentContext = clusterName
	return clientcmd.Write(*cfg)
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

// KubeconfigKeeping is Kubeconfig, except that it returns current when
// current is what Kubeconfig renders for these inputs. It remembers the
// SHA-256 of what it rendered for each inputs' SHA-256, so that a reconcile
// of an unchanged credential hashes some kilobytes where rendering would
// encode them to JSON and convert that to YAML.
func KubeconfigKeeping(current []byte, clusterName, server string, caBundle, certPEM, keyPEM []byte, user string) ([]byte, error) {
	key := pki.Digest([]byte(clusterName), []byte(server), caBundle, certPEM, keyPEM, []byte(user))
	if rendered, ok := renderedKubeconfigs.Get(key); ok && rendered.([sha256.Size]byte) == sha256.Sum256(current) {
		return current, nil
	}
	out, err := Kubeconfig(clusterName, server, caBundle, certPEM, keyPEM, user)
	if err != nil {
		return nil, err
	}
	renderedKubeconfigs.Add(key, sha256.Sum256(out))
	return out, nil
}

// renderedKubeconfigs maps the digest of Kubeconfig's inputs to the digest of
// its output: room for the four kubeconfigs of a thousand Clusters through
// a rotation, some 200 bytes each.
var renderedKubeconfigs = lru.New(1 << 14)
