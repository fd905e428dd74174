#!/usr/bin/env bash
# Lint the GitHub Actions workflows (.github/workflows/*.yml) with actionlint, built once from Go modules into a
# cache outside the repo, as hack/build-helm.sh does for helm. Without a Go toolchain it skips with a note, but
# under CI (CI=true or TIERPOOL_STRICT=1) a missing tool fails. The `run:` scripts are checked too when
# the shellcheck command is on PATH (as root on Debian, Debian's package is installed first). Extra arguments go to
# actionlint.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
version="${TIERPOOL_ACTIONLINT_VERSION:-1.7.12}"
bin_dir="${XDG_CACHE_HOME:-$HOME/.cache}/tierpool/actionlint-$version"
strict=false
case "${CI:-}" in 1 | true | TRUE | True) strict=true ;; esac
[ "${TIERPOOL_STRICT:-}" = 1 ] && strict=true

if [ ! -x "$bin_dir/actionlint" ]; then
  if ! command -v go >/dev/null; then
    if $strict; then
      echo "actionlint: no Go toolchain to build it, and this is CI" >&2
      exit 3
    fi
    echo "actionlint: skipped, no Go toolchain to build actionlint; the workflows are not linted" >&2
    exit 0
  fi
  mkdir -p "$bin_dir"
  start=$(date +%s)
  GOBIN="$bin_dir" GOFLAGS=-trimpath go install -ldflags "-s -w" "github.com/rhysd/actionlint/cmd/actionlint@v$version"
  echo "actionlint: built v$version in $(( $(date +%s) - start ))s" >&2
fi
if ! command -v shellcheck >/dev/null && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  echo "actionlint: installing shellcheck from Debian's packages (for the run: scripts)" >&2
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq shellcheck; } >/dev/null 2>&1 ||
    echo "actionlint: could not install shellcheck" >&2
fi
command -v shellcheck >/dev/null || echo "actionlint: no shellcheck; the run: scripts are not checked" >&2
cd "$root"
shopt -s nullglob
workflows=(.github/workflows/*.yml .github/workflows/*.yaml)
if [ ${#workflows[@]} -eq 0 ]; then
  echo "actionlint: no workflows under .github/workflows" >&2
  exit 0
fi
exec "$bin_dir/actionlint" "$@" "${workflows[@]}"
