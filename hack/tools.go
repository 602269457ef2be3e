//go:build tools

// Package hack keeps k8s.io/code-generator in go.mod so that `make generate`
// runs kube_codegen.sh at exactly the version the API types are built with.
package hack

import _ "k8s.io/code-generator"
