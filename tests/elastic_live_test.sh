#!/usr/bin/env bash
# End-to-end drills of "many models, few GPUs" in `gpusched serve` (the real
# binary, reference engines, 127.0.0.1, port 0), on two declared 80 GB GPUs
# where each replica asks 60 GiB, so one replica fits per GPU:
#   1. swap under memory pressure: three scale-to-zero models, room for two;
#      a request for the third swaps out the least recently used idle one
#      (drained), and is answered; then the first one comes back the same
#      way. Every request is answered 200. After a restart each model is
#      back at the count last decided for it.
#   2. preemption: a batch deployment holds both GPUs with requests in
#      flight; a request for a critical deployment at zero replicas
#      preempts one batch replica by the cluster layer's rules: it drains
#      (its in-flight requests finish), the critical replica starts and
#      answers, and every batch request is answered 200. Once critical is
#      idle again, batch gets its replica back.
#   3. weights-local placement: a replica comes back to the node where its
#      declared weights were loaded.
# Usage: elastic_live_test.sh GPUSCHED_BINARY SOURCE_DIR
set -u
bin="$1"
source "$(dirname "$0")/lib.sh"

# Engine width 26: unlike the other tests' engines (ctest runs tests at
# once). Profile mode (~30 ms per token) keeps requests in flight.
engine='{template: reference, args: ["--hidden", "26", "--mode", "profile", "--profile-model", "baichuan-7b", "--gpu", "A10-24GB"]}'
big='{fraction: {milli: 500, memory: 60Gi}}'

serve() {  # config -> url, pid, admin, demo
  serve_until_ready "$1"
  served_or_finish elastic_live
  admin=$(cat "$tmp/keys/admin.key")
  demo=$(cat "$tmp/keys/demo.key")
}
stop() {
  kill -TERM "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
  rm -rf "$tmp/state.db" "$tmp/keys" "$tmp/logs"
}
api() {  # method path [curl args] -> body on stdout
  curl -s -X "$1" "$url$2" -H "Authorization: Bearer $admin" "${@:3}"
}
wait_for() { wait_status "$@"; }
chat() {  # deployment max_tokens -> the status code on stdout
  curl -s -o /dev/null -w '%{http_code}\n' -m 60 "$url/v1/chat/completions" \
    -H "Authorization: Bearer $demo" -H 'Content-Type: application/json' \
    -d "{\"model\":\"$1\",\"max_tokens\":$2,\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}"
}
events() {  # kind -> JSON
  api GET "/api/v1/events?kind=$1&limit=100"
}

# --- 1. Swap under memory pressure ------------------------------------------
{ serve_config_head; cat <<YAML; } >"$tmp/swap.yaml"
drain_grace_s: 5
deployments:
YAML
for m in a b c; do cat >>"$tmp/swap.yaml" <<YAML
  - name: $m
    engine: $engine
    resources: $big
    autoscaling: {minReplicas: 0, maxReplicas: 1, idleTimeoutS: 600}
YAML
done
printf 'tenants:\n  - name: demo\n' >>"$tmp/swap.yaml"
serve "$tmp/swap.yaml"

codes=""
codes="$codes $(chat a 4)"
sleep 0.3  # a is now the least recently used
codes="$codes $(chat b 4)"
wait_for a 's["readyReplicas"] == 1' 5 && wait_for b 's["readyReplicas"] == 1' 5 ||
  fail "a and b should both be up: $(api GET /api/v1/deployments)"
# c does not fit: a (idle, least recently used) is swapped out.
codes="$codes $(chat c 4)"
events replica.evicted >"$tmp/evicted.json"
[ "$(jq_py 'any(e["deployment"] == "a" and e["details"]["for"] == "c" for e in j["items"])' <"$tmp/evicted.json")" = True ] ||
  fail "a should have been swapped out for c: $(cat "$tmp/evicted.json")"
wait_for a 's["replicas"] == 0 and s["desiredReplicas"] == 0' 10 ||
  fail "a should be at 0 replicas after the swap: $(api GET /api/v1/deployments/a)"
# a comes back: b is now the least recently used idle one.
codes="$codes $(chat a 4)"
events replica.evicted >"$tmp/evicted.json"
[ "$(jq_py 'any(e["deployment"] == "b" and e["details"]["for"] == "a" for e in j["items"])' <"$tmp/evicted.json")" = True ] ||
  fail "b should have been swapped out for a: $(cat "$tmp/evicted.json")"
[ "$(echo $codes)" = "200 200 200 200" ] || fail "swap drill answers: $codes"
curl -s "$url/metrics" | grep -q '^gpusched_evictions_total [2-9]' ||
  fail "evictions not counted: $(curl -s "$url/metrics" | grep evictions)"
# A restart resumes each autoscaled deployment at the count last decided
# for it (a and c up, b swapped out), from the event log.
kill -TERM "$pid" 2>/dev/null
wait "$pid" 2>/dev/null
serve "$tmp/swap.yaml"
desired() { api GET "/api/v1/deployments/$1" | jq_py 'j["status"]["desiredReplicas"]'; }
[ "$(desired a) $(desired b) $(desired c)" = "1 0 1" ] ||
  fail "after a restart: desired a b c = $(desired a) $(desired b) $(desired c), want 1 0 1"
wait_for a 's["readyReplicas"] == 1' 10 && wait_for c 's["readyReplicas"] == 1' 10 ||
  fail "a and c should be running again after the restart"
stop

# --- 2. Preemption drill -----------------------------------------------------
{ serve_config_head; cat <<YAML; } >"$tmp/preempt.yaml"
drain_grace_s: 20
deployments:
  - name: offline
    priorityClass: batch
    replicas: 2
    engine: $engine
    resources: $big
  - name: urgent
    priorityClass: critical
    engine: $engine
    resources: $big
    autoscaling: {minReplicas: 0, maxReplicas: 1, idleTimeoutS: 2}
tenants:
  - name: demo
YAML
serve "$tmp/preempt.yaml"
wait_for offline 's["readyReplicas"] == 2' 10 || fail "offline should start with 2 replicas"
# Batch load: 4 clients, 4 long requests each (~1.5 s each), in flight when
# the preemption comes.
loaders=""
for c in 1 2 3 4; do
  (for _ in 1 2 3 4; do chat offline 50; done >"$tmp/batch.$c") &
  loaders="$loaders $!"
done
sleep 0.5
urgent=$(chat urgent 4)
[ "$urgent" = 200 ] || fail "the critical request should be answered: $urgent"
events replica.preempted >"$tmp/preempted.json"
[ "$(jq_py 'len(j["items"]) == 1 and j["items"][0]["deployment"] == "offline" and j["items"][0]["details"]["for"] == "urgent" and j["items"][0]["details"]["preemptor_priority"] > j["items"][0]["details"]["priority"] and len(j["items"][0]["details"]["rule"]) > 0' <"$tmp/preempted.json")" = True ] ||
  fail "one offline replica should have been preempted for urgent: $(cat "$tmp/preempted.json")"
for p in $loaders; do wait "$p"; done
total=$(cat "$tmp"/batch.* | wc -l)
ok=$(cat "$tmp"/batch.* | grep -c '^200$')
[ "$total" = 16 ] && [ "$ok" = 16 ] ||
  fail "every batch request should complete: $ok of $total ($(sort "$tmp"/batch.* | uniq -c))"
# The victim drained (its requests above all completed).
api GET "/api/v1/events?deployment=offline&limit=200" >"$tmp/offline.json"
[ "$(jq_py 'any(e["kind"] == "replica.draining" and "preempted by" in e["message"] for e in j["items"])' <"$tmp/offline.json")" = True ] ||
  fail "the victim should have drained: $(cat "$tmp/offline.json")"
curl -s "$url/metrics" | grep -q '^gpusched_preemptions_total [1-9]' ||
  fail "preemptions not counted"
# urgent idles (2 s) and goes to 0; offline gets its second replica back.
wait_for urgent 's["replicas"] == 0' 20 || fail "urgent should scale back to 0"
wait_for offline 's["readyReplicas"] == 2' 20 ||
  fail "offline should be back to 2 replicas: $(api GET /api/v1/deployments/offline)"
stop

# --- 3. Weights-local placement ----------------------------------------------
# Two nodes of one GPU each; `w` declares where its weights are. Its replica
# loads them on some node, which records them; after a scale to zero and
# back, it is placed on that node again, marked weightsLocal.
cat >"$tmp/inventory.yaml" <<YAML
apiVersion: gpusched.io/v1
kind: Inventory
spec:
  nodes:
    - {name: node-a, cpu: "8", memory: 32Gi, gpus: {model: H100-SXM-80GB, count: 1}}
    - {name: node-b, cpu: "8", memory: 32Gi, gpus: {model: H100-SXM-80GB, count: 1}}
YAML
{ serve_config_lines; cat <<YAML; } >"$tmp/weights.yaml"
deployments:
  - name: w
    model: org/w-7b
    replicas: {min: 0, max: 1, desired: 1}
    engine: {template: reference, args: ["--hidden", "26"], weightsPath: "/models/{model}"}
    resources: {fraction: {milli: 250, memory: 10Gi}}
tenants:
  - name: demo
YAML
serve "$tmp/weights.yaml"
first=$(api GET "/api/v1/events?deployment=w&kind=replica.placed" |
  jq_py 'j["items"][0]["details"]["node"]')
[ "$(api GET /api/v1/nodes | jq_py "[n['name'] for n in j['items'] if '/models/org/w-7b' in n['weights']]" 2>/dev/null)" = "['$first']" ] ||
  fail "the weights should be recorded on $first only: $(api GET /api/v1/nodes)"
api POST /api/v1/deployments/w/scale -d '{"replicas": 0}' >/dev/null
wait_for w 's["replicas"] == 0' 10 || fail "w should scale to 0"
api POST /api/v1/deployments/w/scale -d '{"replicas": 1}' >/dev/null
wait_for w 's["readyReplicas"] == 1' 10 || fail "w should come back"
api GET "/api/v1/events?deployment=w&kind=replica.placed" >"$tmp/placed.json"
[ "$(jq_py '(lambda e: e["weightsLocal"] and e["weightsPath"] == "/models/org/w-7b" and e["node"] == "'"$first"'")(j["items"][0]["details"])' <"$tmp/placed.json")" = True ] ||
  fail "the second placement should prefer $first where the weights are: $(cat "$tmp/placed.json")"
[ "$(jq_py 'j["items"][-1]["details"]["weightsLocal"]' <"$tmp/placed.json")" = False ] ||
  fail "the first placement had no local weights: $(cat "$tmp/placed.json")"
stop
finish elastic_live
