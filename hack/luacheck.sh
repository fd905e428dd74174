#!/usr/bin/env bash
# Lint tierpool's Lua scripts with luacheck (settings: .luacheckrc), each one as the server runs it: with the
# helpers it includes, so that a helper function a script calls without including it is an error. Warnings point
# at the line of the file they come from (hack/luacheck_scripts.py). When luacheck is missing and we are root on
# Debian, install Debian's lua-check (luacheck 1.1). Elsewhere a missing luacheck skips with a note, but under CI
# (CI=true or TIERPOOL_STRICT=1) it fails. PYTHON: the interpreter with tierpool installed (default .venv/bin/python).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
python=${PYTHON:-$root/.venv/bin/python}
strict=false
case "${CI:-}" in 1 | true | TRUE | True) strict=true ;; esac
[ "${TIERPOOL_STRICT:-}" = 1 ] && strict=true

if ! command -v luacheck >/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "luacheck: installing lua-check from Debian's packages" >&2
    apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq lua-check >/dev/null
    command -v luacheck >/dev/null || { echo "luacheck: lua-check installed no luacheck command" >&2; exit 3; }
  elif $strict; then
    echo "luacheck: not installed, and this is CI: install luacheck (Debian: apt-get install lua-check)" >&2
    exit 3
  else
    echo "luacheck: not installed; the Lua scripts are not linted (Debian: apt-get install lua-check)" >&2
    exit 0
  fi
fi
exec "$python" "$here/luacheck_scripts.py" "$root/.luacheckrc"
