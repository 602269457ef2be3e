package v1alpha1

import (
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// SchemeGroupVersion is the group and version of the output kinds.
var SchemeGroupVersion = schema.GroupVersion{Group: "output.carousel.dev", Version: "v1alpha1"}

var (
	// SchemeBuilder registers the output kinds with a scheme.
	SchemeBuilder = runtime.NewSchemeBuilder(func(scheme *runtime.Scheme) error {
		scheme.AddKnownTypes(SchemeGroupVersion, &RotationPlan{}, &CertificateExpirationInfo{})
		return nil
	})
	// AddToScheme adds the output kinds to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)
