#!/usr/bin/env bash
# Print tierpool's version from its one source, worker/tierpool/_version.py (no Python needed).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
version=$(sed -n 's/^__version__ = "\(.*\)"$/\1/p' "$root/worker/tierpool/_version.py")
[ -n "$version" ] || { echo "version: no __version__ line in worker/tierpool/_version.py" >&2; exit 1; }
echo "$version"
