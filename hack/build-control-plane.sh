#!/usr/bin/env bash
# Build kube-apiserver, kube-controller-manager and etcd from Go modules into a cache outside the repo,
# the way controller-runtime's envtest provides them. Idempotent: does nothing when the binaries exist.
#
# k8s.io/kubernetes replaces its k8s.io/* staging modules with local paths, so `go install` of it fails.
# A small wrapper module requires it and pins every staging module to the matching v0.X.Y instead.
#
# Usage: hack/build-control-plane.sh            -> prints the bin dir on the last line
# Env:   TIERPOOL_K8S_VERSION (default 1.34.4), TIERPOOL_ETCD_VERSION (default 3.6.16)
set -euo pipefail

k8s_version="${TIERPOOL_K8S_VERSION:-1.34.4}"
etcd_version="${TIERPOOL_ETCD_VERSION:-3.6.16}"
cache_root="${XDG_CACHE_HOME:-$HOME/.cache}/tierpool/control-plane"
bin_dir="$cache_root/k8s-$k8s_version-etcd-$etcd_version/bin"
want=(kube-apiserver kube-controller-manager etcd)

all_present() { for b in "${want[@]}"; do [ -x "$bin_dir/$b" ] || return 1; done; }
if all_present; then echo "$bin_dir"; exit 0; fi
command -v go >/dev/null || { echo "build-control-plane: no Go toolchain on PATH" >&2; exit 3; }

mkdir -p "$bin_dir"
start=$(date +%s)

build_k8s() {
  local src="$cache_root/src/k8s-$k8s_version"
  mkdir -p "$src"
  cd "$src"
  local minor="0.${k8s_version#1.}"
  go mod download -json "k8s.io/kubernetes@v$k8s_version" >/dev/null
  local gomod
  gomod="$(go env GOMODCACHE)/cache/download/k8s.io/kubernetes/@v/v$k8s_version.mod"
  {
    echo "module tierpool.local/controlplane"
    echo
    echo "go 1.24"
    echo
    echo "require k8s.io/kubernetes v$k8s_version"
    echo
    grep -E '^\s+k8s\.io/[a-z0-9-]+ => \./staging/' "$gomod" \
      | awk -v v="v$minor" '{print "replace " $1 " => " $1 " " v}'
  } > go.mod
  cat > tools.go <<'GO'
//go:build tools

package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
)
GO
  GOFLAGS=-mod=mod go mod tidy -e >/dev/null 2>&1 || true
  GOFLAGS=-mod=mod go build -trimpath -ldflags "-s -w -X k8s.io/component-base/version.gitVersion=v$k8s_version" \
    -o "$bin_dir/" k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager
}

build_etcd() {
  GOBIN="$bin_dir" go install "go.etcd.io/etcd/server/v3@v$etcd_version" 2>/dev/null \
    && [ -x "$bin_dir/v3" ] && mv "$bin_dir/v3" "$bin_dir/etcd" && return 0
  local src="$cache_root/src/etcd-$etcd_version"
  mkdir -p "$src"
  cd "$src"
  printf 'module tierpool.local/etcd\n\ngo 1.24\n\nrequire go.etcd.io/etcd/server/v3 v%s\n' "$etcd_version" > go.mod
  GOFLAGS=-mod=mod go build -trimpath -ldflags "-s -w" -o "$bin_dir/etcd" go.etcd.io/etcd/server/v3
}

[ -x "$bin_dir/etcd" ] || build_etcd
[ -x "$bin_dir/kube-apiserver" ] && [ -x "$bin_dir/kube-controller-manager" ] || build_k8s
all_present || { echo "build-control-plane: binaries missing after build in $bin_dir" >&2; exit 1; }
echo "build-control-plane: built in $(( $(date +%s) - start ))s" >&2
echo "$bin_dir"
