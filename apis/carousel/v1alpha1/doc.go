// Package v1alpha1 holds the carousel.dev/v1alpha1 API: the Cluster kind whose
// certificate authorities Carousel owns and rotates, the names users rely on
// (annotation, phases, labels, CA roles), and the pure validation functions the
// admission webhook calls.
//
// +k8s:deepcopy-gen=package
// +groupName=carousel.dev
package v1alpha1
