#!/usr/bin/env bash
# Live and simulated serving agree (issue 12): one scenario run both ways and
# printed side by side.
#
# Scenario, on a cluster of 2 GPUs (live: one declared node of 2 simulated
# GPUs; sim: cluster.gpus 2), reference engines in `--mode profile`
# (llama-2-7b on A100-80GB, the fitted latency model both sides use), each
# replica one whole GPU, a 2 s model load (live: the engine's
# --load-seconds; sim: cold_start_s):
#   - `batch` (autoscaled 0..1) gets 6 requests from t=1 s, then idles;
#   - `chat` (autoscaled 0..2, from zero) gets a burst of 6 req/s from
#     t=12 s for 25 s: it scales 0 -> 1 (held requests), then 1 -> 2, and
#     the second replica takes the GPU of batch's idle replica (a swap).
# The same trace (deterministic, seeded) is replayed live by a streaming
# client (bench/replay.py: TTFT = first token, E2E = last byte, from the
# scheduled arrival) and simulated by `gpusched sim serve`.
# Prints p50/p90 TTFT and E2E per deployment, live vs sim and their ratio
# (target: within +-10%), and the sequence of scale, swap and preemption
# decisions with their times (target: the same sequence, times within 1 s).
# Usage: bench/live_vs_sim.sh [BUILD_DIR]
set -euo pipefail
build=$(realpath "${1:-build}")
cd "$(dirname "$0")/.."
[ -x "$build/gpusched" ] || {
  echo "missing $build/gpusched" >&2
  exit 1
}
out=$(realpath -m out/live_vs_sim)
mkdir -p "$out"
tmp=$(mktemp -d)
pid=""
cleanup() {
  [ -n "$pid" ] && kill -TERM "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT

# The trace: arrival seconds, deployment, prompt words (tokens), max_tokens.
python3 - "$out/trace.csv" <<'PY'
import random, sys
rng = random.Random(7)
rows = [(1.0 + i, "batch", 200, 40) for i in range(6)]
t = 12.0
while t < 37.0:
    rows.append((round(t, 3), "chat", rng.randint(150, 450), rng.randint(60, 140)))
    t += rng.expovariate(6.0)
rows.sort()
with open(sys.argv[1], "w") as f:
    f.write("Request Time,Model Name,Input Length,Output Length\n")
    for t, m, i, o in rows:
        f.write("00:00:%06.3f,%s,%d,%d\n" % (t, m, i, o))
PY

load_s=2
autoscale_chat='minReplicas: 0, maxReplicas: 2, targetOngoingRequests: 8, lookBackPeriodS: 2, upscaleDelayS: 2, downscaleDelayS: 600, idleTimeoutS: 600'
autoscale_batch='minReplicas: 0, maxReplicas: 1, targetOngoingRequests: 8, lookBackPeriodS: 2, upscaleDelayS: 2, downscaleDelayS: 600, idleTimeoutS: 600'

# --- Simulated ---------------------------------------------------------------
snake() { sed -E 's/minReplicas/min_replicas/; s/maxReplicas/max_replicas/; s/targetOngoingRequests/target_ongoing_requests/; s/lookBackPeriodS/look_back_period_s/; s/upscaleDelayS/upscale_delay_s/; s/downscaleDelayS/downscale_delay_s/; s/idleTimeoutS/idle_timeout_s/'; }
cat >"$tmp/sim.yaml" <<YAML
seed: 1
cluster: {gpus: 2, gpus_per_node: 2}
autoscaling_interval_s: 0.05
load_sample_s: 1
deployments:
YAML
for d in batch chat; do
  a=$([ $d = chat ] && echo "$autoscale_chat" || echo "$autoscale_batch")
  cat >>"$tmp/sim.yaml" <<YAML
  - name: $d
    model: llama-2-7b
    gpu: A100-80GB
    max_ongoing_requests: 16
    engine: {max_num_seqs: 64, max_num_batched_tokens: 1000000, kv_capacity_tokens: 32768, block_tokens: 16}
    autoscaling: {$(echo "$a" | snake), cold_start_s: $load_s}
YAML
done
cat >>"$tmp/sim.yaml" <<YAML
workload:
  trace: {format: aegaeon, path: $out/trace.csv}
YAML
"$build/gpusched" sim serve --config "$tmp/sim.yaml" --omit-wall-time \
  --out "$out/sim.json" --requests "$out/sim_requests.csv" \
  --events "$out/sim_events.csv" 2>"$out/sim.err" >/dev/null

# --- Live ----------------------------------------------------------------------
cat >"$tmp/inventory.yaml" <<YAML
apiVersion: gpusched.io/v1
kind: Inventory
spec:
  nodes:
    - name: local
      cpu: "16"
      memory: 64Gi
      gpus: {model: A100-SXM4-80GB, count: 2}
YAML
engine="{template: reference, args: [\"--mode\", \"profile\", \"--profile-model\", \"llama-2-7b\", \"--gpu\", \"A100-80GB\", \"--load-seconds\", \"$load_s\", \"--max-num-seqs\", \"64\", \"--kv-blocks\", \"2048\", \"--block-tokens\", \"16\", \"--hidden\", \"16\", \"--layers\", \"1\"]}"
cat >"$tmp/serve.yaml" <<YAML
listen: 127.0.0.1:0
state: $tmp/state.db
log_dir: $tmp/logs
key_dir: $tmp/keys
inventory: $tmp/inventory.yaml
gpu_discovery: declared
deployments:
  - name: batch
    engine: $engine
    resources: {whole: 1}
    maxOngoingRequests: 16
    autoscaling: {$autoscale_batch}
  - name: chat
    engine: $engine
    resources: {whole: 1}
    maxOngoingRequests: 16
    autoscaling: {$autoscale_chat}
tenants:
  - name: demo
YAML
"$build/gpusched" serve --config "$tmp/serve.yaml" >"$tmp/out" 2>"$tmp/err" &
pid=$!
for _ in $(seq 1 600); do
  grep -q "all replicas ready" "$tmp/out" 2>/dev/null && break
  kill -0 "$pid" 2>/dev/null || break
  sleep 0.05
done
url=$(grep -o 'http://127.0.0.1:[0-9]*' "$tmp/out" | head -1 || true)
[ -n "$url" ] || {
  echo "gpusched serve did not start: $(tail -5 "$tmp/err")" >&2
  exit 1
}
start_wall=$(python3 -c 'import time; print(time.time())')
python3 bench/replay.py "$url" "$(cat "$tmp/keys/demo.key")" "$out/trace.csv" \
  "$start_wall" >"$out/live_requests.csv"
curl -s "$url/api/v1/events?limit=1000" \
  -H "Authorization: Bearer $(cat "$tmp/keys/admin.key")" >"$out/live_events.json"
kill -TERM "$pid"
wait "$pid" 2>/dev/null || true
pid=""

# --- Side by side --------------------------------------------------------------
python3 - "$out" "$start_wall" <<'PY' | tee "$out/table.md"
import csv, datetime, json, re, sys
out, start = sys.argv[1], float(sys.argv[2])

def pct(xs, p):
    xs = sorted(xs)
    if not xs:
        return float("nan")
    k = (len(xs) - 1) * p / 100
    lo = int(k)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)

sim = {}
for r in csv.DictReader(open(f"{out}/sim_requests.csv")):
    if r["outcome"] != "completed":
        continue
    a = float(r["arrival_s"])
    sim.setdefault(r["deployment"], []).append(
        (float(r["first_token_s"]) - a, float(r["finished_s"]) - a))
live, errors, live_end = {}, 0, 0.0
for r in csv.DictReader(open(f"{out}/live_requests.csv")):
    live_end = max(live_end, float(r["arrival_s"]) + float(r["e2e_s"]))
    if r["status"] != "200":
        errors += 1
        continue
    live.setdefault(r["deployment"], []).append(
        (float(r["ttft_s"]), float(r["e2e_s"])))

print("| deployment | metric | live | sim | sim/live | within 10% |")
print("|---|---|---|---|---|---|")
worst = 0.0
for d in sorted(set(sim) | set(live)):
    for i, name in ((0, "TTFT"), (1, "E2E")):
        for p in (50, 90):
            lv = pct([x[i] for x in live.get(d, [])], p)
            sv = pct([x[i] for x in sim.get(d, [])], p)
            ratio = sv / lv if lv > 0 else float("nan")
            worst = max(worst, abs(ratio - 1))
            print(f"| {d} ({len(live.get(d, []))} live, {len(sim.get(d, []))} sim) "
                  f"| {name} p{p} | {lv:.3f} s | {sv:.3f} s | {ratio:.2f} | "
                  f"{'yes' if abs(ratio - 1) <= 0.10 else 'no'} |")
print(f"\nlive requests that failed: {errors}; largest deviation {worst * 100:.1f}%\n")

kinds = ("deployment.autoscaled", "replica.evicted", "replica.preempted")
seq_sim = []
for r in csv.DictReader(open(f"{out}/sim_events.csv")):
    # Decisions while the live run lasted (the simulator goes on to the
    # idle timeouts).
    if r["kind"] in kinds and float(r["t_s"]) <= live_end:
        seq_sim.append((float(r["t_s"]), r["kind"], r["deployment"], r["message"]))
seq_live = []
for e in reversed(json.load(open(f"{out}/live_events.json"))["items"]):
    if e["kind"] not in kinds:
        continue
    t = datetime.datetime.fromisoformat(e["time"].replace("Z", "+00:00")).timestamp() - start
    if t > live_end:
        continue
    seq_live.append((t, e["kind"], e["deployment"], e["message"]))

def label(kind, dep, msg):
    if kind == "deployment.autoscaled":
        m = re.search(r"from (\d+) to (\d+)", msg)
        return f"{dep} scaled {m.group(1)} -> {m.group(2)}"
    return f"{dep} {kind.split('.')[1]}"
print("| # | live decision | t live | sim decision | t sim | same | dt |")
print("|---|---|---|---|---|---|---|")
same = len(seq_live) == len(seq_sim)
max_dt = 0.0
for i in range(max(len(seq_live), len(seq_sim))):
    l = seq_live[i] if i < len(seq_live) else None
    s = seq_sim[i] if i < len(seq_sim) else None
    ll = label(*l[1:]) if l else "-"
    sl = label(*s[1:]) if s else "-"
    ok = ll == sl
    same &= ok
    dt = abs(l[0] - s[0]) if l and s else float("nan")
    if l and s:
        max_dt = max(max_dt, dt)
    print(f"| {i + 1} | {ll} | {l[0]:.2f} s | {sl} | {s[0]:.2f} s | {'yes' if ok else 'no'} | {dt:.2f} s |"
          if l and s else f"| {i + 1} | {ll} | | {sl} | | no | |")
print(f"\nsame decision sequence (up to {live_end:.1f} s, the end of the live run): "
      f"{'yes' if same else 'no'}; largest time difference {max_dt:.2f} s")
PY
