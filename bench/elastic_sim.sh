#!/usr/bin/env bash
# Issue 5's simulator target, for docs/autoscaling.md: on a workload of 43
# models with skewed, bursty rates (bench/elastic/servegen_43_models.yaml:
# ServeGen m-small clients, one per model), autoscaling + swapping on a
# bounded cluster against a static one-replica-per-model deployment on the
# same trace (`gpusched sim serve --compare-static`). Deterministic (seeded):
# one run is the figure. Targets: SLO met for >= 99% of requests with <= 50%
# of the static deployment's GPU-hours.
# Needs ../shared/data/servegen (skipped without it).
# Usage: bench/elastic_sim.sh [BUILD_DIR]
set -euo pipefail
build=$(realpath "${1:-build}")
cd "$(dirname "$0")/.."
cfg=bench/elastic/servegen_43_models.yaml
if [ ! -d ../shared/data/servegen/language/m-small ]; then
  echo "skipped: ../shared/data/servegen is absent"
  exit 0
fi
out=out/elastic_sim
mkdir -p "$out"
"$build/gpusched" sim serve --config "$cfg" --compare-static --omit-wall-time \
  --out "$out/report.json" --html "$out/report.html" 2>"$out/stderr"
python3 - "$out/report.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
o, c, b = r["overall"], r["overall"]["capacity"], r["static_baseline"]
slo = o["slo_attainment"]
ratio = b["gpu_hours_ratio"]
models = len(r["deployments"])
busy = sum(1 for d in r["deployments"].values() if d["requests"] > 0)
print(f"models: {models} ({busy} with requests); requests: {o['requests']}")
print(f"autoscaling + swapping on {c['cluster_gpus']} GPUs: SLO met "
      f"{100 * slo:.2f}%, {c['gpu_hours']:.2f} GPU-hours, "
      f"{c['cold_starts']} cold starts (p50 {c['cold_start_s']['p50']:.2f} s), "
      f"{c['held_requests']} held requests (hold p50 "
      f"{c['hold_s']['p50']:.2f} s, p99 {c['hold_s']['p99']:.2f} s), "
      f"{c['evictions']} evictions, {c['preemptions']} preemptions")
print(f"static, one replica per model ({b['gpus']} GPUs): SLO met "
      f"{100 * b['slo_attainment']:.2f}%, {b['gpu_hours']:.2f} GPU-hours "
      f"over the same span")
print(f"GPU-hours ratio: {100 * ratio:.1f}% (target <= 50%: "
      f"{'met' if ratio <= 0.5 else 'not met'}); SLO: "
      f"{100 * slo:.2f}% (target >= 99%: {'met' if slo >= 0.99 else 'not met'})")
PY
