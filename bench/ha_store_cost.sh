#!/usr/bin/env bash
# What the etcd store costs against the SQLite one (docs/ha.md,
# "Measured"), one instance of each in the same run on this machine: the
# control API's write latency (WRITES applies of a tenant whose weight
# changes: one store write each, p50 and p99) and apply-to-launch (LAUNCHES
# applies of a deployment -> its replica.started event), with the ratios
# etcd/SQLite. Writes out/ha/store-cost.json.
# Usage: bench/ha_store_cost.sh [BUILD_DIR] [WRITES] [LAUNCHES]
set -euo pipefail
cd "$(dirname "$0")/.."
exec python3 bench/ha_bench.py "${1:-build}" store-cost --writes "${2:-300}" \
  --launches "${3:-20}"
