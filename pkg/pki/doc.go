// Package pki is Carousel's certificate toolkit: private keys, self-signed
// certificate authorities, leaf certificates, trust bundles, fingerprints and
// chain verification. It is pure crypto over the standard library and knows
// nothing of Kubernetes; every function that depends on the time takes it as
// an argument.
package pki
