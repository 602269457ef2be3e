//go:build tools

// Package clusterapi pins Cluster API's core controller manager (Cluster,
// Machine, MachineSet and MachineDeployment controllers and their webhooks),
// which `make envtest` builds for the e2e suite's Replace worker pool. Its
// module carries a replace directive, so `go install` refuses it; built from
// this module instead. Cluster API v1.14 builds on the Kubernetes libraries
// and controller-runtime go.mod pins, so they compile once.
package clusterapi

import _ "sigs.k8s.io/cluster-api/core"
