// Package scheme is the runtime scheme every Carousel client uses: the
// Kubernetes built-in types, APIServices (apiregistration.k8s.io/v1, which
// Carousel writes in managed clusters) and carousel.dev/v1alpha1. It sits at the bottom
// of the dependency graph, so that the kubectl plugin and the test framework
// can build clients without importing the controllers.
package scheme

import (
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	apiregistrationv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"

	v1alpha1 "github.com/carousel-dev/carousel/apis/carousel/v1alpha1"
)

// New returns a scheme with the built-in types, apiregistration.k8s.io/v1 and carousel.dev/v1alpha1.
func New() *runtime.Scheme {
	s := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(s))
	utilruntime.Must(apiregistrationv1.AddToScheme(s))
	utilruntime.Must(v1alpha1.AddToScheme(s))
	return s
}
