#!/usr/bin/env bash
# Print the directory that holds the kind and kubectl this project uses: the ones on PATH where a registry is in
# reach, else the ones hack/build-kind-node.sh built from Go modules (hack/kind-up.sh builds them).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/lib.sh"
if registry_reachable; then
  dirname "$(command -v kind || echo /usr/local/bin/kind)"
else
  echo "${XDG_CACHE_HOME:-$HOME/.cache}/tierpool/kind/k8s-${TIERPOOL_K8S_VERSION:-1.34.4}/bin"
fi
