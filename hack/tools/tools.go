//go:build tools

// Package tools pins the versions of the developer tools; see the Makefile.
package tools

import (
	_ "github.com/golangci/golangci-lint/v2/cmd/golangci-lint"
	_ "github.com/onsi/ginkgo/v2/ginkgo"
	_ "golang.org/x/perf/cmd/benchstat"
	_ "helm.sh/helm/v3/cmd/helm"
	_ "sigs.k8s.io/controller-tools/cmd/controller-gen"
	_ "sigs.k8s.io/krew/cmd/krew"
	_ "sigs.k8s.io/krew/cmd/validate-krew-manifest"
)
