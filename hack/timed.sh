#!/usr/bin/env bash
# Run `MAKE phase` for each phase in order, stop at the first failure, and print how long each took.
# Usage: hack/timed.sh make -- lint typecheck test-unit ...
set -uo pipefail
make_cmd=(); while [ "$1" != "--" ]; do make_cmd+=("$1"); shift; done; shift
report=(); rc=0
for phase in "$@"; do
  start=$(date +%s)
  "${make_cmd[@]}" --no-print-directory "$phase"; rc=$?
  report+=("$(printf '%-18s %5ss %s' "$phase" "$(( $(date +%s) - start ))" "$([ $rc = 0 ] && echo ok || echo FAILED)")")
  [ $rc = 0 ] || break
done
echo; echo "phase times:"; printf '  %s\n' "${report[@]}"
exit $rc
