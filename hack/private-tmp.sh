#!/usr/bin/env bash
# private-tmp.sh runs a command with a /tmp of its own: a tmpfs mounted over
# /tmp in a mount namespace of its own. What a test suite writes there (etcd's
# data, keys, kubeconfigs, logs, go test's binaries) goes with the namespace
# when its last process ends, even when the run is killed and no cleanup runs;
# the host's /tmp is never written.
#
# The command runs as it is with PRIVATE_TMP=0 (to keep a failed run's files
# for a look), inside another private /tmp, and where no mount namespace can
# be made (not root, no unshare), which it says.
set -o errexit -o nounset -o pipefail
if [[ ${PRIVATE_TMP:-1} == 0 || -n ${CAROUSEL_PRIVATE_TMP:-} ]]; then
  exec "$@"
fi
if ! unshare --mount --propagation private -- true 2>/dev/null; then
  echo "private-tmp: no mount namespace can be made here; the command writes to the host's /tmp" >&2
  exec "$@"
fi
export CAROUSEL_PRIVATE_TMP=1
exec unshare --mount --propagation private -- /bin/sh -c 'mount -t tmpfs -o mode=1777 carousel-tmp /tmp && exec "$@"' private-tmp "$@"
