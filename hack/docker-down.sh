#!/usr/bin/env bash
# Stop the dockerd that hack/docker-up.sh started (and nothing else).
set -uo pipefail
state="${XDG_CACHE_HOME:-$HOME/.cache}/tierpool/docker"
[ -f "$state/started-by-us" ] || exit 0
pid=$(cat "$state/dockerd.pid" 2>/dev/null) || exit 0
kill "$pid" 2>/dev/null && for _ in $(seq 1 30); do kill -0 "$pid" 2>/dev/null || break; sleep 1; done
rm -f "$state/started-by-us"
