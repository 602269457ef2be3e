#!/usr/bin/env bash
# private-tmp.sh runs a command with a /tmp of its own: a tmpfs mounted over
# /tmp in a mount namespace of its own. What a test suite writes there (etcd's
# data, keys, kubeconfigs, logs, go test's binaries) goes with the namespace
# when its last process ends, even when the run is killed and no cleanup runs;
# the host's /tmp is not written. What the command needs of the host's /tmp,
# a checkout there (the working directory's) and Go's caches, stays as it is:
# bound into the new /tmp at the same paths.
#
# The command runs as it is with PRIVATE_TMP=0 (to keep a failed run's files
# for a look), inside another private /tmp, and where no mount namespace can
# be made (not root, no unshare), which it says.
set -o errexit -o nounset -o pipefail

if [[ ${1:-} == --in-namespace ]]; then
  shift
  # Each top-level entry of the host's /tmp that holds a path the command
  # needs is opened before the tmpfs covers it, and bound back through the
  # open descriptor (mount must not resolve the path again: it would find
  # the tmpfs).
  declare -A kept=()
  for path in "${PWD}" $(go env GOCACHE GOMODCACHE GOPATH 2>/dev/null || true); do
    [[ ${path} == /tmp/?* ]] || continue
    entry=${path#/tmp/}
    entry=/tmp/${entry%%/*}
    if [[ -d ${entry} && -z ${kept[${entry}]:-} ]]; then
      exec {fd}<"${entry}"
      kept[${entry}]=${fd}
    fi
  done
  mount -t tmpfs -o mode=1777 carousel-tmp /tmp
  for entry in "${!kept[@]}"; do
    mkdir "${entry}"
    fd=${kept[${entry}]}
    mount --no-canonicalize --bind "/proc/self/fd/${fd}" "${entry}"
    exec {fd}<&-
  done
  cd "${PWD}"
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
