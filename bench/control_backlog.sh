#!/usr/bin/env bash
# Responsiveness while the controller works through a backlog, for
# docs/reliability.md. Target (issue 15): control API p99 under 100 ms and
# the gateway's p99 unchanged while the controller works through the largest
# backlog the bounds allow: one apply of a deployment with replicas: 1000
# (the manifest bound) on a declared node of 1 GPU, fractions of 100
# milli: 8 replicas fit (next to chat's 200 milli) and start engines, the
# other 992 are placed, fail and retry every second.
# The same run three times in one invocation:
#   capped     max_launches_per_pass: 2 (the default; CAP=N to change)
#   paced      the same, with launch_interval_ms: 100 (INTERVAL=N to change)
#   uncapped   max_launches_per_pass: 100000 (every launch in one pass)
# In each: the gateway's p99 (a small completion to a ready deployment,
# sequential) before the apply (baseline) and during the backlog, and the
# control API's p50/p99 (GET /api/v1/deployments/chat and the list of
# every deployment) during it, measured for SECONDS after the apply; one
# client process each, one request at a time, paced: 100 gateway requests
# and 20 of each control API call per second.
# Usage: bench/control_backlog.sh [BUILD_DIR] [SECONDS]
set -euo pipefail
build=$(realpath "${1:-build}")
secs=${2:-8}
cd "$(dirname "$0")/.."
[ -x "$build/gpusched" ] || { echo "missing $build/gpusched" >&2; exit 1; }
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
    - {name: local, cpu: "64", memory: 512Gi, gpus: {model: H100-SXM-80GB, count: 1}}
YAML
cat >"$tmp/big.yaml" <<YAML
apiVersion: gpusched.io/v1
kind: Deployment
metadata: {name: big}
spec:
  engine: {template: reference, args: ["--hidden", "8", "--layers", "1"]}
  replicas: 1000
  resources: {fraction: {milli: 100, memory: 1Gi}}
YAML

run() {  # name max_launches_per_pass [launch_interval_ms]
  local dir="$tmp/$1"
  mkdir -p "$dir"
  cat >"$dir/serve.yaml" <<YAML
listen: 127.0.0.1:0
state: $dir/state.db
log_dir: $dir/logs
key_dir: $dir/keys
inventory: $tmp/inventory.yaml
health_check_period_ms: 500
max_launches_per_pass: $2
launch_interval_ms: ${3:-0}
deployments:
  - name: chat
    engine: {template: reference, args: ["--hidden", "8", "--layers", "1"]}
    replicas: 1
    resources: {fraction: {milli: 200, memory: 1Gi}}
tenants:
  - name: demo
YAML
  "$build/gpusched" serve --config "$dir/serve.yaml" >"$dir/out" 2>"$dir/err" &
  serve_pid=$!
  for _ in $(seq 1 600); do
    grep -q "all replicas ready" "$dir/out" 2>/dev/null && break
    sleep 0.05
  done
  local url
  url=$(grep -o 'http://127.0.0.1:[0-9]*' "$dir/out" | head -1)
  python3 - "$1" "$url" "$(cat "$dir/keys/admin.key")" "$(cat "$dir/keys/demo.key")" \
    "$tmp/big.yaml" "$secs" "$2" <<'PY'
import json, multiprocessing, sys, time, urllib.request
name, url, admin, demo, big, secs = sys.argv[1:7]
secs = float(secs)
def get(path, key, body=None):
    req = urllib.request.Request(url + path, data=body,
                                 headers={"Authorization": "Bearer " + key,
                                          "Content-Type": "application/json"})
    t = time.time()
    urllib.request.urlopen(req, timeout=30).read()
    return (time.time() - t) * 1e3
def loop(fn, until, out, every=0.01):
    # Open loop: a request is due every `every` s, and its latency counts
    # from when it was due, so a stall counts for every request it delays
    # (no coordinated omission). Paced, so the clients do not starve the 2
    # cores they share with the server.
    due = time.time()
    while due < until:
        time.sleep(max(0, due - time.time()))
        fn()
        out.append((time.time() - due) * 1e3)
        due += every
def pct(v, p):
    v = sorted(v)
    return v[min(len(v) - 1, int(p * len(v)))] if v else float("nan")
completion = json.dumps({"model": "chat", "prompt": "hi", "max_tokens": 1}).encode()
gw = lambda: get("/v1/completions", demo, completion)
base = []
loop(gw, time.time() + 3, base)
t0 = time.time()
get("/api/v1/apply", admin, open(big, "rb").read())
until = time.time() + secs
# One process per client (threads would time each other's GIL waits).
def client(which, q):
    out = []
    fn = {"one": lambda: get("/api/v1/deployments/chat", admin),
          "list": lambda: get("/api/v1/deployments", admin), "gw": gw}[which]
    loop(fn, until, out, 0.01 if which == "gw" else 0.05)
    q.put((which, out))
q = multiprocessing.Queue()
procs = [multiprocessing.Process(target=client, args=(w, q)) for w in ("one", "list", "gw")]
for p in procs: p.start()
got = dict(q.get() for _ in procs)
for p in procs: p.join()
one, lst, during = got["one"], got["list"], got["gw"]
status = json.loads(urllib.request.urlopen(urllib.request.Request(
    url + "/api/v1/deployments/big", headers={"Authorization": "Bearer " + admin})).read())
print(json.dumps({"run": name, "cap": int(sys.argv[7]), "gateway_p50_base": pct(base, .5), "gateway_p99_base": pct(base, .99),
                  "gateway_p50": pct(during, .5), "gateway_p99": pct(during, .99),
                  "api_one_p50": pct(one, .5), "api_one_p99": pct(one, .99),
                  "api_list_p50": pct(lst, .5), "api_list_p99": pct(lst, .99),
                  "api_calls": len(one) + len(lst), "gateway_calls": len(during),
                  "ready_big": status["status"].get("readyReplicas")}))
PY
  kill -TERM "$serve_pid" 2>/dev/null
  wait "$serve_pid" 2>/dev/null || true
  serve_pid=""

}

run capped ${CAP:-2} >"$tmp/capped.json"
run paced ${CAP:-2} ${INTERVAL:-100} >"$tmp/paced.json"
run uncapped 100000 >"$tmp/uncapped.json"
python3 - "$tmp/capped.json" "$tmp/uncapped.json" "$tmp/paced.json" <<'PY'
import json, sys
c, u, pc = (json.load(open(p)) for p in sys.argv[1:4])
rows = [("gateway p99 before the apply (ms)", "gateway_p99_base"),
        ("gateway p50 during the backlog (ms)", "gateway_p50"),
        ("gateway p99 during the backlog (ms)", "gateway_p99"),
        ("GET /api/v1/deployments/chat p50 (ms)", "api_one_p50"),
        ("GET /api/v1/deployments/chat p99 (ms)", "api_one_p99"),
        ("GET /api/v1/deployments p50 (ms)", "api_list_p50"),
        ("GET /api/v1/deployments p99 (ms)", "api_list_p99")]
print(f"{'':42s} {'capped (' + str(c['cap']) + ')':>12s} {'paced':>8s} {'uncapped':>12s} {'capped/uncapped':>16s} {'paced/capped':>13s}")
for label, k in rows:
    print(f"{label:42s} {c[k]:12.1f} {pc[k]:8.1f} {u[k]:12.1f} {c[k] / u[k] if u[k] else float('nan'):15.2f}x {pc[k] / c[k] if c[k] else float('nan'):12.2f}x")
print(f"calls: control API {c['api_calls']} / {pc['api_calls']} / {u['api_calls']}, gateway {c['gateway_calls']} / {pc['gateway_calls']} / {u['gateway_calls']}; "
      f"big ready replicas at the end {c['ready_big']} / {pc['ready_big']} / {u['ready_big']}")
print("target: control API p99 < 100 ms (capped: %s); gateway p99 during <= 1.5 x before (capped: %.2fx)" %
      ("met" if max(c["api_one_p99"], c["api_list_p99"]) < 100 else "not met",
       c["gateway_p99"] / c["gateway_p99_base"]))
PY
