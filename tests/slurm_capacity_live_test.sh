#!/usr/bin/env bash
# Capacity on demand through Slurm, end to end (docs/capacity.md): `gpusched
# serve` with the Slurm launcher on the cluster of tests/slurm/cluster.sh
# (slurmctld and a static node n1 with 2 H100s, in network namespaces) with
# three CLOUD nodes: c1 and c2 (2 H100s each) in pool "h100", and c3 (2 L4s)
# in pool "broken", the cheapest, whose ResumeProgram (tests/slurm/power.sh)
# fails. A deployment `base` fills n1. One cluster and one gpusched for all:
#   a. burst: a deployment on 2 H100s fits no node that is up -> gpusched
#      powers up one node of pool h100 (capacity.requested, then
#      node.provisioned once it registered), places the replica there, its
#      engine runs as a Slurm job on that node and answers chat requests
#      through the gateway; squeue, sinfo, `gpusched get nodes` and
#      `gpusched get pools` agree.
#   b. idle: the deployment deleted, the node holds no replica: after
#      scale_down_delay_s (never before, to the planner's interval_s)
#      gpusched gives it back
#      (node.released), Slurm's SuspendProgram stops it and sinfo says
#      idle~; gpusched sees it powered down (node.powered_down, get pools).
#   c. a resume that never registers: a deployment that any GPU serves goes
#      to the cheapest pool, "broken", first; c3 does not register by
#      ResumeTimeout -> capacity.failed names c3 and Slurm's reason, the next
#      pool (h100) is asked, and the replica answers from there.
# Skips only where network namespaces cannot be made (not root).
# Usage: slurm_capacity_live_test.sh GPUSCHED_BINARY
set -u
bin="$1"
source "$(dirname "$0")/lib.sh"
test_name=slurm_capacity_live
source "$(dirname "$0")/slurm/cluster.sh"

if ! why=$(slurm_cluster_available); then
  echo "slurm_capacity_live: skipped ($why)"
  exit 0
fi
cluster="$tmp/slurm"
pid=""
slurm_cleanup_on_exit "$cluster"

slurm_capacity_cluster_up "$cluster" slurm_capacity_live

engine='{template: reference, args: ["--hidden", "20"]}'
scale_down=5
cat >"$tmp/serve.yaml" <<YAML
$(live_config_head)
slurm:
  poll_interval_ms: 300
capacity:
  scale_up_delay_s: 1
  scale_down_delay_s: $scale_down
  interval_s: 0.5
  failed_pool_backoff_s: 600
  pools:
    - {name: broken, price_per_node_hour: 0.5}
deployments:
  - name: base
    engine: $engine
    resources: {whole: 2}
    replicas: 1
tenants:
  - name: demo
YAML

power_log() { cat "$cluster/log/power.log" 2>/dev/null; }
sinfo_word() { sinfo -h -N -n "$1" -o %t | head -1; }
cli() { GPUSCHED_SERVER=$url GPUSCHED_KEY=$admin "$bin" "$@"; }
wait_sinfo() { wait_output "$3" "$2" sinfo_word "$1"; }  # node word seconds

# --- Start: every pool node powered down, known as capacity ------------------
serve_live "$tmp/serve.yaml"
wait_ready base 1 60 || fail "base: not 1 ready replica"
[ "$(replica_node base)" = n1 ] || fail "base is not on n1: $(replicas_view)"
for n in c1 c2 c3; do
  wait_pool_state "$n" powered_down 30 || fail "$n is $(pool_state "$n") at the start, not powered_down"
  [ "$(sinfo_word $n)" = "idle~" ] || fail "sinfo says $n is $(sinfo_word $n), not idle~"
done
cli get pools >"$tmp/pools.txt" 2>&1
expect_contains "$tmp/pools.txt" "h100"
expect_contains "$tmp/pools.txt" "broken"
grep -E '^h100 .* 0/2 ' "$tmp/pools.txt" >/dev/null || fail "get pools: h100 is not 0 of 2 nodes up: $(cat "$tmp/pools.txt")"
events pool.discovered >"$tmp/discovered"
expect_contains "$tmp/discovered" "pool h100: up to 2 nodes of 2 x h100"
expect_contains "$tmp/discovered" "pool broken: up to 1 node of 2 x l4"

# --- a. A burst that fits no node that is up ---------------------------------
[ "$(apply_reference burst '{whole: 2, gpuModels: [H100-SXM-80GB]}' 1)" = 200 ] ||
  fail "apply burst: $(cat "$tmp/apply.out")"
wait_line 60 event_with capacity.requested "pool h100" ||
  fail "no capacity.requested for pool h100: $(events capacity.requested)"
if ! wait_line 90 events node.provisioned; then
  # Nothing after this can pass: stop here with Slurm's side of it.
  fail "no node.provisioned: $(events capacity.requested); $(power_log); $(api GET /api/v1/pools)
slurmctld: $(grep -E 'c[123]' "$cluster/log/slurmctld.log" | tail -40)
slurmd: $(tail -40 "$cluster"/log/slurmd-c*.log 2>/dev/null)
power.out: $(tail -20 "$cluster/log/power.out" 2>/dev/null)"
  finish $test_name
fi
burst_node=$(events node.provisioned | sed -n 's/.*node \(c[12]\) of pool h100 is up.*/\1/p' | head -1)
[ -n "$burst_node" ] || fail "node.provisioned names no h100 node: $(events node.provisioned)"
events capacity.requested | grep -q "pool broken" &&
  fail "a deployment on H100s asked the L4 pool: $(events capacity.requested)"
wait_ready burst 1 120 || fail "burst: not ready on a powered-up node: $(api GET /api/v1/deployments/burst)"
[ "$(replica_node burst)" = "$burst_node" ] ||
  fail "burst is not on $burst_node, the node powered up for it: $(replicas_view)"
# capacity.requested, then node.provisioned, then the replica placed there.
req_t=$(events capacity.requested | awk 'NR == 1 {print $1}')
prov_t=$(events node.provisioned | awk 'NR == 1 {print $1}')
placed_t=$(events replica.placed | grep -F "burst-" | awk 'NR == 1 {print $1}')
[ "$req_t" -lt "$prov_t" ] && [ "$prov_t" -le "$placed_t" ] ||
  fail "not requested ($req_t) < provisioned ($prov_t) <= placed ($placed_t)"
[ "$(power_log | grep -c " resume $burst_node\$")" = 1 ] ||
  fail "not one ResumeProgram run for $burst_node: $(power_log)"
for _ in 1 2 3; do
  [ "$(chat burst)" = 200 ] || fail "chat burst through the gateway failed"
done
# gpusched, squeue and sinfo agree: both replicas where Slurm runs their
# jobs, the node up in gpusched's pools and allocated in sinfo.
wait_views_agree 30 2 || fail "gpusched and Slurm disagree:
gpusched (replica node gpus job):
$(cat "$tmp/ours")
Slurm:
$(cat "$tmp/theirs")"
squeue -h -o '%j %T %N' | grep '^gpusched\.burst' >"$tmp/squeue"
grep -q " RUNNING $burst_node\$" "$tmp/squeue" || fail "squeue: burst's job is not running on $burst_node: $(cat "$tmp/squeue")"
case $(sinfo_word "$burst_node") in
  mix | alloc) ;;
  *) fail "sinfo says $burst_node is $(sinfo_word "$burst_node") with burst's job on it" ;;
esac
[ "$(pool_state "$burst_node")" = up ] || fail "gpusched says $burst_node is $(pool_state "$burst_node")"
cli get pools >"$tmp/pools.txt" 2>&1
grep -E '^h100 .* 1/2 ' "$tmp/pools.txt" >/dev/null || fail "get pools: h100 is not 1 of 2 nodes up: $(cat "$tmp/pools.txt")"
cli get nodes >"$tmp/nodes.txt" 2>&1
grep -E "^$burst_node +2 .* 2000m .*h100/up" "$tmp/nodes.txt" >/dev/null ||
  fail "get nodes: $burst_node is not up in pool h100 with 2 GPUs allocated: $(cat "$tmp/nodes.txt")"
grep -E '^n1 +2 .* 2000m' "$tmp/nodes.txt" >/dev/null || fail "get nodes: n1 is not full: $(cat "$tmp/nodes.txt")"
for n in c1 c2; do
  [ "$n" = "$burst_node" ] && continue
  grep -E "^$n .* 0m .*h100/powered_down" "$tmp/nodes.txt" >/dev/null ||
    fail "get nodes: $n is not a powered-down h100 node: $(cat "$tmp/nodes.txt")"
  [ "$(sinfo_word $n)" = "idle~" ] || fail "sinfo says $n is $(sinfo_word $n), not idle~"
done

# --- b. Idle: given back after scale_down_delay_s, powered down ----------------
# The replica holds the node at least until its delete, and the planner
# looks every interval_s (0.5 s): the node is given back no earlier than
# scale_down_delay_s - interval_s after the delete.
delete_t=$(date +%s%6N)
api DELETE /api/v1/deployments/burst >/dev/null
for _ in $(seq 1 300); do
  squeue -h -o %j | grep -q '^gpusched\.burst' || break
  sleep 0.2
done
squeue -h -o %j | grep -q '^gpusched\.burst' && fail "burst's job outlived its delete: $(squeue)"
wait_line 90 event_with node.released "$burst_node" ||
  fail "$burst_node was not given back: $(events node.released); $(api GET /api/v1/pools)"
rel_t=$(event_with node.released "$burst_node" | awk 'NR == 1 {print $1}')
[ "$rel_t" -ge $((delete_t + scale_down * 1000000 - 500000)) ] ||
  fail "$burst_node released at $rel_t, less than ${scale_down}s - 0.5 s after burst was deleted ($delete_t)"
wait_sinfo "$burst_node" "idle~" 90 ||
  fail "Slurm did not power $burst_node down: sinfo $(sinfo_word "$burst_node"); $(power_log)"
power_log | grep -q " suspend $burst_node" || fail "the SuspendProgram did not run for $burst_node: $(power_log)"
wait_pool_state "$burst_node" powered_down 30 ||
  fail "gpusched says $burst_node is $(pool_state "$burst_node") after Slurm powered it down"
wait_line 30 event_with node.powered_down "$burst_node" || fail "no node.powered_down for $burst_node"
cli get pools >"$tmp/pools.txt" 2>&1
grep -E '^h100 .* 0/2 ' "$tmp/pools.txt" >/dev/null || fail "get pools: h100 is not 0 of 2 nodes up after the release: $(cat "$tmp/pools.txt")"
[ "$(chat base)" = 200 ] || fail "chat base failed after the release"

# --- c. A resume that never registers: the next pool -----------------------
[ "$(apply_reference cheap '{whole: 2}' 1)" = 200 ] || fail "apply cheap: $(cat "$tmp/apply.out")"
wait_line 60 event_with capacity.requested "pool broken" ||
  fail "cheap did not go to the cheapest pool, broken, first: $(events capacity.requested)"
wait_line 90 event_with capacity.failed "c3" ||
  fail "no capacity.failed for c3: $(events capacity.failed); $(power_log)"
event_with capacity.failed "c3" >"$tmp/failed"
expect_contains "$tmp/failed" "ResumeTimeout reached"
expect_contains "$tmp/failed" "broken"
power_log | grep -q "resume-refused c3" || fail "c3's ResumeProgram was not the one that failed: $(power_log)"
[ "$(sinfo_word c3)" = "down~" ] || fail "sinfo says c3 is $(sinfo_word c3), not down~"
[ "$(pool_state c3)" = failed ] || fail "gpusched says c3 is $(pool_state c3), not failed"
wait_ready cheap 1 120 || fail "cheap: not ready after the broken pool failed: $(api GET /api/v1/deployments/cheap); $(events capacity.requested)"
cheap_node=$(replica_node cheap)
case $cheap_node in
  c1 | c2) ;;
  *) fail "cheap is on '$cheap_node', not on an h100 pool node: $(replicas_view)" ;;
esac
# The h100 pool was asked after the failure.
fail_t=$(event_with capacity.failed c3 | awk 'NR == 1 {print $1}')
events capacity.requested | awk -v t="$fail_t" '$1 > t' | grep -q "pool h100" ||
  fail "pool h100 was not asked after broken failed: $(events capacity.requested)"
[ "$(chat cheap)" = 200 ] || fail "chat cheap failed"
wait_views_agree 30 2 || fail "after the failover: $(cat "$tmp/ours") vs $(cat "$tmp/theirs")"
[ "$(pool_state "$cheap_node")" = up ] || fail "gpusched says $cheap_node is $(pool_state "$cheap_node")"

# What happened, for the log.
for k in capacity.requested capacity.failed node.provisioned node.released node.powered_down; do
  events "$k" | sed "s/^/$k /"
done
power_log

finish slurm_capacity_live
