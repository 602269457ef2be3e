package credentials

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net/url"

	"k8s.io/client-go/rest"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
	"github.com/carousel-dev/carousel/pkg/pki"
)

// RESTConfig is the client configuration for a managed cluster's API server,
// built from data only: the endpoint of the Cluster's spec, the cluster CA
// bundle as the only trust, and a client certificate and key. Nothing else
// reaches the transport: no token, token file, exec or auth-provider plugin,
// file path, proxy URL or insecure flag, whatever a kubeconfig stored beside
// the Cluster says. Those objects are writable by whoever may write the
// Cluster's namespace, and must not decide where the operator (or a user of
// the kubectl plugin) sends credentials or what runs on its machine.
func RESTConfig(endpoint string, caBundle, certPEM, keyPEM []byte) (*rest.Config, error) {
	if endpoint == "" {
		return nil, errors.New("no endpoint")
	}
	if problem := v1alpha1.EndpointProblem(endpoint); problem != "" {
		// The error reaches logs and conditions: an endpoint stored past the
		// webhook, which refuses user information, may carry a password.
		u, err := url.Parse(endpoint)
		if err != nil {
			return nil, errors.New("the endpoint is not a URL")
		}
		return nil, fmt.Errorf("endpoint %q: %s", u.Redacted(), problem)
	}
	if len(caBundle) == 0 {
		return nil, errors.New("no CA bundle to trust the API server with")
	}
	if _, err := pki.ParseCertificates(caBundle); err != nil {
		return nil, fmt.Errorf("CA bundle: %w", err)
	}
	if _, err := tls.X509KeyPair(certPEM, keyPEM); err != nil {
		return nil, fmt.Errorf("client certificate: %w", err)
	}
	return &rest.Config{
		Host: endpoint,
		TLSClientConfig: rest.TLSClientConfig{
			CAData:   caBundle,
			CertData: certPEM,
			KeyData:  keyPEM,
		},
	}, nil
}
