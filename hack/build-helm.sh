#!/usr/bin/env bash
# Build the helm CLI from Go modules into a cache outside the repo (once). Prints the binary's path.
set -euo pipefail
version="${TIERPOOL_HELM_VERSION:-3.22.0}"
bin_dir="${XDG_CACHE_HOME:-$HOME/.cache}/tierpool/helm-$version"
if [ -x "$bin_dir/helm" ]; then echo "$bin_dir/helm"; exit 0; fi
command -v go >/dev/null || { echo "build-helm: no Go toolchain on PATH" >&2; exit 3; }
mkdir -p "$bin_dir"
start=$(date +%s)
GOBIN="$bin_dir" GOFLAGS=-trimpath go install -ldflags "-s -w -X helm.sh/helm/v3/internal/version.version=v$version" \
  "helm.sh/helm/v3/cmd/helm@v$version"
echo "build-helm: built in $(( $(date +%s) - start ))s" >&2
echo "$bin_dir/helm"
