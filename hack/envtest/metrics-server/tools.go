//go:build tools

// Package metricsserver pins metrics-server, the aggregated API server of the
// test clusters, which `make envtest` builds. It is a module of its own
// because it requires newer versions of libraries the Kubernetes commands
// share (gRPC, kube-openapi, the konnectivity client) than Kubernetes v1.36.3
// pins; in one module those would change what the control plane is built from.
package metricsserver

import _ "sigs.k8s.io/metrics-server/cmd/metrics-server"
