#!/usr/bin/env bash
# Request-layer figures for docs/request-layer.md and the issue notes. Every
# number there comes from this script:
#   1. core speed: admission + enqueue + dispatch (Google Benchmark, 1,000
#      tenants, 4 classes, 100 models) next to a plain FIFO peer;
#   2. simulator speed: the full Mooncake conversation trace on 16 replicas;
#   3. prefix affinity vs least-outstanding on Mooncake, 8 replicas;
#   4. fairness on the VTC multi-tenant trace (FCFS vs fair queuing), and a
#      flooding tenant next to a light one (alone / FCFS / fair);
#   5. SLO attainment on the Azure code trace: round-robin + FCFS against
#      latency-predictive + deadline ordering at the same replica count,
#      time-scaled until the former falls below 80%.
# Parts 2-5 need ../shared/data and are skipped without it.
# Usage: bench/run_serving_bench.sh [BUILD_DIR] [REPETITIONS]
set -euo pipefail
build=$(realpath "${1:-build}")
reps=${2:-3}
cd "$(dirname "$0")/.."
data=$(realpath -m ../shared/data)
out=out/serving
mkdir -p "$out"
bin="$build/gpusched"

echo "== 1. Core speed (median of $reps repetitions)"
"$build/bench/serving_bench" --benchmark_repetitions="$reps" \
  --benchmark_report_aggregates_only=true \
  --benchmark_out="$out/serving_bench.json" --benchmark_out_format=json \
  2>/dev/null | grep -E "_median|^Benchmark" || true
python3 - "$out/serving_bench.json" <<'PY'
import json, sys
rows = json.load(open(sys.argv[1]))["benchmarks"]
# Medians when repeated; the single run otherwise.
b = {x["run_name"]: x for x in rows if x.get("aggregate_name", "median") == "median"}
peer = b["BM_FifoPeer"]["items_per_second"]
for name, x in b.items():
    r = x["items_per_second"]
    print(f"{name:40s} {r/1e6:6.2f} M requests/s  ({r/peer:.2f}x the FIFO peer)")
print("target: >= 2.00 M requests/s")
PY

if [ ! -d "$data" ]; then
  echo "skipped parts 2-5: $data absent"
  exit 0
fi

# run NAME: runs out/serving/NAME.yaml, prints nothing, leaves NAME.json.
run() {
  "$bin" sim serve --config "$out/$1.yaml" --out "$out/$1.json" 2>"$out/$1.err" ||
    { cat "$out/$1.err"; exit 1; }
}
# mooncake NAME REPLICAS ROUTER
mooncake() {
  cat >"$out/$1.yaml" <<YAML
seed: 42
deployments:
  - name: chat
    model: llama-3-8b
    gpu: A100-80GB
    replicas: $2
    max_ongoing_requests: 32
    router: {policy: $3}
workload:
  trace: {format: mooncake, path: $data/mooncake-fast25/conversation_trace.jsonl}
YAML
  run "$1"
}

echo "== 2. Simulator speed: Mooncake conversation (12,031 requests), 16 replicas"
mooncake speed 16 least-outstanding
for i in $(seq 2 "$reps"); do run speed; cp "$out/speed.json" "$out/speed-$i.json"; done
python3 - "$out"/speed*.json <<'PY'
import json, sys, statistics
runs = [json.load(open(p)) for p in sys.argv[1:]]
walls = sorted(r["wall_seconds"] for r in runs)
r = runs[0]
print(f"{r['overall']['requests']} requests, {r['simulated_seconds']:.0f} s simulated, "
      f"wall median {statistics.median(walls):.2f} s (runs: {', '.join(f'{w:.2f}' for w in walls)}); target <= 10 s")
PY

echo "== 3. Prefix affinity vs least-outstanding: Mooncake, 8 replicas"
mooncake prefix-lo 8 least-outstanding
mooncake prefix-pa 8 prefix-affinity
python3 - "$out/prefix-lo.json" "$out/prefix-pa.json" <<'PY'
import json, sys
lo, pa = (json.load(open(p))["overall"] for p in sys.argv[1:3])
for name, o in (("least-outstanding", lo), ("prefix-affinity", pa)):
    print(f"{name:18s} hit rate {100*o['prefix_cache_hit_rate']:5.1f}%  mean TTFT {o['ttft_s']['mean']:7.3f} s  "
          f"p99 TTFT {o['ttft_s']['p99']:7.3f} s  SLO {100*o['slo_attainment']:5.1f}%")
print(f"hit-rate ratio {pa['prefix_cache_hit_rate']/max(lo['prefix_cache_hit_rate'],1e-9):.2f}x (target >= 1.5x); "
      f"mean TTFT {'lower' if pa['ttft_s']['mean'] < lo['ttft_s']['mean'] else 'NOT lower'} with prefix affinity")
PY

echo "== 4a. Fairness: VTC multi-tenant trace, one llama-2-7b replica on an A10"
for order in fcfs fair; do
  cat >"$out/vtc-$order.yaml" <<YAML
seed: 42
fairness_window_s: 30
deployments:
  - name: chat
    model: llama-2-7b
    gpu: A10-24GB
    replicas: 1
    max_ongoing_requests: 16
    queue: {order: $order}
workload:
  trace: {format: vtc, path: $data/vtc-lmsys-multitenant/requests.csv}
YAML
  run "vtc-$order"
done
python3 - "$out/vtc-fcfs.json" "$out/vtc-fair.json" <<'PY'
import json, sys
f, v = (json.load(open(p)) for p in sys.argv[1:3])
for name, r in (("FCFS", f), ("fair (VTC)", v)):
    fa = r["fairness"]
    print(f"{name:11s} max service difference {fa['max_service_difference']:9.0f}  mean {fa['mean_service_difference']:8.0f}  "
          f"({fa['windows_with_two_or_more_backlogged']} windows of {fa['window_s']} s)  throughput "
          f"{r['overall']['completed']/r['simulated_seconds']:.2f} req/s")
print("fair < FCFS:", v["fairness"]["max_service_difference"] < f["fairness"]["max_service_difference"])
PY

echo "== 4b. A flooding tenant next to a light one (same replica)"
flood() {  # NAME ORDER FLOOD_RATE HEADROOM
  cat >"$out/$1.yaml" <<YAML
seed: 42
deployments:
  - name: chat
    model: llama-2-7b
    gpu: A10-24GB
    replicas: 1
    max_ongoing_requests: 16
    queue: {order: $2, fair_share_headroom: $4}
workload:
  synthetic:
    duration_s: 600
    tenants:
      - {name: light, arrival: poisson, rate: 0.2, input_tokens: 64, input_max: 256, output_tokens: 16, output_max: 128}
YAML
  if [ "$3" != 0 ]; then
    echo "      - {name: flood, arrival: poisson, rate: $3, input_tokens: 64, input_max: 512, output_tokens: 128, output_max: 512}" >>"$out/$1.yaml"
  fi
  run "$1"
}
flood flood-alone fair 0 0.25
flood flood-fcfs fcfs 8 0
flood flood-fair-low fair 8 0.125
flood flood-fair fair 8 0.25
python3 - "$out"/flood-alone.json "$out"/flood-fcfs.json "$out"/flood-fair-low.json "$out"/flood-fair.json <<'PY'
import json, sys
runs = [json.load(open(p)) for p in sys.argv[1:5]]
alone = runs[0]["tenants"]["light"]["ttft_s"]["p99"]
names = ("light alone", "with flood, FCFS", "flood, fair, headroom 0.125", "flood, fair, headroom 0.25 (default)")
for name, r in zip(names, runs):
    l = r["tenants"]["light"]["ttft_s"]["p99"]
    fl = r["tenants"].get("flood")
    extra = f"  flood: {fl['completed']} done in {r['simulated_seconds']:.0f} s" if fl else ""
    print(f"{name:28s} light p99 TTFT {l:7.3f} s ({l/alone:5.2f}x alone){extra}")
print("target: fair <= 2x alone")
PY

echo "== 5. SLO attainment: Azure code trace, 4 llama-2-7b replicas on A100"
echo "   SLO: TTFT <= 1 s and TPOT <= 0.1 s; max_ongoing_requests 4, chunked prefill 2048 tokens;"
echo "   EDF demotes a request once it is within late_margin_s (default 0.2 s) of its latest start"
slo() {  # NAME SCALE ROUTER ORDER DEMOTE REJECT_INFEASIBLE
  cat >"$out/$1.yaml" <<YAML
seed: 42
deployments:
  - name: code
    model: llama-2-7b
    gpu: A100-80GB
    replicas: 4
    max_ongoing_requests: 4
    router: {policy: $3}
    queue: {order: $4, demote_late: $5, reject_infeasible: $6}
    engine: {max_num_batched_tokens: 2048}
tenant_defaults:
  slo: {ttft_s: 1.0, tpot_s: 0.1}
workload:
  trace: {format: azure, path: $data/azure-llm-inference-2023/AzureLLMInferenceTrace_code.csv}
  time_scale: $2
YAML
  run "$1"
}
attain() { python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['overall']['slo_attainment'])" "$1"; }
scale=""
for s in 0.5 0.75 1 1.25 1.5 1.75 2 2.5 3 4; do
  slo "slo-base-$s" "$s" round-robin fcfs false false
  a=$(attain "$out/slo-base-$s.json")
  echo "time scale $s: round-robin + FCFS attains $a"
  if python3 -c "import sys; sys.exit(0 if float('$a') < 0.8 else 1)"; then scale=$s; break; fi
done
slo "slo-order-$scale" "$scale" latency-predictive edf true false
slo "slo-ours-$scale" "$scale" latency-predictive edf true true
slo "slo-base-reject-$scale" "$scale" round-robin fcfs false true
python3 - "$scale" "$out/slo-base-$scale.json" "$out/slo-order-$scale.json" \
  "$out/slo-ours-$scale.json" "$out/slo-base-reject-$scale.json" <<'PY'
import json, sys
scale = sys.argv[1]
runs = [json.load(open(p))["overall"] for p in sys.argv[2:6]]
names = ("round-robin + FCFS",
         "latency-predictive + EDF (late demoted)",
         "  ... + deadline-feasibility admission",
         "round-robin + FCFS + deadline-feasibility admission")
base = runs[0]["slo_attainment"]
for name, r in zip(names, runs):
    a = r["slo_attainment"]
    print(f"scale {scale}: {name:52s} {100*a:5.1f}%  ({100*(a-base):+5.1f} points; "
          f"rejected {r['rejected']}, TTFT p90 {r['ttft_s']['p90']:.2f} s)")
print("target: >= +10 points over round-robin + FCFS")
PY
