package credentials

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"

	"github.com/prometheus/client_golang/prometheus/promhttp"
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

// MaxResponseBytes bounds each answer of a managed API server, whose
// address a tenant writes (spec.controlPlane.endpoint) and may point at a
// server of its own: a page of 500 objects, or every APIService of a
// cluster, takes a few MiB.
const MaxResponseBytes = 16 << 20

// BoundResponses fails the read of a response body past MaxResponseBytes:
// for one-shot reads of a managed API server (a watch's body is longer).
func BoundResponses(next http.RoundTripper) http.RoundTripper {
	return promhttp.RoundTripperFunc(func(req *http.Request) (*http.Response, error) {
		resp, err := next.RoundTrip(req)
		if err == nil {
			resp.Body = &boundedBody{ReadCloser: resp.Body, left: MaxResponseBytes}
		}
		return resp, err
	})
}

// boundedBody is a response body that fails a read past left bytes, with an
// error that says so (io.LimitReader would end it quietly, as if complete;
// http.MaxBytesReader's error speaks of a request body).
type boundedBody struct {
	io.ReadCloser
	left int64
}

func (b *boundedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if b.left -= int64(n); b.left < 0 {
		return 0, fmt.Errorf("the API server's answer is larger than %d MiB", MaxResponseBytes>>20)
	}
	return n, err
}
