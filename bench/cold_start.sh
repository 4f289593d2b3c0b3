#!/usr/bin/env bash
# Cold-start overhead of a scale from zero, for docs/autoscaling.md (live
# section). Target (issue 5): the first request to a reference-engine
# deployment at zero replicas is answered, and gpusched's own part of the
# cold start (decision, placement, launch, readiness detection, release of
# the held request) adds <= 200 ms beyond the engine's own start time.
#   1. engine   the reference engine alone, launched as the controller's
#               reference template does (`gpusched engine --port P --model
#               M` plus the deployment's args), its readiness endpoint
#               (/v2/health/ready) polled every 2 ms: launch -> first 200.
#   2. serve    `gpusched serve` with a deployment at minReplicas 0
#               (idleTimeoutS 1): per run, once it is back at 0 replicas,
#               the latency of one request (cold), then of the same request
#               again (warm, the median of 3).
#   overhead = cold - warm - engine start (medians), against the 200 ms
# target; plus the controller's own phases from its replica.cold_start
# events (decision, placement, launch, engine start + readiness, release).
# Figures are medians over RUNS runs of each.
# Usage: bench/cold_start.sh [BUILD_DIR] [RUNS] [HIDDEN]
set -euo pipefail
build=$(realpath "${1:-build}")
runs=${2:-7}
hidden=${3:-64}
cd "$(dirname "$0")/.."
[ -x "$build/gpusched" ] || { echo "missing $build/gpusched: cmake --build $build --target gpusched" >&2; exit 1; }
out=$(realpath -m out/cold_start)
mkdir -p "$out"
tmp=$(mktemp -d)
serve_pid=""
cleanup() {
  [ -n "$serve_pid" ] && kill "$serve_pid" 2>/dev/null && wait "$serve_pid" 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT

cat >"$tmp/serve.yaml" <<YAML
listen: 127.0.0.1:0
state: $tmp/state.db
log_dir: $tmp/logs
key_dir: $tmp/keys
deployments:
  - name: cold
    engine: {template: reference, args: ["--hidden", "$hidden"]}
    autoscaling: {minReplicas: 0, maxReplicas: 1, idleTimeoutS: 1}
tenants:
  - name: bench
YAML
"$build/gpusched" serve --config "$tmp/serve.yaml" >"$tmp/out" 2>"$tmp/err" &
serve_pid=$!
url=""
for _ in $(seq 400); do
  url=$(grep -o 'http://127.0.0.1:[0-9]*' "$tmp/out" 2>/dev/null | head -1 || true)
  [ -n "$url" ] && [ -f "$tmp/keys/bench.key" ] && grep -q "tenant bench key" "$tmp/out" && break
  sleep 0.05
done
[ -n "$url" ] || { echo "serve did not start: $(cat "$tmp/err")" >&2; exit 1; }

python3 - "$build/gpusched" "$runs" "$hidden" "$url" "$tmp/keys/bench.key" \
  "$tmp/keys/admin.key" "$out/cold_start.json" <<'PY'
import json, socket, statistics, subprocess, sys, time, urllib.request

gpusched, runs, hidden, url, bench_key, admin_key, out = sys.argv[1:]
runs = int(runs)
bench_key = open(bench_key).read().split()[0]
admin_key = open(admin_key).read().split()[0]

def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p

def get(u, key=None, timeout=2):
    req = urllib.request.Request(u)
    if key:
        req.add_header("Authorization", "Bearer " + key)
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return r.status, r.read()

# 1. The engine alone.
engine = []
for _ in range(runs):
    port = free_port()
    t0 = time.perf_counter()
    p = subprocess.Popen([gpusched, "engine", "--port", str(port), "--model",
                          "cold", "--hidden", hidden],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    ready = None
    while ready is None and time.perf_counter() - t0 < 30:
        try:
            if get(f"http://127.0.0.1:{port}/v2/health/ready", timeout=1)[0] == 200:
                ready = time.perf_counter() - t0
        except Exception:
            time.sleep(0.002)
    p.terminate()
    p.wait()
    if ready is None:
        sys.exit("the engine did not become ready in 30 s")
    engine.append(ready * 1e3)

# 2. Through gpusched, from zero replicas.
body = json.dumps({"model": "cold", "prompt": "hello", "max_tokens": 1}).encode()

def request():
    req = urllib.request.Request(url + "/v1/completions", data=body,
                                 headers={"Authorization": "Bearer " + bench_key,
                                          "Content-Type": "application/json"})
    t0 = time.perf_counter()
    with urllib.request.urlopen(req, timeout=60) as r:
        r.read()
        status = r.status
    if status != 200:
        sys.exit(f"request answered {status}")
    return (time.perf_counter() - t0) * 1e3

def status():
    _, b = get(url + "/api/v1/deployments/cold", admin_key)
    return json.loads(b)["status"]

def wait_zero():
    for _ in range(1200):
        s = status()
        if s["replicas"] == 0 and s["desiredReplicas"] == 0:
            return
        time.sleep(0.025)
    sys.exit(f"the deployment did not scale back to zero: {s}")

cold, warm = [], []
for _ in range(runs):
    wait_zero()
    cold.append(request())
    warm.append(statistics.median(request() for _ in range(3)))
wait_zero()
_, b = get(url + "/api/v1/events?deployment=cold&kind=replica.cold_start&limit=1000",
           admin_key)
events = [e["details"] for e in json.loads(b)["items"]]

med = statistics.median
engine_ms, cold_ms, warm_ms = med(engine), med(cold), med(warm)
overhead = [c - w - engine_ms for c, w in zip(cold, warm)]
overhead_ms = med(overhead)
phases = {k: med(e[k] for e in events) for k in
          ("decision_ms", "placement_ms", "launch_ms", "engine_ready_ms",
           "release_ms", "total_ms", "gpusched_ms")} if events else {}
result = {"runs": runs, "hidden": int(hidden), "engine_start_ms": engine_ms,
          "cold_request_ms": cold_ms, "warm_request_ms": warm_ms,
          "overhead_ms": overhead_ms, "target_ms": 200,
          "overhead_vs_target": overhead_ms / 200, "events": len(events),
          "event_phases_ms": phases,
          "samples": {"engine": engine, "cold": cold, "warm": warm,
                      "overhead": overhead}}
json.dump(result, open(out, "w"), indent=1)
print(f"cold start, reference engine (--hidden {hidden}), medians of {runs} runs:")
print(f"  engine start alone (launch -> ready, 2 ms polls)  {engine_ms:8.1f} ms")
print(f"  first request at zero replicas (cold)             {cold_ms:8.1f} ms")
print(f"  the same request, warm                            {warm_ms:8.1f} ms")
print(f"  gpusched overhead = cold - warm - engine start    {overhead_ms:8.1f} ms"
      f"  ({overhead_ms / 200:.2f}x the 200 ms target)")
if phases:
    print(f"  controller phases ({len(events)} replica.cold_start events):"
          f" decision {phases['decision_ms']:.1f}, placement {phases['placement_ms']:.1f},"
          f" launch {phases['launch_ms']:.1f}, engine start + readiness"
          f" {phases['engine_ready_ms']:.1f}, release {phases['release_ms']:.1f},"
          f" total {phases['total_ms']:.1f} ms")
print(f"  (details: {out})")
PY
