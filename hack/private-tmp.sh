#!/usr/bin/env bash
# private-tmp.sh runs a command with a /tmp of its own: a tmpfs mounted over
# /tmp in a mount namespace of its own. What a test suite writes there (etcd's
# data, keys, kubeconfigs, logs, go test's binaries) goes with the namespace
# when its last process ends, even when the run is killed and no cleanup runs;
# the host's /tmp is not written. What the command needs of the host's /tmp,
# a checkout there (the working directory's) and Go's toolchain and caches,
# stays as it is: bound into the new /tmp at the same paths, with what is
# mounted below them; a TMPDIR or GOTMPDIR set under /tmp is made again, empty
# (one set elsewhere becomes /tmp).
# The caches kubectl, envtest and helm keep under $HOME are moved into it.
#
# The command runs as it is with PRIVATE_TMP=0 (to keep a failed run's files
# for a look), inside another private /tmp, and where no mount namespace can
# be made (not root, no unshare), which it says.
set -o errexit -o nounset -o pipefail

if [[ ${1:-} == --in-namespace ]]; then
  shift
  # What the command needs of the host's /tmp: the working directory (a
  # checkout) and Go's toolchain and caches, by their real paths. Go's caches
  # are made first when missing, as go would make them.
  physical=$(pwd -P)
  needed=("${physical}")
  read -r -d '' gocache gomodcache gopath goroot < <(go env GOCACHE GOMODCACHE GOPATH GOROOT 2>/dev/null; printf '\0') || true
  for path in "${gocache:-}" "${gomodcache:-}"; do
    if [[ ${path} == /tmp/?* ]]; then mkdir -p "${path}"; fi
  done
  IFS=: read -r -a gopaths <<<"${gopath:-}"
  for path in "${gocache:-}" "${gomodcache:-}" "${goroot:-}" "${gopaths[@]}"; do
    if [[ -e ${path} ]]; then needed+=("$(realpath "${path}")"); fi
  done
  # Each top-level entry of the host's /tmp that holds one is opened before
  # the tmpfs covers it, and bound back, with what is mounted below it,
  # through the open descriptor (mount must not resolve the path again: it
  # would find the tmpfs).
  declare -A kept=()
  for path in "${needed[@]}"; do
    [[ ${path} == /tmp/?* ]] || continue
    entry=${path#/tmp/}
    entry=/tmp/${entry%%/*}
    if [[ -z ${kept[${entry}]:-} ]]; then
      exec {fd}<"${entry}"
      kept[${entry}]=${fd}
    fi
  done
  mount -t tmpfs -o mode=1777 carousel-tmp /tmp
  for entry in "${!kept[@]}"; do
    fd=${kept[${entry}]}
    mkdir "${entry}"
    mount --no-canonicalize --rbind "/proc/self/fd/${fd}" "${entry}"
    exec {fd}<&-
  done
  # A temporary directory set under /tmp is made again, empty, in the new
  # one; one set elsewhere (on the host's disk, where a killed run would
  # leave its files) is replaced by /tmp.
  for var in TMPDIR GOTMPDIR; do
    dir=${!var:-}
    if [[ ${dir} == /tmp/?* ]]; then
      mkdir -p "${dir}"
    elif [[ -n ${dir} && ${dir} != /tmp ]]; then
      export "${var}=/tmp"
    fi
  done
  # Caches the tools write under $HOME go into the new /tmp too: kubectl's
  # discovery and HTTP caches (KUBECACHEDIR, else ~/.kube/cache) and the
  # user cache directory (XDG_CACHE_HOME, else ~/.cache), where envtest
  # reserves its ports and helm caches. Go's caches stay where go env found
  # them.
  if [[ -n ${gocache:-} ]]; then export GOCACHE=${gocache}; fi
  if [[ -n ${gomodcache:-} ]]; then export GOMODCACHE=${gomodcache}; fi
  export KUBECACHEDIR=/tmp/kube-cache XDG_CACHE_HOME=/tmp/cache
  cd "${PWD}" 2>/dev/null || cd "${physical}"
  exec "$@"
fi

if [[ ${PRIVATE_TMP:-1} == 0 || -n ${CAROUSEL_PRIVATE_TMP:-} ]]; then
  exec "$@"
fi
if ! unshare --mount --propagation private -- true 2>/dev/null; then
  echo "private-tmp: no mount namespace can be made here; the command writes to the host's /tmp" >&2
  exec "$@"
fi
export CAROUSEL_PRIVATE_TMP=1
exec unshare --mount --propagation private -- "${BASH_SOURCE[0]}" --in-namespace "$@"
