#!/usr/bin/env bash
# Base images made from Debian's packages, for machines that reach no image registry (CI here):
#   tierpool-local/debian:bookworm     debootstrap --variant=minbase, imported
#   tierpool-local/python:3.11         + Debian's python3.11 and venv, `python` on PATH (the role of python:3.1x-slim)
# The registries' TLS here passes a local intercepting CA that the host trusts, so the host's CA bundle goes into
# these local bases (PIP_CERT, SSL_CERT_FILE) and never into the Dockerfiles users build.
# Idempotent: an image that exists is kept. Needs root, debootstrap (installed from Debian's packages if missing).
set -euo pipefail
debian=tierpool-local/debian:bookworm
python=tierpool-local/python:3.11
have() { docker image inspect "$1" >/dev/null 2>&1; }

if ! have "$debian"; then
  if ! command -v debootstrap >/dev/null; then
    apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null
  fi
  mirror=$(sed -n 's/^URIs: *\([^ ]*\).*/\1/p' /etc/apt/sources.list.d/debian.sources 2>/dev/null | head -1)
  mirror=${mirror:-http://deb.debian.org/debian}
  root=$(mktemp -d)
  trap 'rm -rf "$root"' EXIT
  echo "build-local-bases: debootstrap bookworm from $mirror" >&2
  debootstrap --variant=minbase bookworm "$root" "$mirror" >/dev/null
  rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
  tar -C "$root" -c . | docker import --change 'CMD ["bash"]' - "$debian" >/dev/null
fi

if ! have "$python"; then
  ctx=$(mktemp -d)
  cp /etc/ssl/certs/ca-certificates.crt "$ctx/host-ca.pem"
  cat >"$ctx/Dockerfile" <<DOCKER
FROM $debian
COPY host-ca.pem /etc/ssl/host-ca.pem
ENV PIP_CERT=/etc/ssl/host-ca.pem SSL_CERT_FILE=/etc/ssl/host-ca.pem REQUESTS_CA_BUNDLE=/etc/ssl/host-ca.pem
RUN apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      python3 python3-venv ca-certificates >/dev/null \
 && ln -s /usr/bin/python3 /usr/local/bin/python && rm -rf /var/lib/apt/lists/*
DOCKER
  docker build -q -t "$python" "$ctx" >/dev/null
  rm -rf "$ctx"
fi
echo "$python"
