#!/usr/bin/env bash
# Generates deepcopy functions and the typed client (clientset, listers,
# informers, apply configurations) for the API types with k8s.io/code-generator
# at the version pinned in go.mod. Called by `make generate`.
set -o errexit -o nounset -o pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "${root}"
codegen_dir=$(go list -m -f '{{.Dir}}' k8s.io/code-generator)
# shellcheck source=/dev/null
source "${codegen_dir}/kube_codegen.sh"

module=github.com/carousel-dev/carousel
boilerplate="${root}/hack/boilerplate.go.txt"

kube::codegen::gen_helpers --boilerplate "${boilerplate}" "${root}/apis"

kube::codegen::gen_client \
  --with-watch \
  --with-applyconfig \
  --output-dir "${root}/pkg/client" \
  --output-pkg "${module}/pkg/client" \
  --boilerplate "${boilerplate}" \
  "${root}/apis"
