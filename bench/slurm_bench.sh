#!/usr/bin/env bash
# What running replicas through Slurm costs, against the local launcher on
# the same machine, in one invocation (docs/slurm.md, "Figures"):
#   1. apply -> ready: a deployment of 4 one-GPU replicas (reference engine)
#      applied, timed until 4 are ready, deleted; ROUNDS times through a real
#      Slurm cluster (tests/slurm/cluster.sh: 3 slurmd hosts in network
#      namespaces) and through local processes on the same 3 nodes declared.
#   2. node down -> ready elsewhere: a 2-replica deployment; the node of one
#      replica is set DOWN (scontrol update), timed until 2 are ready again
#      and none is on that node; the node resumed; ROUNDS times.
#   3. placement decisions/s with a 1,000-node inventory read from Slurm's
#      text against the same nodes declared (bench/placement_bench.cc), and
#      the cost of parsing that text once (each poll).
# Medians; run as root on an otherwise idle machine.
# Usage: bench/slurm_bench.sh [BUILD_DIR] [ROUNDS]
set -u
here=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:-$here/build}" && pwd)
rounds=${2:-5}
bin="$build/gpusched"
source "$here/tests/lib.sh"
source "$here/tests/slurm/cluster.sh"
source "$here/bench/cluster_bench.sh"
if ! why=$(slurm_cluster_available); then
  echo "slurm_bench: cannot run: $why" >&2
  exit 2
fi
chmod 755 "$tmp"
pid=""
cleanup() {
  [ -n "$pid" ] && kill -9 "$pid" 2>/dev/null
  slurm_cluster_down "$tmp/slurm"
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

slurm_cluster_up "$tmp/slurm" node1:h100:4:16:64000 node2:h100:4:16:64000 \
  node3:h100:4:16:64000 >"$tmp/cluster.log" 2>&1 ||
  { echo "the Slurm cluster did not start: $(cat "$tmp/cluster.log")" >&2; exit 1; }

# --- Slurm ---
printf '%s\nslurm: {poll_interval_ms: 300}\n' "$head" >"$tmp/slurm.yaml"
start "$tmp/slurm.yaml"
apply_rounds >"$tmp/apply.slurm"
# node down -> ready elsewhere
cat >"$tmp/d2.yaml" <<YAML
apiVersion: gpusched.io/v1
kind: Deployment
metadata: {name: moving}
spec:
  engine: $engine
  resources: {whole: 1}
  replicas: 2
YAML
"$bin" apply -f "$tmp/d2.yaml" --server "$url" --key "$admin" >/dev/null
for _ in $(seq 1 1200); do [ "$(ready moving)" = 2 ] && break; sleep 0.05; done
for _ in $(seq 1 "$rounds"); do
  node=$(api GET /api/v1/deployments/moving | jq_py "j['status']['replicaStatus'][0]['node']")
  t0=$(now)
  scontrol update nodename="$node" state=down reason=bench
  for _ in $(seq 1 2400); do
    api GET /api/v1/deployments/moving | python3 -c "
import json, sys
s = json.load(sys.stdin)['status']
ok = s['readyReplicas'] == 2 and all(r['node'] != '$node' for r in s['replicaStatus'] if r['state'] == 'ready')
sys.exit(0 if ok else 1)" && break
    sleep 0.05
  done
  calc "$(now) - $t0" >>"$tmp/down.slurm"
  scontrol update nodename="$node" state=resume
  sleep 2
done
stop

# --- Local processes, the same nodes declared ---
cat >"$tmp/inventory.yaml" <<YAML
apiVersion: gpusched.io/v1
kind: Inventory
spec:
  nodes:
    - {name: node1, cpu: "16", memory: 64000Mi, gpus: {model: H100-SXM-80GB, count: 4}}
    - {name: node2, cpu: "16", memory: 64000Mi, gpus: {model: H100-SXM-80GB, count: 4}}
    - {name: node3, cpu: "16", memory: 64000Mi, gpus: {model: H100-SXM-80GB, count: 4}}
YAML
printf '%s\ninventory: %s\ngpu_discovery: declared\n' "$head" "$tmp/inventory.yaml" >"$tmp/local.yaml"
start "$tmp/local.yaml"
apply_rounds >"$tmp/apply.local"
stop

s=$(median <"$tmp/apply.slurm")
l=$(median <"$tmp/apply.local")
d=$(median <"$tmp/down.slurm")
echo "apply -> 4 ready (median of $rounds): slurm ${s} s, local ${l} s, overhead $(calc "$s - $l") s ($(calc "$s / $l")x)"
echo "  slurm rounds: $(paste -sd' ' "$tmp/apply.slurm")"
echo "  local rounds: $(paste -sd' ' "$tmp/apply.local")"
echo "node down -> 2 ready elsewhere (median of $rounds): ${d} s"
echo "  rounds: $(paste -sd' ' "$tmp/down.slurm")"

"$build/bench/placement_bench" --benchmark_filter='Inventory1k|SlurmPoll' \
  --benchmark_repetitions=3 --benchmark_report_aggregates_only=true 2>/dev/null |
  grep median
