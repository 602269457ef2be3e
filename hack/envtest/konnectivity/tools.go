//go:build tools

// Package konnectivity pins the upstream konnectivity proxy server and agent
// that `make envtest` builds.
package konnectivity

import (
	_ "sigs.k8s.io/apiserver-network-proxy/cmd/agent"
	_ "sigs.k8s.io/apiserver-network-proxy/cmd/server"
)
