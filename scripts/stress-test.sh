#!/usr/bin/env bash
# `make test` RUNS times in a row (default 5) while stress-ng keeps WORKERS
# CPU hogs (default 2) running beside it: the suite must not depend on the
# machine's speed (docs/reliability.md, "Tests that do not flake"). Prints
# each run's wall time and result; exits non-zero if any run failed. The
# first run builds what is missing; time a fresh clone for the full figure.
# Usage: scripts/stress-test.sh [RUNS] [WORKERS]
set -uo pipefail
cd "$(dirname "$0")/.."
runs=${1:-5}
workers=${2:-2}
command -v stress-ng >/dev/null || bash scripts/install-deps.sh
stress-ng --cpu "$workers" --timeout 0 --quiet &
hog=$!
trap 'kill "$hog" 2>/dev/null; wait "$hog" 2>/dev/null' EXIT
failed=0
for i in $(seq 1 "$runs"); do
  start=$(date +%s)
  if make test >"/tmp/gpusched-stress-run-$i.log" 2>&1; then result=passed; else
    result="FAILED (log: /tmp/gpusched-stress-run-$i.log)"
    failed=$((failed + 1))
  fi
  echo "run $i of $runs: $(($(date +%s) - start)) s, $result (with $workers stress-ng CPU workers)"
done
[ "$failed" -eq 0 ]
