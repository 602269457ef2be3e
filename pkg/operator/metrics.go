package operator

import (
	"crypto/tls"

	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

// MetricsServerOptions serves the Prometheus metrics on addr ("0" turns them off). Secure serves them over
// HTTPS to clients that present a bearer token
// the API server authenticates and that may get the non-resource URL /metrics; the filter is controller-runtime's,
// on k8s.io/apiserver's delegating authenticator and authorizer, and asks the API server who a scraper is
// (TokenReview) and whether it may get /metrics (SubjectAccessReview), as every Kubernetes component's does. The
// chart grants those two only with secure metrics (ClusterRole <fullname>-metrics-auth), so they are not among the
// RBAC markers. Without secure, plain HTTP to anyone.
//
// The certificate is tls.crt and tls.key of certDir, or else served's, the self-issued webhook certificate when
// there is one (nil otherwise), whose names the chart extends with the metrics Service's: a scraper verifies it
// against the webhook's CA and sends its token only to the manager. Without either, controller-runtime's
// self-signed certificate, which no scraper can verify.
func MetricsServerOptions(addr string, secure bool, certDir string, served func(*tls.ClientHelloInfo) (*tls.Certificate, error)) metricsserver.Options {
	opts := metricsserver.Options{BindAddress: addr}
	if secure {
		opts.SecureServing = true
		opts.FilterProvider = filters.WithAuthenticationAndAuthorization
		opts.CertDir = certDir
		if certDir == "" && served != nil {
			opts.TLSOpts = []func(*tls.Config){func(c *tls.Config) { c.GetCertificate = served }}
		}
	}
	return opts
}
