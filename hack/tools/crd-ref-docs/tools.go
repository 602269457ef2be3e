//go:build tools

// Package tools pins crd-ref-docs, which `make generate` runs to write the API
// reference (docs/reference/api.md) from the API types. It has a module of its
// own: its dependencies would move the versions of the tools in hack/tools.
package tools

import (
	_ "github.com/elastic/crd-ref-docs"
)
