// Package v1alpha1 holds the output.carousel.dev/v1alpha1 kinds: what `kubectl carousel` prints with -o json or
// -o yaml for what it computes rather than reads (a rotation's plan, certificate expiration), versioned so that
// scripts can rely on their fields. They are never stored in an API server.
//
// +k8s:deepcopy-gen=package
// +groupName=output.carousel.dev
package v1alpha1
