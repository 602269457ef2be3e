//go:build tools

// Package tools pins promtool, which `make test-rules` runs on the chart's
// alerting rules. It has a module of its own: the Prometheus module's
// dependency tree (cloud SDKs, Kubernetes client libraries) would otherwise
// move the versions of the tools in hack/tools.
package tools

import (
	_ "github.com/prometheus/prometheus/cmd/promtool"
)
