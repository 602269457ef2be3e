package credentials

import (
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
func Kubeconfig(clusterName, server string, caBundle, certPEM, keyPEM []byte, user string) ([]byte, error) {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters[clusterName] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: caBundle}
	cfg.AuthInfos[user] = &clientcmdapi.AuthInfo{ClientCertificateData: certPEM, ClientKeyData: keyPEM}
	cfg.Contexts[clusterName] = &clientcmdapi.Context{Cluster: clusterName, AuthInfo: user}
	cfg.CurrentContext = clusterName
	return clientcmd.Write(*cfg)
}
