#!/usr/bin/env bash
# Failover time of an HA installation (docs/ha.md, "Measured"): three
# instances on a 3-member etcd on this machine, TRIALS kill -9's of the
# leader, each timed from the kill to the new leader's first completed
# controller pass (its leader.ready event). Targets (issue 29): p50 <= 2 s,
# p99 <= 5 s with the default lease (2 s). Writes out/ha/failover.json.
# Usage: bench/ha_failover.sh [BUILD_DIR] [TRIALS]
set -euo pipefail
cd "$(dirname "$0")/.."
exec python3 bench/ha_bench.py "${1:-build}" failover --trials "${2:-20}"
