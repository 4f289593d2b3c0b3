#!/usr/bin/env bash
# Regenerates testdata/alibaba-gpu-v2023/ from the full trace: every 10th
# node and every 10th pod (header kept), so the sample keeps the trace's mix
# of GPU models and pod shapes at a tenth of the size.
# Usage: scripts/make-alibaba-sample.sh [TRACE_DIR]
set -euo pipefail
src=${1:-../shared/data/alibaba-gpu-v2023}
dst=$(dirname "$0")/../testdata/alibaba-gpu-v2023
mkdir -p "$dst"
awk 'NR == 1 || (NR - 2) % 10 == 0' "$src/openb_node_list_gpu_node.csv" > "$dst/nodes.csv"
awk 'NR == 1 || (NR - 2) % 10 == 0' "$src/openb_pod_list_default.csv" > "$dst/pods.csv"
wc -l "$dst"/*.csv
