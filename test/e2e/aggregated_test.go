package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"

	"k8s.io/client-go/kubernetes"
)

// metricsPath lists the nodes' metrics, which the aggregator proxies to
// metrics-server.
const metricsPath = "/apis/metrics.k8s.io/v1beta1/nodes"

// readNodeMetrics is the aggregated API probe's request: the API server
// proxies it to metrics-server with its front-proxy client certificate,
// verifying metrics-server's serving certificate with the APIService's
// caBundle; metrics-server authenticates the API server through the
// front-proxy CA and has scraped the kubelets over their serving
// certificates.
func readNodeMetrics(ctx context.Context, cs kubernetes.Interface) error {
	_, err := nodeMetrics(ctx, cs)
	return err
}

// nodeMetrics lists the nodes' metrics through the aggregator and returns the
// names of the nodes it has metrics of.
func nodeMetrics(ctx context.Context, cs kubernetes.Interface) ([]string, error) {
	body, err := cs.CoreV1().RESTClient().Get().AbsPath(metricsPath).DoRaw(ctx)
	if err != nil {
		return nil, fmt.Errorf("%w: %.300s", err, body)
	}
	var list struct {
		Kind  string `json:"kind"`
		Items []struct {
			Metadata struct {
				Name string `json:"name"`
			} `json:"metadata"`
		} `json:"items"`
	}
	if err := json.Unmarshal(body, &list); err != nil {
		return nil, fmt.Errorf("reading the NodeMetricsList: %w: %.300s", err, body)
	}
	if list.Kind != "NodeMetricsList" {
		return nil, fmt.Errorf("not a NodeMetricsList: %.300s", body)
	}
	names := make([]string, 0, len(list.Items))
	for _, item := range list.Items {
		names = append(names, item.Metadata.Name)
	}
	return names, nil
}

// servedCertificate is the certificate a server in the network namespace
// serves. It needs no client certificate even from a server that asks for
// one: with TLS 1.3 the client's side of the handshake ends before the
// server checks it.
func servedCertificate(ctx context.Context, address string) (*x509.Certificate, error) {
	conn, err := env.Netns.DialContext(ctx, "tcp", address)
	if err != nil {
		return nil, err
	}
	tlsConn := tls.Client(conn, &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // reads the certificate; the caller verifies it
	defer func() { _ = tlsConn.Close() }()
	if err := tlsConn.HandshakeContext(ctx); err != nil {
		return nil, err
	}
	return tlsConn.ConnectionState().PeerCertificates[0], nil
}

// metricsServerRuns reports whether the environment runs metrics-server; an
// existing management cluster's managed clusters are not ours to look into.
func metricsServerRuns() bool { return env != nil && env.ControlPlane.MetricsServer }
