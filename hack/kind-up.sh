#!/usr/bin/env bash
# Create the kind cluster (once). With a registry in reach: kind's own node image and the three-node
# kind-config.yaml. Without one (CI here): a node image assembled by hack/build-kind-node.sh and the one-node
# hack/kind-ci.yaml. Prints the directory holding kind and kubectl on the last line.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/lib.sh"
cluster=${KIND_CLUSTER:-tierpool}
cd "$here/.."
bash "$here/docker-up.sh" >&2
args=(--name "$cluster" --wait 180s)
if registry_reachable; then
  command -v kind >/dev/null || { echo "kind-up: install kind (https://kind.sigs.k8s.io)" >&2; exit 3; }
  args+=(--config kind-config.yaml)
else
  node_image=$(bash "$here/build-kind-node.sh" | tail -1)
  args+=(--config "$here/kind-ci.yaml" --image "$node_image")
fi
bin_dir=$(bash "$here/kind-bin.sh")
if ! "$bin_dir/kind" get clusters 2>/dev/null | grep -qx "$cluster"; then
  start=$(date +%s)
  "$bin_dir/kind" create cluster "${args[@]}" >&2
  echo "kind-up: cluster $cluster ready in $(( $(date +%s) - start ))s" >&2
fi
echo "$bin_dir"
