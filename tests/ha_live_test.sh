#!/usr/bin/env bash
# High availability drills (docs/ha.md): three gpusched instances, each in a
# network namespace of its own, on a 3-member etcd cluster (tests/etcd/
# cluster.sh), with replicas as jobs of a real Slurm cluster in network
# namespaces (tests/slurm/cluster.sh). Throughout, a sampler reads Slurm's
# jobs every 100 ms: at no sampled moment may a replica have two live jobs.
#   1. kill -9 of the leader while replicas run -> a standby leads, adopts
#      every job (the same job ids, no duplicate, no restart), and an apply
#      made afterwards takes effect.
#   2. SIGTERM of every instance in turn (a rolling upgrade) -> no Slurm job
#      ends or restarts; the leadership moves at once (resignation).
#   3. the leader cut off from etcd (an nftables rule in its namespace) while
#      it keeps running -> it stops acting, a standby leads; healed, the old
#      leader follows.
#   4. one of the three etcd members killed (etcd's raft leader) -> no
#      interruption (writes wait through etcd's election rather than fail,
#      requests go on, gpusched's leader stays); all of etcd down for 30 s ->
#      replicas keep running and answering through every instance (each
#      serves from its last known state), control writes get 503 naming the
#      unreachable store, and everything resumes by itself when etcd returns.
# Every instance's gateway serves (the leader's ready replicas, as it
# publishes them): requests are sent through followers too.
# Skips only where network namespaces cannot be made (not root) or etcd is
# missing. Usage: ha_live_test.sh GPUSCHED_BINARY
set -u
bin="$1"
source "$(dirname "$0")/lib.sh"
test_name=ha_live
source "$(dirname "$0")/slurm/cluster.sh"
source "$(dirname "$0")/etcd/cluster.sh"

if ! why=$(slurm_cluster_available) || ! why=$(etcd_available); then
  echo "ha_live: skipped ($why)"
  exit 0
fi
cluster="$tmp/slurm"
etcd="$tmp/etcd"
declare -A ipid iurl
sampler=""
cleanup() {
  [ -n "$sampler" ] && kill "$sampler" 2>/dev/null
  for n in "${!ipid[@]}"; do kill -9 "${ipid[$n]}" 2>/dev/null; done
  etcd_cluster_down "$etcd"
  slurm_cluster_down "$cluster"
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

if ! slurm_cluster_up "$cluster" node1:h100:4:16:64000:100 \
  node2:h100:4:16:64000:100 node3:h100:4:16:64000:100 >"$tmp/cluster.log" 2>&1; then
  fail "the Slurm cluster did not start: $(cat "$tmp/cluster.log")"
  finish ha_live
fi
# etcd listens on the bridge, where every instance's namespace reaches it.
etcd_cluster_up "$etcd" 3 "$SLURM_BRIDGE_ADDR" >"$tmp/etcd.log" 2>&1 ||
  { fail "etcd did not start: $(cat "$tmp/etcd.log")"; finish ha_live; }

tag=$(cat "$cluster/tag")
net=$(cat "$cluster/net")
# An instance's host: a namespace on the cluster's bridge (removed with the
# cluster).
inst_ns() { echo "${tag}-gs$1"; }
for i in 1 2 3; do slurm_add_host "$cluster" "gs$i" "$net.$((200 + i))"; done

cat >"$tmp/deployments.yaml" <<YAML
$(drill_deployments)
tenants:
  - name: demo
YAML
config() {  # instance index
  cat <<YAML
listen: $net.$((200 + $1)):0
log_dir: $tmp/logs
key_dir: $tmp/keys
drain_grace_s: 5
store:
  etcd:
    endpoints: $(etcd_endpoints_yaml "$etcd")
    prefix: /ha-live/
    request_timeout_ms: 1000
ha:
  instance_id: gs$1
slurm:
  poll_interval_ms: 300
$(cat "$tmp/deployments.yaml")
YAML
}
# Starts instance I in its namespace; sets ipid[I] and iurl[I].
start_inst() {  # index [serve flags]
  local i=$1
  config "$i" >"$tmp/gs$i.yaml"
  : >"$tmp/gs$i.out"
  ip netns exec "$(inst_ns "$i")" "$bin" serve --config "$tmp/gs$i.yaml" \
    "${@:2}" >"$tmp/gs$i.out" 2>>"$tmp/gs$i.err" &
  ipid[$i]=$!
  iurl[$i]=""
  for _ in $(seq 1 600); do
    iurl[$i]=$(grep -o 'listening on http://[0-9.:]*' "$tmp/gs$i.out" 2>/dev/null | head -1 | sed 's/listening on //')
    [ -n "${iurl[$i]}" ] && grep -q "key:" "$tmp/gs$i.out" && return 0
    kill -0 "${ipid[$i]}" 2>/dev/null || break
    sleep 0.05
  done
  fail "instance gs$i did not start: $(tail -5 "$tmp/gs$i.err")"
  return 1
}
stop_inst() {  # index signal
  kill "-$2" "${ipid[$1]}" 2>/dev/null
  wait "${ipid[$1]}" 2>/dev/null
  unset "ipid[$1]"
}
# The control API of instance I.
apiat() {  # index method path [curl args]
  curl -s -m 10 -X "$2" "${iurl[$1]}$3" -H "Authorization: Bearer $admin" "${@:4}"
}
leader_of() {  # index -> the leader's id as instance I knows it ("" none)
  apiat "$1" GET /api/v1/cluster | cluster_leader
}
acting() {  # index -> True/False: instance I leads and acts
  apiat "$1" GET /api/v1/cluster | python3 -c '
import json, sys
try:
    print(json.load(sys.stdin)["leading"])
except Exception:
    print("?")'
}
# Until some instance of `candidates` acts as the leader: prints its index.
wait_leader() {  # seconds candidates...
  local deadline=$((SECONDS + $1)) i
  while [ $SECONDS -lt $deadline ]; do
    for i in "${@:2}"; do
      [ "$(acting "$i")" = True ] && { echo "$i"; return 0; }
    done
    sleep 0.1
  done
  return 1
}
# gpusched's running jobs, "name jobid" sorted.
jobs_view() {
  squeue -h -t running,pending,configuring -o '%j %i %T' |
    awk '$1 ~ /^gpusched\./ {print substr($1, 10), $2, $3}' | sort
}
running_ids() { squeue -h -t running -o '%j %i' | awk '$1 ~ /^gpusched\./ {print $2}' | sort; }
ready_at() {  # index deployment -> ready replicas as instance I says
  apiat "$1" GET "/api/v1/deployments/$2" | python3 -c '
import json, sys
try:
    print(json.load(sys.stdin)["status"]["readyReplicas"])
except Exception:
    print(-1)'
}
wait_ready_at() {  # index deployment count seconds
  for _ in $(seq 1 $(($4 * 10))); do
    [ "$(ready_at "$1" "$2")" = "$3" ] && return 0
    sleep 0.1
  done
  return 1
}
chat_at() {  # index deployment -> status code
  curl -s -o /dev/null -w '%{http_code}\n' -m 60 "${iurl[$1]}/v1/chat/completions" \
    -H "Authorization: Bearer $demo" -H 'Content-Type: application/json' \
    -d "{\"model\":\"$2\",\"max_tokens\":4,\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}"
}
all_ready_at() {  # index seconds
  wait_ready_at "$1" solo 2 "$2" && wait_ready_at "$1" tp 1 "$2" &&
    wait_ready_at "$1" share 1 "$2"
}

# --- Start: gs1 first (it creates the keys and seeds the store) -------------
start_inst 1 || finish ha_live
admin=$(cat "$tmp/keys/admin.key")
demo=$(cat "$tmp/keys/demo.key")
start_inst 2 || finish ha_live
start_inst 3 || finish ha_live
leader=$(wait_leader 30 1 2 3) || { fail "no leader"; finish ha_live; }
echo "leader: gs$leader"
all_ready_at 1 60 || fail "the drill deployments are not ready: $(apiat 1 GET /api/v1/deployments)"
for _ in $(seq 1 100); do [ "$(running_ids | wc -l)" = 4 ] && break; sleep 0.1; done
running_ids >"$tmp/ids0"
[ "$(wc -l <"$tmp/ids0")" = 4 ] || fail "expected 4 running jobs: $(jobs_view)"

# The sampler: every 100 ms, any replica with two live jobs is a violation.
(
  n=0
  while :; do
    squeue -h -t running,pending,configuring,completing -o '%j' 2>/dev/null |
      awk '$1 ~ /^gpusched\./' | sort | uniq -d >"$tmp/dup.now"
    [ -s "$tmp/dup.now" ] && { date +%T.%N; cat "$tmp/dup.now"; } >>"$tmp/violations"
    n=$((n + 1))
    echo "$n" >"$tmp/samples"
    sleep 0.1
  done
) &
sampler=$!

same_jobs() {  # label: the running jobs are still the first four
  running_ids >"$tmp/ids.now"
  cmp -s "$tmp/ids0" "$tmp/ids.now" ||
    fail "$1: the jobs changed (ended or restarted): before $(tr '\n' ' ' <"$tmp/ids0") now $(jobs_view | tr '\n' ';')"
}

# --- 1. kill -9 of the leader -------------------------------------------------
old=$leader
others=$(for i in 1 2 3; do [ "$i" != "$old" ] && echo "$i"; done)
stop_inst "$old" 9
leader=$(wait_leader 30 $others) || { fail "1: no standby took over"; finish ha_live; }
echo "1: gs$old killed, gs$leader leads"
all_ready_at "$leader" 30 || fail "1: not every replica ready after the takeover"
same_jobs "1 (kill -9 of the leader)"
apiat "$leader" GET "/api/v1/events?kind=replica.adopted&limit=20" >"$tmp/adopted.json"
[ "$(grep -o '"kind":"replica.adopted"' "$tmp/adopted.json" | wc -l)" -ge 4 ] ||
  fail "1: expected the new leader to adopt 4 jobs: $(cat "$tmp/adopted.json")"
for i in $others; do
  for d in solo tp share; do [ "$(chat_at "$i" $d)" = 200 ] || fail "1: chat $d through gs$i failed"; done
done
start_inst "$old" || finish ha_live  # it comes back as a follower
[ "$(acting "$old")" = False ] || fail "1: the restarted gs$old acts beside gs$leader"
# An apply made now, through a follower, takes effect.
cat >"$tmp/extra.yaml" <<'YAML'
apiVersion: gpusched.io/v1
kind: Deployment
metadata: {name: extra}
spec:
  engine: {template: reference, args: ["--hidden", "20"]}
  resources: {whole: 1}
  replicas: 1
YAML
apiat "$old" POST /api/v1/apply --data-binary @"$tmp/extra.yaml" >"$tmp/apply.json"
expect_contains "$tmp/apply.json" '"action":"created"'
wait_ready_at "$old" extra 1 60 || fail "1: the deployment applied after the takeover is not ready"
apiat "$leader" DELETE /api/v1/deployments/extra >/dev/null
for _ in $(seq 1 150); do squeue -h -o %j | grep -q '^gpusched\.extra' || break; sleep 0.2; done
same_jobs "1 (after the extra deployment)"

# --- 2. A rolling restart: SIGTERM each instance in turn ----------------------
for i in 1 2 3; do
  stop_inst "$i" TERM
  same_jobs "2 (gs$i stopped with SIGTERM)"
  start_inst "$i" || finish ha_live
  l=$(wait_leader 30 1 2 3) || fail "2: no leader after gs$i restarted"
  all_ready_at "$l" 30 || fail "2: not every replica ready after gs$i restarted"
  same_jobs "2 (gs$i restarted)"
done
leader=$(wait_leader 30 1 2 3)
echo "2: rolling restart done, gs$leader leads"

# --- 3. The leader cut off from etcd ------------------------------------------
ports=$(awk '{print}' "$etcd/client_ports" | paste -sd, -)
ns=$(inst_ns "$leader")
ip netns exec "$ns" nft add table inet gstest
ip netns exec "$ns" nft add chain inet gstest out '{ type filter hook output priority 0; }'
ip netns exec "$ns" nft add rule inet gstest out ip daddr "$SLURM_BRIDGE_ADDR" tcp dport "{ $ports }" drop
cut=$leader
others=$(for i in 1 2 3; do [ "$i" != "$cut" ] && echo "$i"; done)
stopped=""
for _ in $(seq 1 100); do
  [ "$(acting "$cut")" = False ] && { stopped=yes; break; }
  sleep 0.1
done
[ -n "$stopped" ] || fail "3: the leader cut off from etcd still acts after 10 s"
leader=$(wait_leader 30 $others) || fail "3: no standby took over from the cut-off leader"
echo "3: gs$cut cut off, gs$leader leads"
all_ready_at "$leader" 30 || fail "3: not every replica ready after the takeover"
same_jobs "3 (leader cut off)"
ip netns exec "$ns" nft delete table inet gstest
for _ in $(seq 1 100); do [ "$(leader_of "$cut")" = "gs$leader" ] && break; sleep 0.1; done
[ "$(leader_of "$cut")" = "gs$leader" ] || fail "3: healed, gs$cut does not see gs$leader lead"
[ "$(acting "$cut")" = False ] || fail "3: healed, gs$cut acts beside gs$leader"
same_jobs "3 (healed)"

# --- 4. etcd members go away --------------------------------------------------
term_of() { apiat "$1" GET /api/v1/cluster | python3 -c 'import json,sys; print(json.load(sys.stdin)["leader"]["term"])'; }
term=$(term_of "$leader")
# etcd's own leader, the hardest member to lose: its followers elect another.
member=$(etcd_leader_member "$etcd")
[ -n "$member" ] || member=1
echo "4: killing etcd member $member (etcd's leader)"
etcd_member_kill "$etcd" "$member"
for i in 1 2 3; do
  [ "$(chat_at "$i" solo)" = 200 ] || fail "4: chat through gs$i failed with an etcd member down"
done
# A control write (a new key: always a write to the store).
write() {  # index out-file -> status code
  apiat "$1" POST /api/v1/tenants/demo/keys -d '{"name":"drill"}' -o "$2" -w '%{http_code}'
}
code=$(write "$leader" "$tmp/w1.json")
[ "$code" = 201 ] || fail "4: a write with one etcd member down answered $code: $(cat "$tmp/w1.json")"
[ "$(term_of "$leader")" = "$term" ] || fail "4: the leadership changed when one etcd member went away"
etcd_member_start "$etcd" "$member"
etcd_wait_healthy "$etcd" 30 || fail "4: etcd did not heal"

# All of etcd down for 30 s.
for m in 1 2 3; do etcd_member_kill "$etcd" "$m"; done
down_at=$SECONDS
fails=0 writes503=0
while [ $((SECONDS - down_at)) -lt 30 ]; do
  for i in 1 2 3; do
    [ "$(chat_at "$i" solo)" = 200 ] || fails=$((fails + 1))
  done
  code=$(write "$leader" "$tmp/w503.json")
  if [ "$code" = 503 ] && grep -q unreachable "$tmp/w503.json"; then
    writes503=$((writes503 + 1))
  elif [ $((SECONDS - down_at)) -gt 3 ]; then
    fail "4: a write with etcd down answered $code: $(cat "$tmp/w503.json")"
  fi
  sleep 1
done
[ "$fails" = 0 ] || fail "4: $fails requests failed while etcd was down"
[ "$writes503" -gt 0 ] || fail "4: no control write got a 503 naming the unreachable store"
same_jobs "4 (etcd down)"
for m in 1 2 3; do etcd_member_start "$etcd" "$m"; done
etcd_wait_healthy "$etcd" 60 || fail "4: etcd did not come back"
leader=$(wait_leader 60 1 2 3) || fail "4: no leader after etcd came back"
code=""
for _ in $(seq 1 100); do
  code=$(write "$leader" /dev/null)
  [ "$code" = 201 ] && break
  sleep 0.2
done
[ "$code" = 201 ] || fail "4: writes did not resume after etcd came back ($code)"
all_ready_at "$leader" 30 || fail "4: not every replica ready after etcd came back"
same_jobs "4 (etcd back)"
echo "4: etcd down for 30 s: $fails failed requests, $writes503 writes answered 503"

# --- The invariant, at every sampled moment ---------------------------------
kill "$sampler" 2>/dev/null
wait "$sampler" 2>/dev/null
sampler=""
echo "sampler: $(cat "$tmp/samples") samples of Slurm's jobs"
[ -s "$tmp/violations" ] && fail "a replica had two live jobs:
$(head -20 "$tmp/violations")"
# Every instance's events in one order, on every instance.
apiat 1 GET "/api/v1/events?kind=leader.elected&limit=50" >"$tmp/e1.json"
apiat 2 GET "/api/v1/events?kind=leader.elected&limit=50" >"$tmp/e2.json"
cmp -s "$tmp/e1.json" "$tmp/e2.json" || fail "the instances show different events"
[ "$(grep -o '"kind":"leader.elected"' "$tmp/e1.json" | wc -l)" -ge 3 ] ||
  fail "expected leader.elected events of several terms: $(cat "$tmp/e1.json")"

for i in 1 2 3; do stop_inst "$i" TERM; done
finish ha_live
