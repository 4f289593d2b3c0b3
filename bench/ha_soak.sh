#!/usr/bin/env bash
# Leadership stability under CPU pressure (docs/ha.md, "Measured"): three
# instances on a 3-member etcd on this machine beside `stress-ng --cpu
# WORKERS` for MINUTES, with the default lease (2 s): leader changes after
# the first election (target, issue 29: 0 in 30 minutes beside 2 workers),
# pauses (a leader that could not prove its lease for a moment), lease
# renewals answered and failed. Writes out/ha/soak.json.
# Usage: bench/ha_soak.sh [BUILD_DIR] [MINUTES] [WORKERS]
set -euo pipefail
cd "$(dirname "$0")/.."
exec python3 bench/ha_bench.py "${1:-build}" soak --minutes "${2:-30}" --stress "${3:-2}"
