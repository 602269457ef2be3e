// Package evidence observes a managed cluster to prove what a rotation phase
// claims: that its API server accepts client certificates from the new client
// CA, rejects those from the old one, and serves a certificate that chains to
// the new cluster CA, and that kube-root-ca.crt, which every pod trusts, is
// the phase's cluster CA bundle in every namespace.
package evidence

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/carousel-dev/carousel/pkg/bounded"
	"github.com/carousel-dev/carousel/pkg/credentials"
	"github.com/carousel-dev/carousel/pkg/pki"
)

// anonymousUser is the name the API server gives an unauthenticated request.
const anonymousUser = "system:anonymous"

// Checker runs the checks with a bounded timeout each.
type Checker struct {
	Timeout time.Duration
}

// ClientAccepted returns nil when the API server at endpoint, verified with
// serverTrust, authenticates a request made with the client key pair as the
// certificate's common name.
func (c Checker) ClientAccepted(ctx context.Context, endpoint string, serverTrust, certPEM, keyPEM []byte) error {
	want, user, err := c.whoAmI(ctx, endpoint, serverTrust, certPEM, keyPEM)
	if err != nil {
		return err
	}
	if user != want {
		return fmt.Errorf("the API server took the client certificate %q for %q", want, user)
	}
	return nil
}

// ClientRejected returns nil when the API server does not authenticate a
// request made with the client key pair: it answers 401, or treats it as anonymous.
func (c Checker) ClientRejected(ctx context.Context, endpoint string, serverTrust, certPEM, keyPEM []byte) error {
	want, user, err := c.whoAmI(ctx, endpoint, serverTrust, certPEM, keyPEM)
	if errors.Is(err, errUnauthorized) || (err == nil && user == anonymousUser) {
		return nil
	}
	if err != nil {
		return err
	}
	return fmt.Errorf("the API server still accepts the client certificate %q (as %q)", want, user)
}

// ServesChainTo returns nil when the API server's serving certificate
// verifies against roots alone.
func (c Checker) ServesChainTo(ctx context.Context, endpoint string, roots []byte) error {
	bundle, err := pki.ParseBundle(roots)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, apiURL(endpoint, "/healthz"), nil)
	if err != nil {
		return err
	}
	resp, err := c.client(&tls.Config{RootCAs: bundle.CertPool(), MinVersion: tls.VersionTLS12}).Do(req)
	var unverified *tls.CertificateVerificationError
	switch {
	case errors.As(err, &unverified):
		return fmt.Errorf("the API server's certificate does not verify against the new cluster CA: %w", err)
	case err != nil:
		// Unreachable, or a replica restarting: nothing said of its certificate.
		return fmt.Errorf("reaching the API server to check its certificate: %w", err)
	}
	_ = resp.Body.Close()
	return nil
}

var errUnauthorized = errors.New("401 Unauthorized")

// whoAmI posts a SelfSubjectReview and returns the certificate's common name
// and the user the API server authenticated.
func (c Checker) whoAmI(ctx context.Context, endpoint string, serverTrust, certPEM, keyPEM []byte) (string, string, error) {
	bundle, err := pki.ParseBundle(serverTrust)
	if err != nil {
		return "", "", err
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return "", "", err
	}
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		return "", "", err
	}
	body, err := json.Marshal(authenticationv1.SelfSubjectReview{})
	if err != nil {
		return "", "", err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, apiURL(endpoint, "/apis/authentication.k8s.io/v1/selfsubjectreviews"), bytes.NewReader(body))
	if err != nil {
		return "", "", err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.client(&tls.Config{RootCAs: bundle.CertPool(), Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}).Do(req)
	if err != nil {
		return leaf.Subject.CommonName, "", err
	}
	defer func() { _ = resp.Body.Close() }()
	payload, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return leaf.Subject.CommonName, "", err
	}
	switch resp.StatusCode {
	case http.StatusUnauthorized:
		return leaf.Subject.CommonName, "", errUnauthorized
	case http.StatusForbidden:
		// Every authenticated user may create a SelfSubjectReview, unless
		// the cluster trimmed system:basic-user; RBAC's refusal names the
		// user it authenticated (anonymous for a certificate it did not).
		var status metav1.Status
		if json.Unmarshal(payload, &status) == nil {
			if user, ok := refusedUser(status.Message); ok {
				return leaf.Subject.CommonName, user, nil
			}
		}
		return leaf.Subject.CommonName, "", fmt.Errorf("self-subject review answered %s: %.200s", resp.Status, payload)
	case http.StatusOK, http.StatusCreated:
	default:
		return leaf.Subject.CommonName, "", fmt.Errorf("self-subject review answered %s: %.200s", resp.Status, payload)
	}
	var review authenticationv1.SelfSubjectReview
	if err := json.Unmarshal(payload, &review); err != nil {
		return leaf.Subject.CommonName, "", fmt.Errorf("decoding the self-subject review: %w", err)
	}
	return leaf.Subject.CommonName, review.Status.UserInfo.Username, nil
}

// apiURL joins an endpoint, which may end in a slash, and an absolute path.
func apiURL(endpoint, path string) string { return strings.TrimSuffix(endpoint, "/") + path }

func (c Checker) client(cfg *tls.Config) *http.Client {
	// The proxy of the environment, as for the checks through client-go.
	return &http.Client{Timeout: c.timeout(), Transport: &http.Transport{TLSClientConfig: cfg, DisableKeepAlives: true, Proxy: http.ProxyFromEnvironment}}
}

// restConfig is a client configuration for the API server at endpoint, as
// the client key pair, bounded by the checker's timeout.
func (c Checker) restConfig(endpoint string, serverTrust, certPEM, keyPEM []byte) (*rest.Config, error) {
	cfg, err := credentials.RESTConfig(endpoint, serverTrust, certPEM, keyPEM)
	if err != nil {
		return nil, err
	}
	cfg.Timeout = c.timeout()
	cfg.Wrap(bounded.Responses)
	return cfg, nil
}

// clientset is a clientset for the API server at endpoint, as the client key
// pair (restConfig).
func (c Checker) clientset(endpoint string, serverTrust, certPEM, keyPEM []byte) (kubernetes.Interface, error) {
	cfg, err := c.restConfig(endpoint, serverTrust, certPEM, keyPEM)
	if err != nil {
		return nil, err
	}
	return kubernetes.NewForConfig(cfg)
}

func (c Checker) timeout() time.Duration {
	if c.Timeout == 0 {
		return 10 * time.Second
	}
	return c.Timeout
}

// refusedUser is the user an RBAC refusal's message names
// (`... is forbidden: User "<name>" cannot create resource ...`).
func refusedUser(message string) (string, bool) {
	_, rest, ok := strings.Cut(message, `forbidden: User "`)
	if !ok {
		return "", false
	}
	user, _, ok := strings.Cut(rest, `" cannot `)
	return user, ok
}
