#!/usr/bin/env bash
# Regenerates every generated file into a clean copy of the working tree and
# fails if the result differs from what is checked in. Called by `make verify`.
set -o errexit -o nounset -o pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "${root}"
# The chart's generated manifests, not the whole of charts/carousel/files: its dashboards are written by hand.
generated=(pkg/client charts/carousel/files/crds charts/carousel/files/rbac charts/carousel/files/webhook
  docs/reference/api.md)
mapfile -t deepcopy < <(git ls-files --cached --others --exclude-standard 'apis/**/zz_generated.*.go')

tmp=$(mktemp -d)
trap 'rm -rf "${tmp}"' EXIT
git ls-files -z --cached --others --exclude-standard | xargs -0 cp --parents --preserve=timestamps -t "${tmp}"
for dir in "${generated[@]}"; do rm -rf "${tmp:?}/${dir}"; done
for f in "${deepcopy[@]}"; do rm -f "${tmp}/${f}"; done

if ! make -C "${tmp}" --no-print-directory generate BIN="${root}/bin" >"${tmp}/generate.log" 2>&1; then
  cat "${tmp}/generate.log" >&2
  exit 1
fi

status=0
for dir in apis "${generated[@]}"; do
  if ! diff -r "${root}/${dir}" "${tmp}/${dir}"; then status=1; fi
done
if (( status != 0 )); then
  echo "generated files are out of date: run 'make generate' and commit the result" >&2
  exit 1
fi
echo "generated files are up to date"
