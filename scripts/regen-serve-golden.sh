#!/usr/bin/env bash
# Regenerates the expected reports of the golden `gpusched sim serve`
# scenarios (tests/golden/serve/*.yaml -> *.json). Review the diff before
# committing: a change in a golden report is a change in behaviour.
# Usage: scripts/regen-serve-golden.sh [BUILD_DIR]
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${1:-$root/build}"
for cfg in "$root"/tests/golden/serve/*.yaml; do
  out="${cfg%.yaml}.json"
  "$build/gpusched" sim serve --config "$cfg" --omit-wall-time --out "$out"
  echo "wrote $out"
done
