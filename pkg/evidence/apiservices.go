package evidence

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"slices"

	apiregistrationv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
	"github.com/carousel-dev/carousel/pkg/pki"
	"github.com/carousel-dev/carousel/pkg/scheme"
)

// MetricsServerAPIServices selects, in a managed cluster, the APIServices
// whose caBundle Carousel keeps equal to the metrics-server CA bundle: the
// role that signs aggregated API servers' serving certificates.
var MetricsServerAPIServices = client.MatchingLabels{v1alpha1.LabelCABundle: string(v1alpha1.CARoleMetricsServer)}

// APIServicesBehind lists the APIServices of the managed cluster at endpoint
// that lag behind want (see APIServiceLag). It reads as the client key pair,
// verifying the API server with serverTrust.
func (c Checker) APIServicesBehind(ctx context.Context, endpoint string, serverTrust, certPEM, keyPEM, want []byte) ([]string, error) {
	cfg, err := c.restConfig(endpoint, serverTrust, certPEM, keyPEM)
	if err != nil {
		return nil, err
	}
	cl, err := client.New(cfg, client.Options{Scheme: scheme.New()})
	if err != nil {
		return nil, err
	}
	// All of them, not only the labelled ones: see APIServiceLag.
	var list apiregistrationv1.APIServiceList
	if err := cl.List(ctx, &list); err != nil {
		return nil, fmt.Errorf("listing APIServices: %w", err)
	}
	return APIServiceLag(list.Items, want), nil
}

// APIServiceLag names, in order, the APIServices that lag behind bundle:
// those MetricsServerAPIServices selects that are APIServiceBehind it, and,
// with the suffix NotLabelled, those it does not select that pin a CA of
// bundle (pinsPartOf). The aggregator verifies the latter's server with a
// caBundle that trusts the metrics-server CA, so the server's certificate
// is one Carousel issues and moves with the rotation, but nothing brings the
// caBundle in step: once the certificate moves to the new CA, the aggregator
// refuses the server (kubectl top and autoscaling stop). The user labels
// them, and Carousel writes them as it does the others.
func APIServiceLag(services []apiregistrationv1.APIService, bundle []byte) []string {
	want, _ := pki.ParseBundle(bundle)
	var behind []string
	for i := range services {
		s := &services[i]
		if s.Labels[v1alpha1.LabelCABundle] == string(v1alpha1.CARoleMetricsServer) {
			if APIServiceBehind(s, bundle) {
				behind = append(behind, s.Name)
			}
			continue
		}
		if pinsPartOf(s, want) {
			behind = append(behind, s.Name+NotLabelled)
		}
	}
	return behind
}

// NotLabelled follows, in APIServiceLag, the name of an APIService that
// lags behind without the label that has Carousel write its caBundle.
const NotLabelled = " (not labelled " + v1alpha1.LabelCABundle + "=" + string(v1alpha1.CARoleMetricsServer) + ")"

// pinsPartOf reports whether an APIService verifies its server with a
// caBundle that holds one of the CAs of want but not exactly them, in
// whatever order or PEM layout, as the aggregator reads it (trustedBy).
func pinsPartOf(s *apiregistrationv1.APIService, want pki.Bundle) bool {
	if s.Spec.Service == nil || s.Spec.InsecureSkipTLSVerify {
		return false
	}
	pinned := trustedBy(s.Spec.CABundle)
	return !sameBundle(pinned, want) && slices.ContainsFunc(want, pinned.Contains)
}

// trustedBy is what a verifier trusts of the PEM caBundle: its certificates,
// as x509.CertPool.AppendCertsFromPEM takes them, skipping any other block
// and any certificate that does not parse (pki.ParseBundle refuses the
// whole bundle for one such block, where the aggregator still trusts the
// rest), each once.
func trustedBy(caBundle []byte) pki.Bundle {
	var trusted []*x509.Certificate
	for rest := caBundle; ; {
		var block *pem.Block
		if block, rest = pem.Decode(rest); block == nil {
			return pki.NewBundle(trusted...)
		}
		if block.Type != "CERTIFICATE" || len(block.Headers) != 0 {
			continue
		}
		if cert, err := x509.ParseCertificate(block.Bytes); err == nil {
			trusted = append(trusted, cert)
		}
	}
}

// APIServiceBehind reports whether an APIService's caBundle is not exactly
// bundle, or whether it skips verifying its server altogether (the
// aggregator then ignores the caBundle). A local APIService (no service),
// which the API server serves itself and which may not have a caBundle,
// is never behind.
func APIServiceBehind(s *apiregistrationv1.APIService, bundle []byte) bool {
	return s.Spec.Service != nil && (!bytes.Equal(s.Spec.CABundle, bundle) || s.Spec.InsecureSkipTLSVerify)
}
