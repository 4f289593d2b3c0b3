#!/usr/bin/env bash
# Issue 5's simulator target, for docs/autoscaling.md: on a workload of 43
# models with skewed, bursty rates (bench/elastic/servegen_43_models.yaml:
# ServeGen m-small clients, one per model), autoscaling + swapping on a
# bounded cluster against a static one-replica-per-model deployment on the
# same trace (`gpusched sim serve --compare-static`). Targets: SLO met for
# >= 99% of requests with <= 50% of the static deployment's GPU-hours.
# The config's window (06:00 of day 1) is the headline; the same config is
# then run on four other 2-hour windows of the day (servegen_offset_s), so
# the figure is not one lucky window. Deterministic (seeded): one run per
# window is the figure.
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
for offset in 21600 0 36000 50400 72000; do
  sed "s/servegen_offset_s: 21600/servegen_offset_s: $offset/" "$cfg" \
    >bench/elastic/.window.yaml
  "$build/gpusched" sim serve --config bench/elastic/.window.yaml \
    --compare-static --omit-wall-time --out "$out/window-$offset.json" \
    2>"$out/window-$offset.err"
done
rm -f bench/elastic/.window.yaml
python3 - "$out" <<'PY'
import json, sys
out = sys.argv[1]
rows = []
for offset in (21600, 0, 36000, 50400, 72000):
    r = json.load(open(f"{out}/window-{offset}.json"))
    o, c, b = r["overall"], r["overall"]["capacity"], r["static_baseline"]
    rows.append((offset, r, o, c, b))
offset, r, o, c, b = rows[0]
models = len(r["deployments"])
busy = sum(1 for d in r["deployments"].values() if d["requests"] > 0)
print(f"window 06:00-08:00: {models} models ({busy} with requests), "
      f"{o['requests']} requests")
print(f"autoscaling + swapping on {c['cluster_gpus']} GPUs: SLO met "
      f"{100 * o['slo_attainment']:.2f}%, {c['gpu_hours']:.2f} GPU-hours, "
      f"{c['cold_starts']} cold starts (p50 {c['cold_start_s']['p50']:.2f} s), "
      f"{c['held_requests']} held requests (hold p50 "
      f"{c['hold_s']['p50']:.2f} s, p99 {c['hold_s']['p99']:.2f} s), "
      f"{c['evictions']} evictions, {c['preemptions']} preemptions")
print(f"static, one replica per model ({b['gpus']} GPUs): SLO met "
      f"{100 * b['slo_attainment']:.2f}%, {b['gpu_hours']:.2f} GPU-hours "
      f"over the same span")
print()
print("| window | models with requests | requests | SLO met | GPU-hours | "
      "static GPU-hours | ratio | static SLO met | evictions | targets |")
print("|---|---|---|---|---|---|---|---|---|---|")
for offset, r, o, c, b in rows:
    busy = sum(1 for d in r["deployments"].values() if d["requests"] > 0)
    slo, ratio = o["slo_attainment"], b["gpu_hours_ratio"]
    met = "met" if slo >= 0.99 and ratio <= 0.5 else "not met"
    h = offset // 3600
    print(f"| {h:02d}:00-{h + 2:02d}:00 | {busy} | {o['requests']} | "
          f"{100 * slo:.2f}% | {c['gpu_hours']:.2f} | {b['gpu_hours']:.2f} | "
          f"{100 * ratio:.1f}% | {100 * b['slo_attainment']:.2f}% | "
          f"{c['evictions']} | {met} |")
PY
