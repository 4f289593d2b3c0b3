#!/usr/bin/env bash
# Every instance serves, behind a real load balancer (docs/ha.md): three
# gpusched instances on a 3-member etcd (tests/etcd/cluster.sh) behind
# HAProxy with the shipped configuration (deploy/haproxy/haproxy.cfg), on
# 127.0.0.1. The deployment's replicas are reference engines the test starts
# and attaches as endpoints (no drill here needs a cluster manager: ha_live
# runs Slurm jobs through the same failovers). Load: the official openai npm
# client (tests/e2e/ha_load.mjs), chat completions, every other one
# streamed, 8 at a time.
#   1. kill -9 of an instance every 10 s (each in turn, the leader too),
#      restarted 2 s later, with the client's default retries: no request
#      whose response had not begun fails (HAProxy and the client send it
#      again); a stream cut mid-response by its instance's death cannot be
#      resent (the OpenAI protocol has no resume): they are counted, and
#      each must be one HAProxy saw cut on a killed instance.
#   2. the same with client retries off: failures are at most the requests
#      HAProxy saw cut on the killed instances (its log's termination state),
#      every one accounted for.
#   3. a rolling restart (SIGTERM, wait, restart, the next) under load: no
#      failed request at all, and a long stream in flight on a draining
#      instance finishes with every token.
#   4. all of etcd down for 30 s under load: no failed request; every
#      instance says the store is unreachable (/api/v1/cluster, metrics) and
#      stays ready.
#   5. scale from zero through a follower: a request for a deployment at
#      zero replicas sent to a follower is held, the leader starts a replica,
#      and the request is answered.
# Skips where etcd, HAProxy or node are missing.
# Usage: ha_lb_test.sh GPUSCHED_BINARY SOURCE_DIR
set -u
bin="$1"
src="$2"
e2e="$src/tests/e2e"
source "$(dirname "$0")/lib.sh"
test_name=ha_lb
source "$(dirname "$0")/etcd/cluster.sh"

if ! why=$(etcd_available); then
  echo "ha_lb: skipped ($why)"
  exit 0
fi
if ! command -v haproxy >/dev/null 2>&1; then
  echo "ha_lb: skipped (haproxy is not installed; scripts/install-deps.sh installs it)"
  exit 0
fi
need_node_package ha_lb openai

etcd="$tmp/etcd"
declare -A ipid iport
epids=()
haproxy_pid=""
cleanup() {
  for n in "${!ipid[@]}"; do kill -9 "${ipid[$n]}" 2>/dev/null; done
  for p in "${epids[@]}"; do kill -9 "$p" 2>/dev/null; done
  [ -n "$haproxy_pid" ] && kill -9 "$haproxy_pid" 2>/dev/null
  # Engines an instance launched (the `cold` deployment) end with their
  # process group.
  for n in 1 2 3; do
    for f in "$tmp"/logs-gs$n/*.pid; do
      [ -f "$f" ] && kill -9 "$(cat "$f")" 2>/dev/null
    done
  done
  # Only the processes killed here (etcd's members are still running).
  for p in "${ipid[@]}" "${epids[@]}" $haproxy_pid; do
    wait "$p" 2>/dev/null
  done
  etcd_cluster_down "$etcd"
  if [ "$failures" -ne 0 ] && [ -n "${HA_LB_KEEP:-}" ]; then
    cp -r "$tmp" "$HA_LB_KEEP" && echo "ha_lb: logs kept in $HA_LB_KEEP"
  fi
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}

etcd_cluster_up "$etcd" 3 >"$tmp/etcd.log" 2>&1 ||
  { fail "etcd did not start: $(cat "$tmp/etcd.log")"; finish ha_lb; }

# Two engines, ~30 ms per token (a 24-token answer lasts ~0.7 s).
engines=""
for i in 1 2; do
  p=$(free_port)
  "$bin" engine --port "$p" --model chat --hidden 18 --mode profile \
    --profile-model baichuan-7b --gpu A10-24GB >"$tmp/engine$i.log" 2>&1 &
  epids+=($!)
  engines+="${engines:+, }127.0.0.1:$p"
done

lb=$(free_port)
for i in 1 2 3; do iport[$i]=$(free_port); done
config() {  # instance index
  cat <<YAML
listen: 127.0.0.1:${iport[$1]}
log_dir: $tmp/logs-gs$1
key_dir: $tmp/keys
health_check_period_ms: 500
drain_grace_s: 20
drain_delay_s: 1.5
store:
  etcd:
    endpoints: $(etcd_endpoints_yaml "$etcd")
    prefix: /ha-lb/
    request_timeout_ms: 1000
ha:
  instance_id: gs$1
deployments:
  - name: chat
    engine: {template: reference}
    endpoints: [$engines]
  - name: cold
    engine: {template: reference, args: ["--hidden", "16"]}
    replicas: 0
    autoscaling: {minReplicas: 0, maxReplicas: 1, upscaleDelayS: 0,
                  downscaleDelayS: 600, idleTimeoutS: 600}
tenants:
  - name: demo
YAML
}
url_of() { echo "http://127.0.0.1:${iport[$1]}"; }
start_inst() {  # index
  local i=$1
  config "$i" >"$tmp/gs$i.yaml"
  : >"$tmp/gs$i.out"
  "$bin" serve --config "$tmp/gs$i.yaml" >"$tmp/gs$i.out" 2>>"$tmp/gs$i.err" &
  ipid[$i]=$!
  for _ in $(seq 1 600); do
    grep -q "key:" "$tmp/gs$i.out" 2>/dev/null &&
      curl -sf -o /dev/null -m 2 "$(url_of "$i")/readyz" && return 0
    kill -0 "${ipid[$i]}" 2>/dev/null || break
    sleep 0.05
  done
  fail "instance gs$i did not start: $(tail -5 "$tmp/gs$i.err")"
  return 1
}
apiat() {  # index method path [curl args]
  curl -s -m 10 -X "$2" "$(url_of "$1")$3" -H "Authorization: Bearer $admin" "${@:4}"
}
leader() {  # the leader's id as instance I knows it ("" none)
  apiat "$1" GET /api/v1/cluster | cluster_leader
}
chat_at() {  # base-url model [body-file] -> status code
  curl -s -o "${3:-/dev/null}" -w '%{http_code}' -m 120 "$1/v1/chat/completions" \
    -H "Authorization: Bearer $demo" -H 'Content-Type: application/json' \
    -d "{\"model\":\"$2\",\"max_tokens\":4,\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}"
}

for i in 1 2 3; do start_inst "$i" || finish ha_lb; done
admin=$(cat "$tmp/keys/admin.key")
demo=$(cat "$tmp/keys/demo.key")

GPUSCHED_LISTEN=127.0.0.1:$lb GPUSCHED_1=127.0.0.1:${iport[1]} \
  GPUSCHED_2=127.0.0.1:${iport[2]} GPUSCHED_3=127.0.0.1:${iport[3]} \
  haproxy -f "$src/deploy/haproxy/haproxy.cfg" >"$tmp/haproxy.log" 2>&1 &
haproxy_pid=$!
lburl="http://127.0.0.1:$lb"

# Every instance serves chat (the followers from what the leader publishes).
for i in 1 2 3; do
  ok=""
  for _ in $(seq 1 400); do
    [ "$(chat_at "$(url_of "$i")" chat)" = 200 ] && { ok=1; break; }
    sleep 0.1
  done
  [ -n "$ok" ] || fail "gs$i does not serve chat: $(tail -3 "$tmp/gs$i.err")"
done
for _ in $(seq 1 100); do
  [ "$(chat_at "$lburl" chat)" = 200 ] && break
  sleep 0.1
done
[ "$(chat_at "$lburl" chat)" = 200 ] || fail "nothing served through HAProxy: $(tail -5 "$tmp/haproxy.log")"
[ "$failures" -eq 0 ] || finish ha_lb

# HA_LB_DRILLS=5 runs only drill 5 (for debugging; HA_LB_KEEP=DIR keeps
# the logs of a failed run there).
want() { [[ "${HA_LB_DRILLS:-12345}" == *$1* ]]; }

# load SECONDS RETRIES NAME: the openai client's load in the background;
# its summary lands in $tmp/NAME.json.
load() {
  node "$e2e/ha_load.mjs" "$lburl/v1" "$demo" "$1" 8 "$2" >"$tmp/$3.json" 2>"$tmp/$3.err" &
  load_pid=$!
}
# field NAME EXPR: a python expression over the summary `s`.
field() { python3 -c "import json; s=json.load(open('$tmp/$1.json')); print($2)"; }
# Requests HAProxy saw cut by their server (termination state S...) on
# instance gsI since log line L.
cut_on() {  # index from-line
  tail -n +"$2" "$tmp/haproxy.log" | grep -c "instances/gs$1 .* S[A-Z-]-- " || true
}
kill_restart_drill() {  # name retries
  load 44 "$2" "$1"
  local cut=0 kills=0
  for k in 1 2 3 4; do
    sleep 10
    local i=$(( (k - 1) % 3 + 1 ))
    local from
    from=$(($(wc -l <"$tmp/haproxy.log") + 1))
    kill -9 "${ipid[$i]}"
    wait "${ipid[$i]}" 2>/dev/null
    kills=$((kills + 1))
    sleep 2
    start_inst "$i" || return 1
    sleep 0.5
    cut=$((cut + $(cut_on "$i" "$from")))
  done
  wait "$load_pid"
  echo "$cut" >"$tmp/$1.cut"
  echo "ha_lb: $1: $(field "$1" "s['requests']") requests, $(field "$1" "s['failed']") failed" \
    "($(field "$1" "sum(1 for f in s['failures'] if f['begun'])") mid-stream), $kills kills," \
    "$cut cut by a killed instance as HAProxy saw them"
}

# --- 1. kill -9 every 10 s, default retries --------------------------------
if want 1; then
  kill_restart_drill kill_retries default
  before=$(field kill_retries "sum(1 for f in s['failures'] if not f['begun'])")
  [ "$before" = 0 ] || fail "kill -9 with retries: $before requests failed before their response began: $(field kill_retries "s['failures']")"
  mid=$(field kill_retries "sum(1 for f in s['failures'] if f['begun'])")
  [ "$mid" -le "$(cat "$tmp/kill_retries.cut")" ] ||
    fail "kill -9 with retries: $mid streams cut, more than HAProxy saw cut on killed instances ($(cat "$tmp/kill_retries.cut"))"
  [ "$(field kill_retries "s['ok']")" -gt 100 ] || fail "kill -9 with retries: too little load went through: $(cat "$tmp/kill_retries.json")"
fi

# --- 2. the same, client retries off -----------------------------------------
if want 2; then
  kill_restart_drill kill_no_retries 0
  failed=$(field kill_no_retries "s['failed']")
  [ "$failed" -le "$(cat "$tmp/kill_no_retries.cut")" ] ||
    fail "kill -9 without retries: $failed failed, more than the $(cat "$tmp/kill_no_retries.cut") HAProxy saw cut on killed instances: $(field kill_no_retries "s['failures']")"
fi

# --- 3. rolling restart -------------------------------------------------------
if want 3; then
  load 40 default rolling
  sleep 3
  for i in 1 2 3; do
    # A long stream (150 tokens, ~4.5 s) straight to the instance, then
    # SIGTERM while it runs: it must finish.
    curl -sN -m 60 "$(url_of "$i")/v1/chat/completions" -H "Authorization: Bearer $demo" \
      -H 'Content-Type: application/json' \
      -d '{"model":"chat","max_tokens":150,"stream":true,"messages":[{"role":"user","content":"long"}]}' \
      >"$tmp/drain$i.sse" &
    spid=$!
    for _ in $(seq 1 200); do
      [ "$(grep -c '^data: ' "$tmp/drain$i.sse" 2>/dev/null)" -ge 5 ] && break
      sleep 0.02
    done
    kill -TERM "${ipid[$i]}"
    wait "$spid"
    wait "${ipid[$i]}"
    rc=$?
    [ "$rc" = 0 ] || fail "rolling restart: gs$i exited with $rc on SIGTERM"
    tokens=$(grep -c '"content":"[^"]' "$tmp/drain$i.sse")
    grep -q '^data: \[DONE\]' "$tmp/drain$i.sse" && [ "$tokens" -ge 150 ] ||
      fail "rolling restart: the stream in flight on draining gs$i did not finish ($tokens tokens): $(tail -c 300 "$tmp/drain$i.sse")"
    start_inst "$i" || break
    sleep 2
  done
  wait "$load_pid"
  [ "$(field rolling "s['failed']")" = 0 ] ||
    fail "rolling restart: $(field rolling "s['failed']") failed: $(field rolling "s['failures']")"
  echo "ha_lb: rolling restart: $(field rolling "s['requests']") requests, $(field rolling "s['failed']") failed"
  restarts=$(apiat 1 GET /api/v1/replicas | python3 -c 'import json, sys
print(sum(r.get("restarts", 0) for r in json.load(sys.stdin)["items"]))')
  [ "$restarts" = 0 ] || fail "rolling restart: replicas restarted $restarts times"
  for p in "${epids[@]}"; do
    kill -0 "$p" 2>/dev/null || fail "an engine ended during the drills"
  done
fi

# --- 4. all of etcd down for 30 s ----------------------------------------------
if want 4; then
  load 40 default etcd_down
  sleep 3
  n=$(cat "$etcd/n")
  for m in $(seq 1 "$n"); do etcd_member_kill "$etcd" "$m"; done
  sleep 8
  for i in 1 2 3; do
    apiat "$i" GET /api/v1/cluster >"$tmp/cluster$i.json"
    grep -q '"reachable":false' "$tmp/cluster$i.json" ||
      fail "etcd down: gs$i does not say the store is unreachable: $(cat "$tmp/cluster$i.json")"
    curl -s "$(url_of "$i")/metrics" | grep -q '^gpusched_store_reachable{store="etcd"} 0' ||
      fail "etcd down: gs$i's metrics do not say the store is unreachable"
    curl -sf -o /dev/null "$(url_of "$i")/readyz" || fail "etcd down: gs$i is not ready"
  done
  sleep 22
  for m in $(seq 1 "$n"); do etcd_member_start "$etcd" "$m"; done
  etcd_wait_healthy "$etcd" 60 || fail "etcd did not come back"
  wait "$load_pid"
  [ "$(field etcd_down "s['failed']")" = 0 ] ||
    fail "etcd down: $(field etcd_down "s['failed']") failed: $(field etcd_down "s['failures']")"
  echo "ha_lb: etcd down 30 s: $(field etcd_down "s['requests']") requests, $(field etcd_down "s['failed']") failed"
fi

# --- 5. scale from zero through a follower --------------------------------------
if want 5; then
  lead=""
  for _ in $(seq 1 200); do
    lead=$(leader 1)
    [ -n "$lead" ] && break
    sleep 0.1
  done
  follower=""
  for i in 1 2 3; do [ "gs$i" != "$lead" ] && { follower=$i; break; }; done
  if [ -z "$lead" ] || [ -z "$follower" ]; then
    fail "no leader after the drills"
  else
    code=$(chat_at "$(url_of "$follower")" cold "$tmp/cold.out")
    [ "$code" = 200 ] || fail "scale from zero through follower gs$follower (leader $lead): HTTP $code: $(cat "$tmp/cold.out")"
    apiat "$follower" GET "/api/v1/events?kind=replica.cold_start" >"$tmp/cold.json"
    grep -q 'scaled from zero' "$tmp/cold.json" || fail "no replica.cold_start event: $(cat "$tmp/cold.json")"
    echo "ha_lb: scale from zero through follower gs$follower (leader $lead): HTTP $code"
    # Its engine ends with the deployment.
    apiat "$follower" DELETE /api/v1/deployments/cold >/dev/null
  fi
fi

for i in 1 2 3; do kill -TERM "${ipid[$i]}" 2>/dev/null; done
for i in 1 2 3; do wait "${ipid[$i]}" 2>/dev/null; unset "ipid[$i]"; done
finish ha_lb
