#!/usr/bin/env bash
# What running replicas as Kubernetes Pods costs, against the local launcher
# on the same machine, in one invocation (docs/kubernetes.md, "Figures"),
# through the stand-in API server and simulated kubelet of tests/kube (the
# API contract over HTTPS, not a real cluster):
#   1. apply -> ready: a deployment of 4 one-GPU replicas (reference engine)
#      applied, timed until 4 are ready, deleted; ROUNDS times as Pods on 3
#      nodes and as local processes on the same 3 nodes declared.
#   2. gpusched's API requests per replica started and stopped (create,
#      bind, delete; from the stand-in's counters), and the lists and
#      watches it sends while nothing changes for 10 s (none: it watches).
#   3. watch events handled per second (bench/kube_watch_bench.cc).
# Medians.
# Usage: bench/kube_bench.sh [BUILD_DIR] [ROUNDS]
set -u
here=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:-$here/build}" && pwd)
rounds=${2:-5}
bin="$build/gpusched"
source "$here/tests/lib.sh"
source "$here/tests/kube/cluster.sh"
source "$here/bench/cluster_bench.sh"
pid=""
cleanup() {
  [ -n "$pid" ] && kill -9 "$pid" 2>/dev/null
  kube_cluster_down
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

requests() {  # total API requests gpusched sent (the stand-in's count)
  testing GET /stats | jq_py "j['total']"
}

# --- Kubernetes ---
kube_cluster_up "$build/tests/kube_test_apiserver" node1:10.0.0.11:1:4 \
  node2:10.0.0.12:1:4 node3:10.0.0.13:1:4 >"$tmp/api.err" 2>&1 ||
  { echo "the stand-in API server did not start: $(cat "$tmp/api.err")" >&2; exit 1; }
printf '%s\nkubernetes: {kubeconfig: %s, engine_path: %s, image: bench:1}\n' \
  "$head" "$tmp/kubeconfig" "$bin" >"$tmp/kube.yaml"
start "$tmp/kube.yaml"
before=$(requests)
apply_rounds >"$tmp/apply.kube"
after=$(requests)
# Each round's requests: its own (create, bind, delete per replica) and the
# watches' reconnects, if any.
per_replica=$(calc "($after - $before) / (4 * $rounds)")
idle0=$(requests)
sleep 10
idle=$(( $(requests) - idle0 ))
stop
kube_cluster_down

# --- Local processes, the same nodes declared ---
cat >"$tmp/inventory.yaml" <<YAML
apiVersion: gpusched.io/v1
kind: Inventory
spec:
  nodes:
    - {name: node1, cpu: "32", memory: 256Gi, gpus: {model: H100-SXM-80GB, count: 4}}
    - {name: node2, cpu: "32", memory: 256Gi, gpus: {model: H100-SXM-80GB, count: 4}}
    - {name: node3, cpu: "32", memory: 256Gi, gpus: {model: H100-SXM-80GB, count: 4}}
YAML
printf '%s\ninventory: %s\ngpu_discovery: declared\n' "$head" "$tmp/inventory.yaml" >"$tmp/local.yaml"
start "$tmp/local.yaml"
apply_rounds >"$tmp/apply.local"
stop

k=$(median <"$tmp/apply.kube")
l=$(median <"$tmp/apply.local")
echo "apply -> 4 ready (median of $rounds): kubernetes ${k} s, local ${l} s, overhead $(calc "$k - $l") s ($(calc "$k / $l")x)"
echo "  kubernetes rounds: $(paste -sd' ' "$tmp/apply.kube")"
echo "  local rounds: $(paste -sd' ' "$tmp/apply.local")"
echo "API requests per replica started and stopped: $per_replica (create, bind, delete)"
echo "API requests in 10 s with nothing changing: $idle"
"$build/bench/kube_watch_bench" 20000 5
