#!/usr/bin/env bash
# The gateway's overhead next to nginx, for docs/gateway.md ("Performance vs
# nginx"). One stub engine (bench/stub_upstream) on 127.0.0.1 is reached
#   direct    the load generator talks to the stub itself (the floor);
#   nginx     one worker process, proxy_pass to an upstream block with
#             keepalive, proxy_buffering off (SSE relayed as it arrives);
#   gpusched  `gpusched serve` with a deployment attached to the stub through
#             `endpoints:` and one tenant: the full path (API key, admission,
#             queue, router, proxy, relay);
# with the same load generator (bench/loadgen, one thread) in the same run:
#   1. max throughput, closed loop, the same C keep-alive connections;
#   2. latency, open loop (scheduled sends, no coordinated omission) at 50%
#      of gpusched's max: added = path minus direct, p50 and p99;
#   3. SSE, one stream at a time, 32 chunks: per-chunk latency (stub stamp
#      to client arrival) with the stub spacing chunks 200 us apart, and the
#      client-side interval between chunks sent back to back.
# Figures are medians over RUNS runs. With 2+ CPUs, each proxy (all of its
# threads) is pinned to CPU 0 and the stub and the load generator to CPU 1:
# one core per proxy, nothing else on it. Needs nginx (scripts/install-deps.sh).
# Usage: bench/gateway_vs_nginx.sh [BUILD_DIR] [RUNS] [SECONDS] [CONNECTIONS]
set -euo pipefail
build=$(realpath "${1:-build}")
runs=${2:-3}
seconds=${3:-5}
conns=${4:-64}
cd "$(dirname "$0")/.."
out=$(realpath -m out/gateway_vs_nginx)
mkdir -p "$out"
rm -f "$out"/*.jsonl
tmp=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$tmp"
}
trap cleanup EXIT

for b in gpusched bench/stub_upstream bench/loadgen; do
  [ -x "$build/$b" ] || { echo "missing $build/$b: cmake --build $build --target ${b##*/}" >&2; exit 1; }
done
nginx_bin=$(command -v nginx || echo /usr/sbin/nginx)
[ -x "$nginx_bin" ] || { echo "nginx not found: bash scripts/install-deps.sh" >&2; exit 1; }

if [ "$(nproc)" -ge 2 ]; then
  proxy_cpu=(taskset -c 0)
  load_cpu=(taskset -c 1)
  pinning="proxies on CPU 0, stub and load generator on CPU 1"
else
  proxy_cpu=()
  load_cpu=()
  pinning="no pinning (one CPU)"
fi
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
# wait_line FILE REGEX: the first match in FILE, waiting up to 20 s.
wait_line() {
  for _ in $(seq 200); do
    if grep -qE "$2" "$1" 2>/dev/null; then grep -m1 -oE "$2" "$1"; return; fi
    sleep 0.1
  done
  echo "timed out waiting for '$2' in $1:" >&2
  cat "$1" >&2
  exit 1
}

# The stub engine.
"${load_cpu[@]}" "$build/bench/stub_upstream" >"$tmp/stub.out" 2>&1 &
pids+=($!)
stub_port=$(wait_line "$tmp/stub.out" 'listening on [0-9]+' | awk '{print $3}')

# nginx: one worker, keep-alive upstream, logs in the temp dir.
nginx_port=$(free_port)
mkdir -p "$tmp/nginx"
cat >"$tmp/nginx/nginx.conf" <<CONF
worker_processes 1;
daemon off;
pid $tmp/nginx/nginx.pid;
error_log $tmp/nginx/error.log warn;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path $tmp/nginx/body;
  proxy_temp_path $tmp/nginx/proxy;
  fastcgi_temp_path $tmp/nginx/fastcgi;
  uwsgi_temp_path $tmp/nginx/uwsgi;
  scgi_temp_path $tmp/nginx/scgi;
  keepalive_requests 100000000;
  upstream stub {
    server 127.0.0.1:$stub_port;
    keepalive 256;
    keepalive_requests 100000000;
  }
  server {
    listen 127.0.0.1:$nginx_port;
    location / {
      proxy_pass http://stub;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_buffering off;
    }
  }
}
CONF
"${proxy_cpu[@]}" "$nginx_bin" -e "$tmp/nginx/error.log" -p "$tmp/nginx" -c "$tmp/nginx/nginx.conf" \
  >"$tmp/nginx.out" 2>&1 &
pids+=($!)

# gpusched: the stub attached as the only replica of deployment "stub".
cat >"$tmp/serve.yaml" <<YAML
listen: 127.0.0.1:0
state: ":memory:"
log_dir: $tmp/logs
deployments:
  - name: stub
    replicas: 0
    endpoints: [127.0.0.1:$stub_port]
    maxOngoingRequests: 4096
tenants:
  - name: bench
YAML
"${proxy_cpu[@]}" "$build/gpusched" serve --config "$tmp/serve.yaml" >"$tmp/serve.out" 2>"$tmp/serve.err" &
gpusched_pid=$!
pids+=($gpusched_pid)
gpusched_port=$(wait_line "$tmp/serve.out" 'listening on http://[0-9.]+:[0-9]+' | sed 's/.*://')
key=$(wait_line "$tmp/serve.out" 'tenant bench key: [^ ]+' | awk '{print $4}')
for _ in $(seq 50); do
  curl -s -o /dev/null "http://127.0.0.1:$nginx_port/healthz" && break
  sleep 0.1
done
threads=$(ls "/proc/$gpusched_pid/task" | wc -l)
echo "stub :$stub_port  nginx :$nginx_port (1 worker)  gpusched :$gpusched_port ($threads threads); $pinning"

# load TARGET FILE ARGS...: one loadgen run against TARGET, appended to FILE.
load() {
  local target=$1 file=$2
  shift 2
  local port key_args=()
  case $target in
    direct) port=$stub_port ;;
    nginx) port=$nginx_port ;;
    gpusched) port=$gpusched_port; key_args=(--key "$key") ;;
  esac
  "${load_cpu[@]}" "$build/bench/loadgen" --port "$port" "${key_args[@]}" "$@" |
    sed "s/^{/{\"target\":\"$target\",/" >>"$out/$file.jsonl"
}
targets=(direct nginx gpusched)
# Warm every path (connections, caches) before measuring.
for t in "${targets[@]}"; do load "$t" warmup --mode closed --connections "$conns" --duration 1 --warmup 0.5; done

echo "== 1. Max throughput: closed loop, $conns connections, ${seconds} s x $runs runs"
for r in $(seq "$runs"); do
  for t in "${targets[@]}"; do load "$t" max --mode closed --connections "$conns" --duration "$seconds"; done
done
rate=$(python3 - "$out/max.jsonl" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print(int(0.5 * statistics.median(r["rps"] for r in rows if r["target"] == "gpusched")))
PY
)
echo "== 2. Latency: open loop at $rate requests/s (50% of gpusched's max), $conns connections"
for r in $(seq "$runs"); do
  for t in "${targets[@]}"; do load "$t" latency --mode open --rate "$rate" --connections "$conns" --duration "$seconds"; done
done
echo "== 3. SSE: one stream at a time, 32 chunks (spaced 200 us; back to back)"
for r in $(seq "$runs"); do
  for t in "${targets[@]}"; do
    load "$t" sse_spaced --mode sse --connections 1 --chunks 32 --chunk-gap-us 200 --duration "$seconds"
    load "$t" sse_burst --mode sse --connections 1 --chunks 32 --chunk-gap-us 0 --duration "$seconds"
  done
done

python3 - "$out" "$runs" <<'PY'
import json, statistics, sys
out, runs = sys.argv[1], sys.argv[2]
def load(name):
    rows = [json.loads(l) for l in open(f"{out}/{name}.jsonl")]
    errors = sum(r["errors"] for r in rows)
    if errors:
        print(f"WARNING: {errors} failed requests in {name}")
    return rows
def med(rows, target, field):
    return statistics.median(r[field] for r in rows if r["target"] == target)
T = ("direct", "nginx", "gpusched")
mx = load("max")
print(f"\nmedians of {runs} runs")
print(f"{'':28s}{'direct':>12s}{'nginx':>12s}{'gpusched':>12s}   gpusched/nginx")
rps = {t: med(mx, t, "rps") for t in T}
print(f"{'max throughput (req/s)':28s}" + "".join(f"{rps[t]:12.0f}" for t in T) +
      f"   {rps['gpusched']/rps['nginx']:.2f}x  (target >= 1.00x)")
lat = load("latency")
rate = lat[0]["target_rps"]
for q in ("p50", "p90", "p99", "p999"):
    v = {t: med(lat, t, q + "_us") for t in T}
    print(f"{q + ' latency @' + format(rate, '.0f') + '/s (us)':28s}" + "".join(f"{v[t]:12.1f}" for t in T))
added = {}
for q in ("p50", "p99"):
    d = med(lat, "direct", q + "_us")
    added[q] = {t: med(lat, t, q + "_us") - d for t in ("nginx", "gpusched")}
    target = 50 if q == "p50" else 250
    print(f"{'added ' + q + ' (us)':28s}{'':12s}" + "".join(f"{added[q][t]:12.1f}" for t in ("nginx", "gpusched")) +
          f"   target gpusched <= {target} us")
sp = load("sse_spaced")
bu = load("sse_burst")
for q in ("chunk_p50_us", "chunk_p99_us"):
    v = {t: med(sp, t, q) for t in T}
    print(f"{'SSE chunk ' + q.split('_')[1] + ' latency (us)':28s}" + "".join(f"{v[t]:12.1f}" for t in T))
    print(f"{'  added per chunk (us)':28s}{'':12s}" +
          "".join(f"{v[t] - v['direct']:12.1f}" for t in ("nginx", "gpusched")) +
          ("   target gpusched <= 50 us" if q == "chunk_p50_us" else ""))
v = {t: med(bu, t, "interval_p50_us") for t in T}
print(f"{'SSE burst interval (us)':28s}" + "".join(f"{v[t]:12.2f}" for t in T))
print(f"{'  added per chunk (us)':28s}{'':12s}" +
      "".join(f"{v[t] - v['direct']:12.2f}" for t in ("nginx", "gpusched")))
print(f"raw runs: {out}/*.jsonl")
PY
