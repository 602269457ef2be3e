#!/usr/bin/env bash
# Builds the test control plane (kube-apiserver, kube-controller-manager,
# kube-scheduler, kubectl, the kubelet, etcd, metrics-server (the aggregated
# API server), the konnectivity proxy server and agent, and Cluster API's core
# controller manager with its CRDs and webhook manifests (cluster-api/)) from
# upstream source through the Go module proxy into $1 (default bin/k8s), with fake-cri,
# our CRI server for the kubelet (hack/envtest/kube/cmd/fake-cri), and the sharder of
# kubernetes-controller-sharding with its CRD (hack/envtest/sharder). The versions
# are the ones pinned in hack/envtest/*/go.mod; a stamp file records what was
# built (and a digest of fake-cri's source), so a second run with the same pins
# does nothing. Called by `make envtest`.
set -o errexit -o nounset -o pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# Absolute, since the builds run in the modules' directories.
out=$(realpath -m "${1:-${root}/bin/k8s}")
kube_mod=${root}/hack/envtest/kube
etcd_mod=${root}/hack/envtest/etcd
konnectivity_mod=${root}/hack/envtest/konnectivity
metrics_server_mod=${root}/hack/envtest/metrics-server
cluster_api_mod=${root}/hack/envtest/cluster-api

pinned() { awk -v m="$1" '$1 == "require" && $2 == m { print $3 } $1 == m { print $2 }' "$2/go.mod" | head -n 1; }
kube_version=$(pinned k8s.io/kubernetes "${kube_mod}")
etcd_version=$(pinned go.etcd.io/etcd/server/v3 "${etcd_mod}")
konnectivity_version=$(pinned sigs.k8s.io/apiserver-network-proxy "${konnectivity_mod}")
metrics_server_version=$(pinned sigs.k8s.io/metrics-server "${metrics_server_mod}")
cluster_api_version=$(pinned sigs.k8s.io/cluster-api "${cluster_api_mod}")
[[ -n ${kube_version} && -n ${etcd_version} && -n ${konnectivity_version} && -n ${metrics_server_version} && -n ${cluster_api_version} ]] ||
  { echo "envtest: cannot read the pinned versions" >&2; exit 1; }

# The sharder of kubernetes-controller-sharding (hack/envtest/sharder: upstream's parts, our wiring) and its
# ControllerRing CRD (sharding/crds), for the sharding suite; a stamp of its own, so that adding or moving it
# never rebuilds the control plane.
sharder_mod=${root}/hack/envtest/sharder
sharder_want="sharding=$(pinned github.com/timebertt/kubernetes-controller-sharding "${sharder_mod}") go=$(go env GOVERSION) main=$(cat "${sharder_mod}/main.go" "${sharder_mod}/go.sum" | sha256sum | cut -c1-12)"
if [[ -x ${out}/sharder && -d ${out}/sharding/crds && -f ${out}/.sharder-version && $(cat "${out}/.sharder-version") == "${sharder_want}" ]]; then
  echo "envtest: ${sharder_want} already in ${out}"
else
  echo "envtest: building the sharder (${sharder_want})"
  mkdir -p "${out}"
  (cd "${sharder_mod}" && go build -trimpath -ldflags "-s -w" -o "${out}/sharder" .)
  sharding_src=$(cd "${sharder_mod}" && go list -m -f '{{.Dir}}' github.com/timebertt/kubernetes-controller-sharding)
  rm -rf "${out}/sharding"
  mkdir -p "${out}/sharding/crds"
  cp "${sharding_src}"/config/crds/sharding.timebertt.dev_*.yaml "${out}/sharding/crds/"
  chmod -R u+w "${out}/sharding"
  echo "${sharder_want}" > "${out}/.sharder-version"
fi

stamp="${out}/.versions"
fake_cri=$(cat "${kube_mod}"/cmd/fake-cri/*.go "${kube_mod}/go.sum" | sha256sum | cut -c1-12)
want="kubernetes=${kube_version} etcd=${etcd_version} konnectivity=${konnectivity_version} metrics-server=${metrics_server_version} cluster-api=${cluster_api_version} go=$(go env GOVERSION) fake-cri=${fake_cri}"
binaries=(kube-apiserver kube-controller-manager kube-scheduler kubectl kubelet fake-cri etcd metrics-server
  konnectivity-server konnectivity-agent cluster-api-manager)
have_all=true
for b in "${binaries[@]}"; do [[ -x ${out}/${b} ]] || have_all=false; done
[[ -d ${out}/cluster-api/crds && -f ${out}/cluster-api/webhook/manifests.yaml ]] || have_all=false
if ${have_all} && [[ -f ${stamp} && $(cat "${stamp}") == "${want}" ]]; then
  echo "envtest: ${want} already in ${out}"
  exit 0
fi

mkdir -p "${out}"
rm -f "${stamp}"
start=${SECONDS}
# Version information the binaries report (kubectl version, /version, the
# emulation version of feature gates). Without it they call themselves v0.0.0.
minor=${kube_version#v1.}; minor=${minor%%.*}
ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ldflags+=" -X ${pkg}.gitVersion=${kube_version} -X ${pkg}.gitMajor=1 -X ${pkg}.gitMinor=${minor}"
  ldflags+=" -X ${pkg}.gitTreeState=clean -X ${pkg}.buildDate=1970-01-01T00:00:00Z"
done
# One invocation, so that the packages these commands share are compiled once.
echo "envtest: building kube-apiserver, kube-controller-manager, kube-scheduler, kubectl, kubelet" \
  "${kube_version} and fake-cri (a few minutes on a cold cache)"
(cd "${kube_mod}" && go build -trimpath -ldflags "${ldflags}" -o "${out}/" \
  k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
  k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubectl k8s.io/kubernetes/cmd/kubelet ./cmd/fake-cri)
echo "envtest: building etcd ${etcd_version}"
(cd "${etcd_mod}" && go build -trimpath -ldflags "-s -w" -o "${out}/etcd" go.etcd.io/etcd/server/v3)
echo "envtest: building metrics-server ${metrics_server_version}"
(cd "${metrics_server_mod}" && go build -trimpath -ldflags "-s -w" -o "${out}/" sigs.k8s.io/metrics-server/cmd/metrics-server)
# Upstream names the commands server and agent; the second build reuses the
# packages compiled by the first and only links.
echo "envtest: building konnectivity-server and konnectivity-agent ${konnectivity_version}"
for cmd in server agent; do
  (cd "${konnectivity_mod}" && go build -trimpath -ldflags "-s -w" -o "${out}/konnectivity-${cmd}" \
    "sigs.k8s.io/apiserver-network-proxy/cmd/${cmd}")
done
echo "envtest: building Cluster API's core controller manager ${cluster_api_version}"
(cd "${cluster_api_mod}" && go build -trimpath -ldflags "-s -w" -o "${out}/cluster-api-manager" sigs.k8s.io/cluster-api/core)
# Its CRDs and webhook manifests, as the release ships them before kustomize
# points them at a Service (the e2e framework points them at the process).
capi_src=$(cd "${cluster_api_mod}" && go list -m -f '{{.Dir}}' sigs.k8s.io/cluster-api)
rm -rf "${out}/cluster-api"
mkdir -p "${out}/cluster-api/crds" "${out}/cluster-api/webhook"
cp "${capi_src}"/core/config/crd/bases/*.yaml "${out}/cluster-api/crds/"
cp "${capi_src}/core/config/webhook/manifests.yaml" "${out}/cluster-api/webhook/"
chmod -R u+w "${out}/cluster-api"
echo "${want}" > "${stamp}"
echo "envtest: built ${want} into ${out} in $((SECONDS - start))s"
