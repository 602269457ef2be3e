package nodeagent

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/carousel-dev/carousel/pkg/bootstrap"
)

// kubeconfigInfo is what the agent uses of a kubeconfig: the API server, the
// trust bundle, and the client key pair's files (absolute).
type kubeconfigInfo struct {
	Server, ClientCertificate, ClientKey string
	CA                                   []byte
	// Insecure: the kubeconfig skips the verification of the server
	// (insecure-skip-tls-verify).
	Insecure bool
	// TLSServerName and ProxyURL, which the agent's requests do not apply
	// (the kubelet writes neither into the kubeconfig it bootstraps).
	TLSServerName, ProxyURL string
}

// readKubeconfig reads the current context of the kubeconfig at path. A
// certificate-authority file is read; relative paths are relative to the
// kubeconfig's directory, as for clientcmd.
func readKubeconfig(path string) (kubeconfigInfo, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return kubeconfigInfo{}, err
	}
	cfg, err := clientcmd.Load(data)
	if err != nil {
		return kubeconfigInfo{}, fmt.Errorf("%s: %w", path, err)
	}
	name, cluster, err := bootstrap.CurrentCluster(cfg)
	if err != nil {
		return kubeconfigInfo{}, fmt.Errorf("%s: %w", path, err)
	}
	resolve := func(p string) string {
		if p == "" || filepath.IsAbs(p) {
			return p
		}
		return filepath.Join(filepath.Dir(path), p)
	}
	info := kubeconfigInfo{Server: cluster.Server, CA: cluster.CertificateAuthorityData, Insecure: cluster.InsecureSkipTLSVerify,
		TLSServerName: cluster.TLSServerName, ProxyURL: cluster.ProxyURL}
	if len(info.CA) == 0 && cluster.CertificateAuthority != "" {
		if info.CA, err = os.ReadFile(resolve(cluster.CertificateAuthority)); err != nil {
			return kubeconfigInfo{}, fmt.Errorf("%s: cluster %s: %w", path, name, err)
		}
	}
	if ctx := cfg.Contexts[cfg.CurrentContext]; ctx != nil {
		if user := cfg.AuthInfos[ctx.AuthInfo]; user != nil {
			info.ClientCertificate, info.ClientKey = resolve(user.ClientCertificate), resolve(user.ClientKey)
		}
	}
	return info, nil
}

// bootstrapConfig loads the bootstrap kubeconfig at path, as clientcmd
// does. It is copied from a Secret the Cluster's tenant writes, and the
// agent runs as root: a user in it may hold a token, certificate data and a
// CA, but no credential plugin (exec, auth-provider), which would run a
// command as root, and no file of credentials (tokenFile,
// client-certificate, client-key), which root would open where the tenant
// says and send on to a server the tenant names. Every user is judged, not
// only the current context's (clientcmd picks one named "" when there is no
// context), and before clientcmd opens any file the kubeconfig names. A
// Carousel bootstrap kubeconfig holds a token.
func bootstrapConfig(path string) (*rest.Config, error) {
	raw, err := (&clientcmd.ClientConfigLoadingRules{ExplicitPath: path}).Load()
	if err != nil {
		return nil, err
	}
	for _, name := range slices.Sorted(maps.Keys(raw.AuthInfos)) {
		user := raw.AuthInfos[name]
		var refused []string
		for _, field := range []struct {
			what string
			set  bool
		}{
			{"a credential plugin (exec)", user.Exec != nil}, {"a credential plugin (auth-provider)", user.AuthProvider != nil},
			{"a token file", user.TokenFile != ""}, {"a client certificate file", user.ClientCertificate != ""}, {"a client key file", user.ClientKey != ""},
		} {
			if field.set {
				refused = append(refused, field.what)
			}
		}
		if len(refused) > 0 {
			return nil, fmt.Errorf("%s: user %q names %s, which the node agent does not use from a bootstrap kubeconfig (it holds a bootstrap token)",
				path, name, strings.Join(refused, ", "))
		}
	}
	return clientcmd.NewNonInteractiveClientConfig(*raw, raw.CurrentContext, &clientcmd.ConfigOverrides{}, nil).ClientConfig()
}

// kubeconfigServer is the server of the kubeconfig at path (of its current
// context's cluster), without reading the files it names.
func kubeconfigServer(path string) (string, error) {
	cfg, err := clientcmd.LoadFromFile(path)
	if err != nil {
		return "", err
	}
	_, cluster, err := bootstrap.CurrentCluster(cfg)
	if err != nil {
		return "", fmt.Errorf("%s: %w", path, err)
	}
	return cluster.Server, nil
}

// withCertificateAuthority returns the kubeconfig data with ca as the
// certificate-authority-data of the current context's cluster, and whether
// that changed anything. A certificate-authority file reference is dropped
// (clientcmd refuses both), and so is insecure-skip-tls-verify (clientcmd
// refuses it with a CA; ca verified the server). Everything else is kept,
// though the kubeconfig is written anew (clientcmd's order and formatting,
// no comments).
func withCertificateAuthority(data, ca []byte) ([]byte, bool, error) {
	if len(ca) == 0 {
		return nil, false, errors.New("an empty trust bundle")
	}
	cfg, err := clientcmd.Load(data)
	if err != nil {
		return nil, false, err
	}
	_, cluster, err := bootstrap.CurrentCluster(cfg)
	if err != nil {
		return nil, false, err
	}
	if string(cluster.CertificateAuthorityData) == string(ca) && cluster.CertificateAuthority == "" && !cluster.InsecureSkipTLSVerify {
		return data, false, nil
	}
	cluster.CertificateAuthorityData, cluster.CertificateAuthority, cluster.InsecureSkipTLSVerify = ca, "", false
	out, err := clientcmd.Write(*cfg)
	if err != nil {
		return nil, false, err
	}
	return out, true, nil
}
