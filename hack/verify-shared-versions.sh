#!/usr/bin/env bash
# Fails when the module that builds the test control plane (hack/envtest/kube)
# requires a module at another version than the main module builds with. The
# Kubernetes libraries both compile (client-go, apiserver, ...) then compile
# once on a cold build cache, since both builds use -trimpath; a version apart
# in any of their dependencies compiles them all twice. Called by `make verify`.
set -o errexit -o nounset -o pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
kube=${root}/hack/envtest/kube

# The main module's build list, then the kube module's requirements (replaced
# versions win, as for the k8s.io staging modules).
declare -A main_version
while read -r path version; do main_version[${path}]=${version}; done < <(cd "${root}" && go list -m -f '{{.Path}} {{.Version}}' all)
status=0
while read -r path version; do
  want=${main_version[${path}]:-}
  if [[ -n ${want} && ${want} != "${version}" ]]; then
    echo "hack/envtest/kube requires ${path} ${version}; go.mod builds with ${want}" >&2
    status=1
  fi
done < <(awk '
  $1 == "replace" && $3 == "=>" { replaced[$2] = $5; next }
  $1 == "require" && $2 != "(" { required[$2] = $3; next }
  $1 == "require" || $1 == "replace" { block = $1; next }
  $1 == ")" { block = ""; next }
  block == "require" { required[$1] = $2 }
  block == "replace" && $2 == "=>" { replaced[$1] = $4 }
  END { for (m in required) print m, (m in replaced ? replaced[m] : required[m]) }' "${kube}/go.mod")
if (( status != 0 )); then
  echo "align them: cd hack/envtest/kube && go get <module>@<version> && go mod tidy (or the other way round in go.mod)" >&2
  exit 1
fi
echo "the control plane's module requires the versions go.mod builds with"
