package evidence

import (
	"bytes"
	"context"
	"fmt"

	apiregistrationv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
	"github.com/carousel-dev/carousel/pkg/scheme"
)

// MetricsServerAPIServices selects, in a managed cluster, the APIServices
// whose caBundle Carousel keeps equal to the metrics-server CA bundle: the
// role that signs aggregated API servers' serving certificates.
var MetricsServerAPIServices = client.MatchingLabels{v1alpha1.LabelCABundle: string(v1alpha1.CARoleMetricsServer)}

// APIServicesBehind lists the APIServices MetricsServerAPIServices selects
// in the managed cluster at endpoint whose caBundle is not want (see
// APIServiceLag). It reads as the client key pair, verifying the API server
// with serverTrust.
func (c Checker) APIServicesBehind(ctx context.Context, endpoint string, serverTrust, certPEM, keyPEM, want []byte) ([]string, error) {
	cfg, err := c.restConfig(endpoint, serverTrust, certPEM, keyPEM)
	if err != nil {
		return nil, err
	}
	cl, err := client.New(cfg, client.Options{Scheme: scheme.New()})
	if err != nil {
		return nil, err
	}
	var list apiregistrationv1.APIServiceList
	if err := cl.List(ctx, &list, MetricsServerAPIServices); err != nil {
		return nil, fmt.Errorf("listing APIServices: %w", err)
	}
	return APIServiceLag(list.Items, want), nil
}

// APIServiceLag names, in order, the APIServices that are APIServiceBehind bundle.
func APIServiceLag(services []apiregistrationv1.APIService, bundle []byte) []string {
	var behind []string
	for i := range services {
		if APIServiceBehind(&services[i], bundle) {
			behind = append(behind, services[i].Name)
		}
	}
	return behind
}

// APIServiceBehind reports whether an APIService's caBundle is not exactly
// bundle, or whether it skips verifying its server altogether (the
// aggregator then ignores the caBundle). A local APIService (no service),
// which the API server serves itself and which may not have a caBundle,
// is never behind.
func APIServiceBehind(s *apiregistrationv1.APIService, bundle []byte) bool {
	return s.Spec.Service != nil && (!bytes.Equal(s.Spec.CABundle, bundle) || s.Spec.InsecureSkipTLSVerify)
}
