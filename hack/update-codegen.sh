#!/usr/bin/env bash
# Generates deepcopy functions and the typed client (clientset, listers,
# informers, apply configurations) for the API types with k8s.io/code-generator
# at the version pinned in go.mod. Called by `make generate`.
set -o errexit -o nounset -o pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "${root}"
# `go list -m` names a module's directory only once the module is in the module
# cache, and no build downloads code-generator (only hack/tools.go imports it,
# behind the tools build tag): download it first, a no-op when it is there.
go mod download k8s.io/code-generator
codegen_dir=$(go list -m -f '{{.Dir}}' k8s.io/code-generator)
if [[ ! -f "${codegen_dir}/kube_codegen.sh" ]]; then
  echo "update-codegen: no kube_codegen.sh in k8s.io/code-generator's module directory '${codegen_dir}'" >&2
  exit 1
fi
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
