#!/usr/bin/env bash
# `make ha-demo`: a local HA installation in one command (docs/ha.md, "Try
# it"): a 3-member etcd, three gpusched instances and HAProxy
# (deploy/haproxy/haproxy.cfg) in front, on this machine, with a traffic
# generator printing one line a second. Kill an instance (the command is
# printed) and watch the traffic go on and the dashboard name a new leader.
# Ctrl-C stops everything it started, by pid, and removes its files.
#
# The replicas are reference engines the demo starts itself and attaches as
# endpoints, so that they outlive any instance, as Slurm jobs and Pods do
# (local engines that an instance launches end with it: docs/ha.md).
# Ports: HAProxy on GPUSCHED_DEMO_PORT (default 8080), the instances on the
# next three; etcd and the engines on free ports.
# Usage: scripts/ha-demo.sh [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
build=$(realpath "${1:-build}")
bin="$build/gpusched"
port=${GPUSCHED_DEMO_PORT:-8080}
[ -x "$bin" ] || { echo "ha-demo: missing $bin (make build)" >&2; exit 1; }
for c in etcd etcdctl haproxy curl python3; do
  command -v "$c" >/dev/null || { echo "ha-demo: $c is not installed (scripts/install-deps.sh)" >&2; exit 1; }
done
source tests/etcd/cluster.sh

dir=$(mktemp -d /tmp/gpusched-ha-demo.XXXXXX)
pids=()
cleanup() {
  trap - INT TERM EXIT
  echo
  echo "ha-demo: stopping"
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  etcd_cluster_down "$dir/etcd"
  rm -rf "$dir"
  echo "ha-demo: stopped"
}
trap cleanup EXIT
trap 'exit 0' INT TERM

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}

echo "ha-demo: etcd (3 members) ..."
etcd_cluster_up "$dir/etcd" 3 >"$dir/etcd.log" 2>&1 || { cat "$dir/etcd.log"; exit 1; }

# Two reference engines: the deployment's replicas, outliving any instance.
engines=""
for i in 1 2; do
  p=$(free_port)
  "$bin" engine --port "$p" --model chat --hidden 64 --layers 2 \
    >"$dir/engine$i.log" 2>&1 &
  pids+=($!)
  engines+="${engines:+, }127.0.0.1:$p"
done

for i in 1 2 3; do
  cat >"$dir/gs$i.yaml" <<YAML
listen: 127.0.0.1:$((port + i))
log_dir: $dir/logs-gs$i
key_dir: $dir/keys
store:
  etcd:
    endpoints: $(etcd_endpoints_yaml "$dir/etcd")
    prefix: /ha-demo/
ha:
  instance_id: gs$i
deployments:
  - name: chat
    engine: {template: reference}
    endpoints: [$engines]
tenants:
  - name: demo
YAML
done
for i in 1 2 3; do
  "$bin" serve --config "$dir/gs$i.yaml" >"$dir/gs$i.out" 2>"$dir/gs$i.err" &
  pids+=($!)
  echo "$!" >"$dir/gs$i.pid"
  for _ in $(seq 1 300); do
    grep -q "key:" "$dir/gs$i.out" 2>/dev/null && break
    sleep 0.05
  done
  grep -q "key:" "$dir/gs$i.out" || { echo "ha-demo: gs$i did not start:"; tail "$dir/gs$i.err"; exit 1; }
  echo "ha-demo: gpusched gs$i on http://127.0.0.1:$((port + i)) (pid $(cat "$dir/gs$i.pid"))"
done

GPUSCHED_LISTEN=127.0.0.1:$port GPUSCHED_1=127.0.0.1:$((port + 1)) \
  GPUSCHED_2=127.0.0.1:$((port + 2)) GPUSCHED_3=127.0.0.1:$((port + 3)) \
  haproxy -f deploy/haproxy/haproxy.cfg >"$dir/haproxy.log" 2>&1 &
pids+=($!)

admin=$(cat "$dir/keys/admin.key")
demo=$(cat "$dir/keys/demo.key")
for _ in $(seq 1 100); do
  curl -sf -o /dev/null "http://127.0.0.1:$port/readyz" && break
  sleep 0.1
done
leader() {
  curl -s -m 2 "http://127.0.0.1:$port/api/v1/cluster" -H "Authorization: Bearer $admin" |
    python3 -c 'import json,sys
try:
    l = json.load(sys.stdin)["leader"]; print(l["id"] if l else "none")
except Exception:
    print("?")'
}
cat <<TEXT

ha-demo: HAProxy on http://127.0.0.1:$port, in front of gs1..gs3 (leader: $(leader))
  dashboard:  http://127.0.0.1:$port/?key=$admin
  instances:  GPUSCHED_KEY=$admin $bin get instances --server http://127.0.0.1:$port
  kill one:   kill -9 \$(cat $dir/gs1.pid)      (or gs2, gs3; the leader is $(leader))
  chat:       curl http://127.0.0.1:$port/v1/chat/completions -H 'Authorization: Bearer $demo' \\
                -H 'Content-Type: application/json' -d '{"model":"chat","messages":[{"role":"user","content":"hi"}]}'
Traffic below: requests per second through HAProxy, failures, and the leader. Ctrl-C stops all.

TEXT
# The traffic generator: 4 requests in parallel, one summary line a second.
while :; do
  ok=0 failed=0
  end=$((SECONDS + 1))
  while [ $SECONDS -lt $end ]; do
    : >"$dir/codes"
    cpids=()
    for _ in 1 2 3 4; do
      curl -s -o /dev/null -w '%{http_code}\n' -m 10 "http://127.0.0.1:$port/v1/chat/completions" \
        -H "Authorization: Bearer $demo" -H 'Content-Type: application/json' \
        -d '{"model":"chat","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}' \
        >>"$dir/codes" &
      cpids+=($!)
    done
    wait "${cpids[@]}"
    ok=$((ok + $(grep -c '^200$' "$dir/codes" || true)))
    failed=$((failed + $(grep -vc '^200$' "$dir/codes" || true)))
  done
  printf '%s  %3d ok  %d failed  leader %s\n' "$(date +%T)" "$ok" "$failed" "$(leader)"
done
