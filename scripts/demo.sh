#!/usr/bin/env bash
# `make demo`: the placement experiment of the
# FGD paper on the shipped Alibaba trace sample, every policy, 10 seeds; and
# a serving simulation (admission, fair queues, routing, batching) of the
# shipped Mooncake sample on four simulated replicas.
set -euo pipefail
build=${1:-build}
cd "$(dirname "$0")/.."
mkdir -p out
"$build/gpusched" inventory || true
echo
"$build/gpusched" sim placement \
  --nodes testdata/alibaba-gpu-v2023/nodes.csv \
  --pods testdata/alibaba-gpu-v2023/pods.csv \
  --policy all --seeds 42-51 \
  --out out/placement-report.json --html out/placement-report.html
echo
echo "report: $(pwd)/out/placement-report.json"
echo "plot:   $(pwd)/out/placement-report.html"
echo
"$build/gpusched" sim serve --config tests/golden/serve/mooncake_prefix_affinity.yaml \
  --out out/serve-report.json --html out/serve-report.html
echo "report: $(pwd)/out/serve-report.json"
echo "plot:   $(pwd)/out/serve-report.html"
if [ -f ../shared/data/alibaba-gpu-v2023/openb_pod_list_default.csv ]; then
  echo "full trace: $build/gpusched sim placement --nodes ../shared/data/alibaba-gpu-v2023/openb_node_list_gpu_node.csv --pods ../shared/data/alibaba-gpu-v2023/openb_pod_list_default.csv --policy all --seeds 42-51 --out out/full.json --html out/full.html"
fi
