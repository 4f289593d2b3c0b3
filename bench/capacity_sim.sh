#!/usr/bin/env bash
# Issue 31's simulator targets, for docs/capacity.md: a day of 43 models
# (bench/capacity/servegen_day.yaml: ServeGen m-small clients over 24 h, a
# diurnal peak) with every node from a pool, under
#   - gpusched's policy (cost per token at the SLO, consolidation),
#   - reactive provisioning (first pool that fits, idle nodes given back),
#   - gpusched's policy with spot pools added (6 nodes each, as the
#     on-demand pools; a stated Poisson loss rate,
#     dynamic_ondemand_fallback; base_ondemand_fallback_replicas 0: every
#     replica may go on spot),
#   - a static cluster sized for the peak: the most GPUs the reactive run
#     held at once (5-minute samples), rounded up to whole 8-GPU nodes of
#     the cheapest on-demand GPU of the pools (A100-80GB), paid all day.
# Targets: cost <= 0.5x the static cluster's at >= 99% SLO attainment;
# with spot <= 0.4x, still >= 99%. Deterministic (seeded): one run each.
# Needs ../shared/data/servegen (skipped without it).
# SEED (default: the config's, 11) reseeds every run (arrivals, spot losses)
# to see how much one seeded run says.
# Usage: bench/capacity_sim.sh [BUILD_DIR] [SPOT_LOSSES_PER_NODE_HOUR] [SEED]
set -euo pipefail
build=$(realpath "${1:-build}")
rate=${2:-0.05}
seed=${3:-}
cd "$(dirname "$0")/.."
cfg=bench/capacity/servegen_day.yaml
if [ -n "$seed" ]; then
  if ! [[ $seed =~ ^[0-9]{1,9}$ ]]; then
    echo "SEED must be a number of at most 9 digits, not '$seed'" >&2
    exit 2
  fi
  sed "s/^seed: .*/seed: $seed/" "$cfg" >bench/capacity/.seeded.yaml
  cfg=bench/capacity/.seeded.yaml
fi
if [ ! -d ../shared/data/servegen/language/m-small ]; then
  echo "skipped: ../shared/data/servegen is absent"
  exit 0
fi
out=out/capacity_sim
mkdir -p "$out"
run() {  # name config
  "$build/gpusched" sim serve --config "$2" --omit-wall-time \
    --out "$out/$1.json" 2>"$out/$1.err"
}
sed 's/policy: gpusched/policy: reactive/' "$cfg" >bench/capacity/.reactive.yaml
python3 - "$cfg" "$rate" >bench/capacity/.spot.yaml <<'PY'
import sys
text = open(sys.argv[1]).read()
spot = f"""    - {{name: a100-spot, gpu: A100-80GB, gpus_per_node: 8, spot: true,
       provisioning_delay_s: 180, max_nodes: 6,
       preemptions_per_node_hour: {sys.argv[2]}}}
    - {{name: h100-spot, gpu: H100-SXM-80GB, gpus_per_node: 8, spot: true,
       provisioning_delay_s: 180, max_nodes: 6,
       preemptions_per_node_hour: {sys.argv[2]}}}
capacity:"""
text = text.replace("capacity:", spot, 1)
text = text.replace("  scale_down_delay_s: 600",
                    "  scale_down_delay_s: 600\n  dynamic_ondemand_fallback: true", 1)
print(text, end="")
PY
run gpusched "$cfg" &
run reactive bench/capacity/.reactive.yaml &
wait
run spot bench/capacity/.spot.yaml &
python3 - "$out" "$cfg" >bench/capacity/.static.yaml <<'PY'
import json, math, re, sys
r = json.load(open(f"{sys.argv[1]}/reactive.json"))
peak = max(sum(s["replicas"]) for s in r["load_over_time"]["samples"])
gpus = 8 * math.ceil(peak / 8)
text = open(sys.argv[2]).read()
# The static cluster: no pools, no capacity block, A100-80GB at its
# on-demand list price per GPU-hour (data/gpu_prices.csv: p4de.24xlarge).
text = re.sub(r"  pools:\n(    .*\n|       .*\n)+", "", text)
text = re.sub(r"capacity:\n(  .*\n)+", "", text)
text = text.replace("  gpus: 0\n", f"  gpus: {gpus}\n  price_per_gpu_hour: {40.9657 / 8}\n")
print(text, end="")
PY
run static bench/capacity/.static.yaml
wait
rm -f bench/capacity/.reactive.yaml bench/capacity/.spot.yaml bench/capacity/.static.yaml \
  bench/capacity/.seeded.yaml
python3 - "$out" "$rate" <<'PY'
import json, sys
out, rate = sys.argv[1], sys.argv[2]
rows = {}
for name in ("static", "reactive", "gpusched", "spot"):
    r = json.load(open(f"{out}/{name}.json"))
    rows[name] = r
base = rows["static"]["cost"]["usd"]
print(f"seed {rows['static']['seed']}; static cluster: {rows['static']['config']} with "
      f"{rows['static']['overall']['capacity']['cluster_gpus']} A100-80GB GPUs")
print("| policy | SLO met | cost (USD/day) | x static | node-hours | idle USD | consolidations | spot losses | targets |")
print("|---|---|---|---|---|---|---|---|---|")
for name, label, target in (("static", "static, sized for the peak", None),
                            ("reactive", "reactive provisioning", None),
                            ("gpusched", "gpusched's policy", 0.5),
                            ("spot", f"gpusched + spot ({rate} losses/node-hour)", 0.4)):
    r = rows[name]
    c, slo = r["cost"], r["overall"]["slo_attainment"]
    hours = sum(p["node_hours"] for p in c["pools"])
    losses = sum(p["spot_preempted"] for p in c["pools"])
    ratio = c["usd"] / base
    verdict = "" if target is None else (
        "met" if ratio <= target and slo >= 0.99 else
        f"missed (<= {target}x at >= 99%)")
    print(f"| {label} | {100 * slo:.2f}% | {c['usd']:.0f} | {ratio:.3f} | "
          f"{hours:.1f} | {c['idle_usd']:.0f} | {c['consolidations']} | "
          f"{losses} | {verdict} |")
for name in ("gpusched", "spot"):
    used = {p["pool"]: round(p["node_hours"], 1) for p in rows[name]["cost"]["pools"] if p["node_hours"] > 0}
    print(f"{name}: node-hours by pool {used}")
PY
