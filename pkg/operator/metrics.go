package operator

import (
	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

// MetricsServerOptions serves the Prometheus metrics on addr ("0" turns them off). Secure serves them over
// HTTPS (a self-signed certificate, or tls.crt and tls.key of certDir) to clients that present a bearer token
// the API server authenticates and that may get the non-resource URL /metrics; the filter is controller-runtime's,
// on k8s.io/apiserver's delegating authenticator and authorizer, and asks the API server who a scraper is
// (TokenReview) and whether it may get /metrics (SubjectAccessReview), as every Kubernetes component's does. The
// chart grants those two only with secure metrics (ClusterRole <fullname>-metrics-auth), so they are not among the
// RBAC markers. Without secure, plain HTTP to anyone.
func MetricsServerOptions(addr string, secure bool, certDir string) metricsserver.Options {
	opts := metricsserver.Options{BindAddress: addr}
	if secure {
		opts.SecureServing = true
		opts.FilterProvider = filters.WithAuthenticationAndAuthorization
		opts.CertDir = certDir
	}
	return opts
}
