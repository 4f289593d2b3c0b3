#!/usr/bin/env bash
# Soak (issue 15, item 8; not in CI): MINUTES (default 30) of traffic at
# about 70% of the gateway's measured capacity, with faults mixed in, then
# a check that nothing was lost and nothing was left behind.
#   * capacity: loadgen closed loop (8 connections, 10 s) against one
#     deployment of 3 reference-engine replicas on a declared node;
#   * traffic: loadgen open loop at 70% of it (non-streamed completions),
#     plus a closed loop of 2 streamed chat completions (SSE) all along;
#   * faults: every 20 s an engine is killed with SIGKILL (a random ready
#     replica; the controller restarts it, the gateway retries or migrates
#     what was in flight); every 60 s a second deployment is applied and,
#     30 s later, deleted;
#   * gpusched's RSS (VmRSS) and open file descriptors every 60 s.
# Every request must end as one complete answer or one clear error (an HTTP
# error answer, or a stream ended by an OpenAI error event): loadgen's
# "lost" must be 0. After SIGTERM no engine process may be left.
# Prints the samples and a JSON summary.
# Usage: bench/soak.sh [BUILD_DIR] [MINUTES]
set -euo pipefail
build=$(realpath "${1:-build}")
minutes=${2:-30}
cd "$(dirname "$0")/.."
for b in gpusched bench/loadgen; do
  [ -x "$build/$b" ] || { echo "missing $build/$b" >&2; exit 1; }
done
tmp=$(mktemp -d)
serve_pid=""
cleanup() {
  [ -n "$serve_pid" ] && kill -TERM "$serve_pid" 2>/dev/null && wait "$serve_pid" 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT

cat >"$tmp/inventory.yaml" <<YAML
apiVersion: gpusched.io/v1
kind: Inventory
spec:
  nodes:
    - {name: local, cpu: "64", memory: 512Gi, gpus: {model: H100-SXM-80GB, count: 2}}
YAML
cat >"$tmp/serve.yaml" <<YAML
listen: 127.0.0.1:0
state: $tmp/state.db
log_dir: $tmp/logs
key_dir: $tmp/keys
inventory: $tmp/inventory.yaml
health_check_period_ms: 500
deployments:
  - name: chat
    engine: {template: reference, args: ["--hidden", "8", "--layers", "1"]}
    replicas: 3
    resources: {fraction: {milli: 200, memory: 1Gi}}
tenants:
  - name: demo
YAML
cat >"$tmp/extra.yaml" <<YAML
apiVersion: gpusched.io/v1
kind: Deployment
metadata: {name: extra}
spec:
  engine: {template: reference, args: ["--hidden", "8", "--layers", "1"]}
  replicas: 2
  resources: {fraction: {milli: 200, memory: 1Gi}}
YAML

"$build/gpusched" serve --config "$tmp/serve.yaml" >"$tmp/out" 2>"$tmp/err" &
serve_pid=$!
for _ in $(seq 1 1200); do
  grep -q "all replicas ready" "$tmp/out" 2>/dev/null && break
  sleep 0.05
done
url=$(grep -o 'http://127.0.0.1:[0-9]*' "$tmp/out" | head -1)
port=${url##*:}
admin=$(cat "$tmp/keys/admin.key")
demo=$(cat "$tmp/keys/demo.key")
api() { curl -sf -H "Authorization: Bearer $admin" "$@"; }
body='{"model":"chat","prompt":"hello","max_tokens":8}'

cap=$("$build/bench/loadgen" --port "$port" --mode closed --connections 8 \
  --duration 10 --warmup 2 --key "$demo" --model chat --body "$body" \
  --path /v1/completions | python3 -c 'import json,sys; print(json.load(sys.stdin)["rps"])')
rate=$(python3 -c "print(max(1, round(0.7 * $cap)))")
echo "capacity ${cap} req/s (closed loop, 8 connections); soak at ${rate} req/s for ${minutes} min"

secs=$((minutes * 60))
"$build/bench/loadgen" --port "$port" --mode open --connections 64 --rate "$rate" \
  --duration "$secs" --warmup 5 --key "$demo" --model chat --body "$body" \
  --path /v1/completions >"$tmp/open.json" &
open_pid=$!
"$build/bench/loadgen" --port "$port" --mode sse --connections 2 --chunks 32 \
  --duration "$secs" --warmup 5 --key "$demo" --model chat \
  --path /v1/chat/completions >"$tmp/sse.json" &
sse_pid=$!

sample() {  # minute
  local rss fds
  rss=$(awk '/^VmRSS/ {print $2}' "/proc/$serve_pid/status")
  fds=$(ls "/proc/$serve_pid/fd" | wc -l)
  echo "{\"minute\": $1, \"rss_kib\": $rss, \"fds\": $fds}" | tee -a "$tmp/samples.jsonl"
}
start=$(date +%s)
kills=0
applies=0
next_kill=20 next_apply=60 next_delete=0 next_sample=0
while :; do
  t=$(($(date +%s) - start))
  [ "$t" -ge "$secs" ] && break
  if [ "$t" -ge "$next_sample" ]; then
    sample $((t / 60))
    next_sample=$((next_sample + 60))
  fi
  if [ "$t" -ge "$next_kill" ]; then
    pid=$(api "$url/api/v1/replicas" | python3 -c '
import json, random, sys
ready = [r["pid"] for r in json.load(sys.stdin)["items"]
         if r.get("deployment") == "chat" and r.get("state") == "ready" and r.get("pid")]
print(random.choice(ready) if ready else "")')
    if [ -n "$pid" ]; then kill -KILL "$pid" 2>/dev/null && kills=$((kills + 1)); fi
    next_kill=$((next_kill + 20))
  fi
  if [ "$t" -ge "$next_apply" ]; then
    api -X POST --data-binary @"$tmp/extra.yaml" "$url/api/v1/apply" >/dev/null
    applies=$((applies + 1))
    next_delete=$((t + 30))
    next_apply=$((next_apply + 60))
  fi
  if [ "$next_delete" -gt 0 ] && [ "$t" -ge "$next_delete" ]; then
    api -X DELETE "$url/api/v1/deployments/extra" >/dev/null || true
    next_delete=0
  fi
  sleep 1
done
wait "$open_pid" "$sse_pid"
sample "$minutes"

kill -TERM "$serve_pid"
wait "$serve_pid" 2>/dev/null || true
serve_pid=""
sleep 1
orphans=$(pgrep -f "^$build/gpusched engine" | wc -l || true)
python3 - "$tmp" "$kills" "$applies" "$orphans" "$rate" <<'PY'
import json, sys
tmp, kills, applies, orphans, rate = sys.argv[1:6]
o = json.load(open(tmp + "/open.json"))
s = json.load(open(tmp + "/sse.json"))
samples = [json.loads(l) for l in open(tmp + "/samples.jsonl")]
mid = samples[len(samples) // 2]
print(json.dumps({
    "rate": float(rate), "engine_kills": int(kills), "applies_and_deletes": int(applies),
    "completed": o["requests"] + s["requests"],
    "http_errors": o["http_errors"] + s["http_errors"],
    "stream_errors": s["stream_errors"], "lost": o["lost"] + s["lost"],
    "p50_us": o["p50_us"], "p99_us": o["p99_us"],
    "rss_kib_start_mid_end": [samples[1]["rss_kib"] if len(samples) > 1 else samples[0]["rss_kib"],
                              mid["rss_kib"], samples[-1]["rss_kib"]],
    "fds_start_mid_end": [samples[1]["fds"] if len(samples) > 1 else samples[0]["fds"],
                          mid["fds"], samples[-1]["fds"]],
    "orphan_engines": int(orphans)}, indent=1))
PY
