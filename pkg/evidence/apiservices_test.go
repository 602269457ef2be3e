package evidence

import (
	"slices"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	apiregistrationv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
	"github.com/carousel-dev/carousel/pkg/pki"
	"github.com/carousel-dev/carousel/pkg/pki/pkitest"
)

func TestAPIServiceLag(t *testing.T) {
	old, current, foreign := pkitest.NewCA(t, "old"), pkitest.NewCA(t, "new"), pkitest.NewCA(t, "another issuer")
	both := pki.EncodeCertificates(old.Cert, current.Cert)
	service := func(name string, labelled bool, caBundle []byte, insecure bool) apiregistrationv1.APIService {
		s := apiregistrationv1.APIService{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: apiregistrationv1.APIServiceSpec{CABundle: caBundle, InsecureSkipTLSVerify: insecure,
				Service: &apiregistrationv1.ServiceReference{Namespace: "kube-system", Name: "metrics-server"}}}
		if labelled {
			s.Labels = MetricsServerAPIServices
		}
		return s
	}
	labelled := func(name string, caBundle []byte, insecure bool) apiregistrationv1.APIService {
		return service(name, true, caBundle, insecure)
	}
	unlabelled := func(name string, caBundle []byte, insecure bool) apiregistrationv1.APIService {
		return service(name, false, caBundle, insecure)
	}
	local := apiregistrationv1.APIService{ObjectMeta: metav1.ObjectMeta{Name: "v1.apps", Labels: MetricsServerAPIServices}}
	tests := []struct {
		name     string
		bundle   []byte
		services []apiregistrationv1.APIService
		behind   []string
	}{
		{"none", both, nil, nil},
		{"in step", both, []apiregistrationv1.APIService{labelled("a", both, false)}, nil},
		{"another bundle", both, []apiregistrationv1.APIService{labelled("a", old.CertPEM(), false), labelled("b", both, false)}, []string{"a"}},
		{"no bundle", both, []apiregistrationv1.APIService{labelled("a", nil, false)}, []string{"a"}},
		{"verification skipped", both, []apiregistrationv1.APIService{labelled("a", both, true)}, []string{"a"}},
		{"a local one, served by the API server itself, which may have no caBundle", both,
			[]apiregistrationv1.APIService{local, labelled("b", nil, false)}, []string{"b"}},

		// Not labelled: behind only when its caBundle pins a CA of the
		// bundle without being it, as the aggregator then verifies a
		// certificate Carousel moves.
		{"not labelled, pinning the old CA alone in Preparing", both,
			[]apiregistrationv1.APIService{unlabelled("v1beta1.metrics.k8s.io", old.CertPEM(), false)}, []string{"v1beta1.metrics.k8s.io" + NotLabelled}},
		{"not labelled, keeping the old CA in Finalizing", current.CertPEM(),
			[]apiregistrationv1.APIService{unlabelled("a", both, false)}, []string{"a" + NotLabelled}},
		{"not labelled, pinning the old CA beside a block the aggregator skips", both,
			[]apiregistrationv1.APIService{unlabelled("a", append(old.CertPEM(), "-----BEGIN X509 CRL-----\nAAAA\n-----END X509 CRL-----\n"...), false)},
			[]string{"a" + NotLabelled}},
		{"not labelled, in step beside a block the aggregator skips", both,
			[]apiregistrationv1.APIService{unlabelled("a", append(slices.Clone(both), "-----BEGIN X509 CRL-----\nAAAA\n-----END X509 CRL-----\n"...), false)}, nil},
		{"not labelled, in step", both, []apiregistrationv1.APIService{unlabelled("a", both, false)}, nil},
		{"not labelled, in step with a CA listed twice, which the aggregator trusts once", both,
			[]apiregistrationv1.APIService{unlabelled("a", pki.EncodeCertificates(old.Cert, current.Cert, current.Cert), false)}, nil},
		{"not labelled, in step in another order", both, []apiregistrationv1.APIService{unlabelled("a", pki.EncodeCertificates(current.Cert, old.Cert), false)}, nil},
		{"not labelled, another issuer's CA", both, []apiregistrationv1.APIService{unlabelled("a", foreign.CertPEM(), false)}, nil},
		{"not labelled, verification skipped", both, []apiregistrationv1.APIService{unlabelled("a", old.CertPEM(), true)}, nil},
		{"not labelled, no bundle", both, []apiregistrationv1.APIService{unlabelled("a", nil, false)}, nil},
		{"not labelled, local", both, []apiregistrationv1.APIService{{ObjectMeta: metav1.ObjectMeta{Name: "v1.apps"}}}, nil},
		{"labelled with another role's name is not labelled", both, []apiregistrationv1.APIService{func() apiregistrationv1.APIService {
			s := unlabelled("a", old.CertPEM(), false)
			s.Labels = map[string]string{v1alpha1.LabelCABundle: string(v1alpha1.CARoleCluster)}
			return s
		}()}, []string{"a" + NotLabelled}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := APIServiceLag(tt.services, tt.bundle); !slices.Equal(got, tt.behind) {
				t.Fatalf("APIServiceLag = %v, want %v", got, tt.behind)
			}
		})
	}
}
