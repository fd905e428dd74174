#!/usr/bin/env bash
# Build the helm CLI from Go modules into a cache outside the repo (once). Prints the binary's path.
#
# Helm's own Makefile stamps the Kubernetes version it assumes by default (from the client-go it builds with)
# with -ldflags -X; a plain `go install` leaves the fallback v1.20, and `helm template`/`helm lint` of a chart
# with `kubeVersion: >=1.30` then fail without --kube-version. We stamp it the same way.
set -euo pipefail
version="${TIERPOOL_HELM_VERSION:-3.22.0}"
bin_dir="${XDG_CACHE_HOME:-$HOME/.cache}/tierpool/helm-$version-stamped"
if [ -x "$bin_dir/helm" ]; then echo "$bin_dir/helm"; exit 0; fi
command -v go >/dev/null || { echo "build-helm: no Go toolchain on PATH" >&2; exit 3; }
mkdir -p "$bin_dir"
start=$(date +%s)
mod_dir=$(go mod download -json "helm.sh/helm/v3@v$version" | sed -n 's/^\s*"Dir": "\(.*\)",$/\1/p')
client_go=$(awk '$1 == "k8s.io/client-go" {print $2}' "$mod_dir/go.mod")   # e.g. v0.34.2
IFS=. read -r cg_major cg_minor _ <<< "${client_go#v}"
k8s_major=$((cg_major + 1))
pkg=helm.sh/helm/v3
ldflags="-s -w -X $pkg/internal/version.version=v$version"
for p in pkg/lint/rules pkg/chartutil; do
  ldflags="$ldflags -X $pkg/$p.k8sVersionMajor=$k8s_major -X $pkg/$p.k8sVersionMinor=$cg_minor"
done
GOBIN="$bin_dir" GOFLAGS=-trimpath go install -ldflags "$ldflags" "$pkg/cmd/helm@v$version"
echo "build-helm: built in $(( $(date +%s) - start ))s (default Kubernetes v$k8s_major.$cg_minor)" >&2
echo "$bin_dir/helm"
