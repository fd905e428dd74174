#!/usr/bin/env bash
# Build the operator and worker images. With a registry in reach they build FROM the upstream python:3.1x-slim
# bases; without one (CI here) FROM a local base made of Debian's packages (hack/build-local-bases.sh), and the
# chart's dev Redis image gets a local stand-in (Debian's redis-server) under the tag the chart is given.
# `make images` names them as the chart and the model default to (ghcr.io/tierpool/{operator,worker}:VERSION).
# Usage: hack/images.sh OPERATOR_IMAGE WORKER_IMAGE [REDIS_IMAGE]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/lib.sh"
operator=${1:?operator image}; worker=${2:?worker image}; redis=${3:-valkey/valkey:8.1-alpine}
cd "$here/.."
bash "$here/docker-up.sh" >&2
base_args=()
if registry_reachable; then
  have_image "$redis" || docker pull -q "$redis" >/dev/null   # `kind load` needs it locally
else
  local_base=$(bash "$here/build-local-bases.sh")
  base_args=(--build-arg "BASE_IMAGE=$local_base")
  if ! have_image "$redis"; then
    ctx=$(mktemp -d)
    printf 'FROM tierpool-local/debian:bookworm\nRUN apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends redis-server >/dev/null && rm -rf /var/lib/apt/lists/*\nUSER 999:999\nENTRYPOINT ["redis-server"]\n' >"$ctx/Dockerfile"
    docker build -q -t "$redis" "$ctx" >/dev/null && rm -rf "$ctx"
    echo "images: $redis is a local stand-in (Debian's redis-server); no registry in reach" >&2
  fi
fi
base_args+=(--build-arg "VERSION=$(bash "$here/version.sh")")
start=$(date +%s)
docker build -q "${base_args[@]}" -f operator/Dockerfile -t "$operator" . >/dev/null
docker build -q "${base_args[@]}" -f worker/Dockerfile -t "$worker" . >/dev/null
echo "images: built $operator and $worker in $(( $(date +%s) - start ))s ${base_args[*]}" >&2
