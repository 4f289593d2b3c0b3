#!/usr/bin/env bash
# Capacity on demand on Kubernetes, end to end through the controller
# (docs/capacity.md, docs/kubernetes.md "Capacity on demand"): `gpusched
# serve` with the Kubernetes launcher against the stand-in API server
# (tests/kube/cluster.sh) and its minimal cluster autoscaler (--autoscaler):
# one static node, static-a, with 1 GPU, which deployment `base` fills, and
# a node pool h100-pool (2 H100s per node, at most 3 nodes, 1 s to add a
# node; an empty node it added is tainted after 9 s, longer than gpusched's
# scale_down_delay_s of 5 s, and deleted 1 s later) scaled to zero: its
# nodes have no names until the autoscaler adds them. One cluster and one
# gpusched for all:
#   a. burst: a deployment on 2 GPUs fits no node -> capacity.requested ->
#      the replica's Pod is created unbound, PodScheduled=False/
#      Unschedulable -> the autoscaler adds a node -> gpusched learns it
#      (node.provisioned: its GPUs from the Node object) and binds the Pod
#      there -> the replica is ready and answers chat requests through the
#      gateway; `gpusched get nodes`, `gpusched get pools` and the API
#      server's Node and Pod objects agree.
#   a2. kill -9 gpusched and restart: the new one learns the pool's node from
#      its first report and adopts the replica's Pod there (no Pod created).
#   b. a scale-down taint (ToBeDeletedByClusterAutoscaler) on that node,
#      under a small background load: gpusched moves the replica off first
#      (a replacement waits for a second node, is bound and ready, then the
#      old one drains), 0 failed requests; the emptied node is deleted by
#      the autoscaler and gpusched shows it powered down.
#   c. idle: burst scaled to 0 -> after scale_down_delay_s gpusched gives
#      the node back (node.released), the autoscaler taints and deletes the
#      empty node, gpusched shows it powered down, and no replica points at
#      a node that is gone.
# Last, every object gpusched sent is validated against the official
# schemas. Figure: apply -> the first chat answer, beside the stand-in's
# provisioning delay.
# Usage: kube_capacity_live_test.sh GPUSCHED_BINARY APISERVER_BINARY SOURCE_DIR
set -u
bin="$1"
apiserver="$2"
src="$3"
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/kube/cluster.sh"
test_name=kube_capacity_live
pid=""
kpid=""
load_pid=""
kube_cleanup_on_exit

provision_ms=1000
cat >"$tmp/autoscaler.json" <<JSON
{"pools": [
  {"name": "h100-pool", "labels": {"cloud.google.com/gke-nodepool": "h100-pool"},
   "taints": [{"key": "gpusched.io/dedicated", "value": "true", "effect": "NoSchedule"}],
   "gpuProduct": "NVIDIA-H100-80GB-HBM3", "gpusPerNode": 2, "maxNodes": 3,
   "provisionDelayMs": $provision_ms, "scaleDownAfterMs": 9000, "deleteAfterMs": 1000}
]}
JSON
kube_extra=(--autoscaler "$tmp/autoscaler.json")
kube_cluster_up "$apiserver" static-a:10.0.0.11:1:1 >"$tmp/api.err" 2>&1 ||
  { fail "the test API server did not start: $(cat "$tmp/api.err")"; finish "$test_name"; }

scale_down=5
cat >"$tmp/serve.yaml" <<YAML
$(kube_serve_config_head "$bin")
  karpenter_nodepools: false
  pools:
    - name: h100-pool
      labels: {cloud.google.com/gke-nodepool: h100-pool}
      gpu_product: NVIDIA-H100-80GB-HBM3
      gpus_per_node: 2
      max_nodes: 3
capacity:
  scale_up_delay_s: 1
  scale_down_delay_s: $scale_down
  interval_s: 0.5
deployments:
  - name: base
    engine: {template: reference, args: ["--hidden", "20"]}
    resources: {whole: 1}
    replicas: 1
tenants:
  - name: demo
YAML

cli() { GPUSCHED_SERVER=$url GPUSCHED_KEY=$admin "$bin" "$@"; }
# The API server's view: Node names of the pool, sorted.
kube_pool_nodes() {
  kube GET "/api/v1/nodes?labelSelector=cloud.google.com%2Fgke-nodepool%3Dh100-pool" |
    python3 -c '
import json, sys
print(" ".join(sorted(n["metadata"]["name"] for n in json.load(sys.stdin)["items"])))'
}
# gpusched's pool nodes in STATE, sorted.
pool_nodes_in() {
  api GET /api/v1/pools | python3 -c '
import json, sys
for p in json.load(sys.stdin)["items"]:
    print(" ".join(sorted(n for n, s in p["nodes"].items() if s["state"] == sys.argv[1])))' "$1"
}
# gpusched's running Pods of DEPLOYMENT as "node phase", and whether the
# PodScheduled condition of any of them was ever False/Unschedulable.
deployment_pods() {
  kube GET "/api/v1/namespaces/gpusched/pods?labelSelector=app.kubernetes.io%2Fmanaged-by%3Dgpusched" |
    python3 -c '
import json, sys
for p in json.load(sys.stdin)["items"]:
    if p["metadata"].get("deletionTimestamp"):
        continue
    if not p["metadata"]["annotations"].get("gpusched.io/replica", "").startswith(sys.argv[1] + "-"):
        continue
    print(p["spec"].get("nodeName", "-"), p["status"].get("phase", "-"))' "$1" | sort
}
# The pool's nodes that node.provisioned names; the same but n1.
provisioned_nodes() {
  events node.provisioned | sed -n 's/.*node \(h100-pool-[0-9]*\) of pool h100-pool is up.*/\1/p'
}
other_nodes() { provisioned_nodes | grep -v -x "$n1"; }

# --- Start: the pool is known, with no node ----------------------------------
serve_live "$tmp/serve.yaml"
wait_ready base 1 60 || fail "base: not 1 ready replica"
[ "$(replica_node base)" = static-a ] || fail "base is not on static-a: $(replicas_view)"
wait_line 30 event_with pool.discovered "pool h100-pool" ||
  fail "no pool.discovered for h100-pool: $(events pool.discovered)"
cli get pools >"$tmp/pools.txt" 2>&1
grep -E '^h100-pool .* 0/3 ' "$tmp/pools.txt" >/dev/null ||
  fail "get pools: h100-pool is not 0 of 3 nodes up: $(cat "$tmp/pools.txt")"
[ -z "$(kube_pool_nodes)" ] || fail "the pool has nodes at the start: $(kube_pool_nodes)"

# --- a. A burst that fits no node ---------------------------------------------
t_apply=$(date +%s.%N)
[ "$(apply_reference burst '{whole: 2}' 1)" = 200 ] || fail "apply burst: $(cat "$tmp/apply.out")"
wait_line 60 event_with capacity.requested "pool h100-pool" ||
  fail "no capacity.requested for pool h100-pool: $(events capacity.requested)"
wait_line 30 event_with replica.unschedulable "waits for a node of pool h100-pool" ||
  fail "burst's Pod does not wait for a node: $(events replica.unschedulable)"
# The ask is an unbound Pod marked Unschedulable, as the autoscalers expect.
ls "$tmp/record" | grep -q 'pods-status-PATCHED' || fail "no pods/status patch was recorded"
grep -l '"Unschedulable"' "$tmp/record"/*-pods-status-PATCHED.json >/dev/null 2>&1 ||
  fail "no Pod was marked PodScheduled=False/Unschedulable"
wait_line 60 events node.provisioned ||
  fail "no node.provisioned: $(events capacity.requested); $(testing GET /autoscaler)"
n1=$(provisioned_nodes | head -1)
[ -n "$n1" ] || fail "node.provisioned names no h100-pool node: $(events node.provisioned)"
wait_ready burst 1 120 || fail "burst: not ready on the added node: $(api GET /api/v1/deployments/burst)"
[ "$(chat burst)" = 200 ] || fail "chat burst through the gateway failed"
t_answer=$(date +%s.%N)
[ "$(replica_node burst)" = "$n1" ] || fail "burst is not on $n1, the node added for it: $(replicas_view)"
for _ in 1 2; do
  [ "$(chat burst)" = 200 ] || fail "chat burst through the gateway failed"
done
# capacity.requested, then node.provisioned, then the replica placed there.
req_t=$(events capacity.requested | awk 'NR == 1 {print $1}')
prov_t=$(events node.provisioned | awk 'NR == 1 {print $1}')
placed_t=$(events replica.placed | grep -F "burst-" | awk 'NR == 1 {print $1}')
[ "$req_t" -lt "$prov_t" ] && [ "$prov_t" -le "$placed_t" ] ||
  fail "not requested ($req_t) < provisioned ($prov_t) <= placed ($placed_t)"
# gpusched, its pools and the API server agree.
[ "$(kube_pool_nodes)" = "$n1" ] || fail "the API server's pool nodes: '$(kube_pool_nodes)', not $n1"
[ "$(pool_nodes_in up)" = "$n1" ] || fail "gpusched's pool nodes up: '$(pool_nodes_in up)', not $n1"
wait_output 30 "$n1 Running" deployment_pods burst ||
  fail "burst's Pod is not Running on $n1: $(deployment_pods burst)"
cli get pools >"$tmp/pools.txt" 2>&1
grep -E '^h100-pool .* 1/3 ' "$tmp/pools.txt" >/dev/null ||
  fail "get pools: h100-pool is not 1 of 3 nodes up: $(cat "$tmp/pools.txt")"
cli get nodes >"$tmp/nodes.txt" 2>&1
grep -E "^$n1 +2 .* 2000m .*h100-pool/up" "$tmp/nodes.txt" >/dev/null ||
  fail "get nodes: $n1 is not up in h100-pool with 2 GPUs allocated: $(cat "$tmp/nodes.txt")"
grep -E '^static-a +1 .* 1000m' "$tmp/nodes.txt" >/dev/null || fail "get nodes: static-a is not full: $(cat "$tmp/nodes.txt")"
# The split, from the events: gpusched waits scale_up_delay_s before it
# asks; the autoscaler's delay and the watch; the bind, the Pod's start and
# the engine's readiness; then the test's own polling (wait_ready) and the
# chat request.
ready_t=$(events replica.ready | grep -F "burst-" | awk 'NR == 1 {print $1}')
python3 - "$t_apply" "$req_t" "$prov_t" "$ready_t" "$t_answer" "$provision_ms" <<'PY'
import sys
apply_s, req, prov, ready, answer = float(sys.argv[1]), *(int(x) / 1e6 for x in sys.argv[2:5]), float(sys.argv[5])
print("figure: apply of a deployment that fits no node -> its first chat answer: %.2f s "
      "(-> capacity.requested %.2f s, scale_up_delay_s 1; -> node.provisioned %.2f s, "
      "the stand-in adds a node %s ms after the ask; -> replica ready %.2f s, bind, Pod "
      "and engine start; -> the test saw it ready and had its answer %.2f s)"
      % (answer - apply_s, req - apply_s, prov - req, sys.argv[6], ready - prov, answer - ready))
PY

# --- a2. kill -9 and a restart: the replica on the learned node is adopted ------
# The new gpusched learns the pool's node from its first report (the node is
# in no start list), before it looks at what the last one left running.
pod_posts() {
  testing GET /stats | python3 -c 'import json, sys; print(json.load(sys.stdin)["requests"].get("POST pods", 0))'
}
posts=$(pod_posts)
kill -9 "$pid"
wait "$pid" 2>/dev/null
pid=""
serve_live "$tmp/serve.yaml"
wait_ready burst 1 60 || fail "after the restart: burst is not ready: $(api GET /api/v1/deployments/burst)"
wait_line 30 event_with replica.adopted "burst-0 adopted" ||
  fail "burst's Pod on $n1 was not adopted: $(events replica.adopted); $(events replica.orphan_killed)"
[ "$(replica_node burst)" = "$n1" ] || fail "after the restart burst is not on $n1: $(replicas_view)"
[ "$(pod_posts)" = "$posts" ] || fail "Pods were created after the restart ($posts before, $(pod_posts) after)"
[ "$(chat burst)" = 200 ] || fail "chat burst failed after the restart"
[ "$(pool_state "$n1")" = up ] || fail "after the restart gpusched says $n1 is $(pool_state "$n1")"

# --- b. A scale-down taint on the busy node: moved off first -------------------
: >"$tmp/load.codes"
(while :; do chat burst >>"$tmp/load.codes"; sleep 0.1; done) &
load_pid=$!
wait_line 30 grep -c 200 "$tmp/load.codes" || fail "the background load does not answer"
testing POST "/nodes/$n1/taints" -H 'Content-Type: application/json' -d '[
  {"key": "gpusched.io/dedicated", "value": "true", "effect": "NoSchedule"},
  {"key": "ToBeDeletedByClusterAutoscaler", "value": "1700000000", "effect": "NoSchedule"}]' >/dev/null
wait_pool_state "$n1" powering_down 30 || fail "gpusched says $n1 is $(pool_state "$n1") with a scale-down taint"
wait_line 90 other_nodes ||
  fail "no second node for the replica moving off $n1: $(events node.provisioned); $(testing GET /autoscaler)"
n2=$(other_nodes | head -1)
for _ in $(seq 1 600); do
  [ "$(replica_node burst)" = "$n2" ] && [ "$(replicas_view | grep -c '^burst-')" = 1 ] && break
  sleep 0.2
done
[ "$(replica_node burst)" = "$n2" ] || fail "burst did not move to $n2: $(replicas_view)"
[ "$(replicas_view | grep -c '^burst-')" = 1 ] || fail "burst's old replica did not go: $(replicas_view)"
wait_ready burst 1 60 || fail "burst: not 1 ready replica after the move"
sleep 1  # a few more requests on the new replica
kill "$load_pid" 2>/dev/null
wait "$load_pid" 2>/dev/null
load_pid=""
total=$(wc -l <"$tmp/load.codes")
bad=$(grep -v -c -x 200 "$tmp/load.codes")
echo "background load during the move: $total requests, $bad failed"
[ "$bad" = 0 ] || fail "$bad of $total requests failed while burst moved off $n1: $(sort "$tmp/load.codes" | uniq -c)"
[ "$total" -ge 5 ] || fail "only $total requests during the move"
# The replacement was started and ready before the old one drained.
events replica.draining | grep -F "burst-" | grep -q "$n1" ||
  fail "no drain names $n1: $(events replica.draining)"
# The autoscaler deletes the emptied node; gpusched sees it gone.
wait_pool_state "$n1" powered_down 60 ||
  fail "gpusched says $n1 is $(pool_state "$n1") after the move; the API server: $(kube_pool_nodes)"
wait_line 30 event_with node.powered_down "$n1" || fail "no node.powered_down for $n1"
[ "$(kube_pool_nodes)" = "$n2" ] || fail "the API server's pool nodes: '$(kube_pool_nodes)', not $n2"
wait_output 30 "$n2 Running" deployment_pods burst ||
  fail "burst's Pods are not one Running on $n2: $(deployment_pods burst)"

# --- c. Idle: given back, removed by the autoscaler ------------------------------
delete_t=$(date +%s%6N)
[ "$(apply_reference burst '{whole: 2}' 0)" = 200 ] || fail "scale burst to 0: $(cat "$tmp/apply.out")"
wait_output 60 "" deployment_pods burst || fail "burst's Pods outlived its scale to 0: $(deployment_pods burst)"
wait_line 90 event_with node.released "$n2" ||
  fail "$n2 was not given back: $(events node.released); $(api GET /api/v1/pools)"
rel_t=$(event_with node.released "$n2" | awk 'NR == 1 {print $1}')
[ "$rel_t" -ge $((delete_t + scale_down * 1000000 - 500000)) ] ||
  fail "$n2 released at $rel_t, less than ${scale_down}s - 0.5 s after burst was scaled to 0 ($delete_t)"
wait_pool_state "$n2" powered_down 60 ||
  fail "gpusched says $n2 is $(pool_state "$n2"); the API server: $(kube_pool_nodes)"
[ -z "$(kube_pool_nodes)" ] || fail "the API server still has pool nodes: $(kube_pool_nodes)"
cli get pools >"$tmp/pools.txt" 2>&1
grep -E '^h100-pool .* 0/3 ' "$tmp/pools.txt" >/dev/null ||
  fail "get pools: h100-pool is not 0 of 3 nodes up after the release: $(cat "$tmp/pools.txt")"
cli get nodes >"$tmp/nodes.txt" 2>&1
for n in "$n1" "$n2"; do
  grep -E "^$n .* 0m .*h100-pool/powered_down" "$tmp/nodes.txt" >/dev/null ||
    fail "get nodes: $n is not a powered-down h100-pool node holding nothing: $(cat "$tmp/nodes.txt")"
done
replicas_view | awk -v a="$n1" -v b="$n2" '$2 == a || $2 == b' | grep -q . &&
  fail "a replica points at a node that is gone: $(replicas_view)"
[ "$(chat base)" = 200 ] || fail "chat base failed after the release"

# What happened, for the log.
for k in capacity.requested node.provisioned node.released node.powered_down replica.unschedulable; do
  events "$k" | sed "s/^/$k /"
done
testing GET /autoscaler | python3 -c '
import json, sys
for d in json.load(sys.stdin).get("notes", []):
    print("autoscaler", d)' 2>/dev/null

# --- Every object gpusched sent, against the official schemas ------------------
kube_validate_record "$src" Pod Binding
finish "$test_name"
