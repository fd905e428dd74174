#!/usr/bin/env bash
# Make sure a Docker engine answers. When none does and we are root on Debian, install docker.io from Debian's
# packages and start dockerd ourselves (CI on a fresh machine). Prints nothing on success but the engine's version.
#
# This VM's capability bounding set lacks CAP_SYS_RESOURCE, which every `docker run --privileged` (every kind node)
# asks for: runc then fails. When that capability is missing, dockerd gets a runc wrapper as its default runtime
# that removes it from the container's spec (hack/runc-drop-missing-caps). Elsewhere dockerd runs as installed.
# hack/docker-down.sh stops a dockerd that this script started, and only that.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
state="${XDG_CACHE_HOME:-$HOME/.cache}/tierpool/docker"
mkdir -p "$state"

if docker info >/dev/null 2>&1; then docker version --format 'docker engine {{.Server.Version}} (already running)'; exit 0; fi

if ! command -v dockerd >/dev/null; then
  [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null \
    || { echo "docker-up: no Docker engine; install Docker (https://docs.docker.com/engine/install/)" >&2; exit 3; }
  echo "docker-up: installing docker.io from Debian's packages" >&2
  apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker.io >/dev/null
fi

args=(--data-root "${TIERPOOL_DOCKER_ROOT:-/var/lib/docker}" --pidfile "$state/dockerd.pid")
capbnd=$(awk '/^CapBnd:/ {print $2}' /proc/self/status)
if (( (0x$capbnd >> 24 & 1) == 0 )); then   # bit 24 = CAP_SYS_RESOURCE
  install -m 0755 "$here/runc-drop-missing-caps" "$state/runc-wrap"
  args+=(--add-runtime "tierpool-runc=$state/runc-wrap" --default-runtime tierpool-runc)
fi
nohup dockerd "${args[@]}" >"$state/dockerd.log" 2>&1 &
echo started >"$state/started-by-us"
for _ in $(seq 1 60); do
  docker info >/dev/null 2>&1 && { docker version --format 'docker engine {{.Server.Version}} (started)'; exit 0; }
  sleep 1
done
echo "docker-up: dockerd did not answer within 60 s; its log:" >&2
tail -20 "$state/dockerd.log" >&2
exit 1
