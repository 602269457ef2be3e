package evidence

import (
	"slices"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	apiregistrationv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
)

func TestAPIServiceLag(t *testing.T) {
	bundle := []byte("bundle")
	service := func(name string, caBundle []byte, insecure bool) apiregistrationv1.APIService {
		return apiregistrationv1.APIService{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: apiregistrationv1.APIServiceSpec{CABundle: caBundle, InsecureSkipTLSVerify: insecure,
				Service: &apiregistrationv1.ServiceReference{Namespace: "kube-system", Name: "metrics-server"}}}
	}
	local := apiregistrationv1.APIService{ObjectMeta: metav1.ObjectMeta{Name: "v1.apps"}}
	tests := []struct {
		name     string
		services []apiregistrationv1.APIService
		behind   []string
	}{
		{"none", nil, nil},
		{"in step", []apiregistrationv1.APIService{service("a", bundle, false)}, nil},
		{"another bundle", []apiregistrationv1.APIService{service("a", []byte("old"), false), service("b", bundle, false)}, []string{"a"}},
		{"no bundle", []apiregistrationv1.APIService{service("a", nil, false)}, []string{"a"}},
		{"verification skipped", []apiregistrationv1.APIService{service("a", bundle, true)}, []string{"a"}},
		{"a local one, served by the API server itself, which may have no caBundle", []apiregistrationv1.APIService{local, service("b", nil, false)}, []string{"b"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := APIServiceLag(tt.services, bundle); !slices.Equal(got, tt.behind) {
				t.Fatalf("APIServiceLag = %v, want %v", got, tt.behind)
			}
		})
	}
}
