#!/usr/bin/env bash
# gpusched's share of a burst served on a freshly powered-up Slurm node
# (docs/capacity.md, "Measured", Slurm). `gpusched serve` with the Slurm
# launcher on the test cluster of tests/slurm/cluster.sh: a static node n1
# (2 H100s) that a deployment `base` fills, and a pool "h100" of two CLOUD
# nodes (2 H100s each) whose ResumeProgram starts `slurmd -b` in a fresh
# network namespace (a node that boots in ~0.1 s). A deployment `lazy` on
# 2 H100s scales from zero. Each round sends one chat request to lazy while
# every pool node is powered down, and splits the time to its answer:
#   Slurm's and the node's share:
#     capacity.requested (gpusched asks: scontrol update State=POWER_UP)
#       -> the node registered (slurmctld's log, "Node cN now responding");
#     the replica's job submitted (slurmctld's log, _slurm_rpc_submit_batch_job)
#       -> its batch script launched on the node (slurmd's log, "Launching
#          batch job").
#   gpusched's share: the rest, i.e. the request's arrival -> the ask
#     (autoscaling from zero, placement finding no room, the planner),
#     the node registered -> the job submitted (noticing the node through
#     its poll of scontrol, placement, sbatch), and the batch script
#     launched -> the answer (the engine's start, the readiness probe, the
#     held request dispatched and answered; the reference engine starts in
#     milliseconds, and its start is counted here, to gpusched's cost).
# Between rounds lazy scales back to zero and gpusched gives the node back
# (scale_down_delay_s 1), and the round waits until Slurm has powered it
# down. Slurm's log timestamps have millisecond resolution. Prints each
# round and the medians; the target is gpusched's share <= 1 s.
# Usage: bench/slurm_capacity_live.sh [BUILD_DIR] [ROUNDS] (root)
set -u
here=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:-$here/build}" && pwd)
rounds=${2:-5}
bin="$build/gpusched"
source "$here/tests/lib.sh"
test_name=slurm_capacity_bench
source "$here/tests/slurm/cluster.sh"
if ! why=$(slurm_cluster_available); then
  echo "slurm_capacity_live: cannot run: $why" >&2
  exit 2
fi
[ -x "$bin" ] || { echo "slurm_capacity_live: no gpusched under $build (build first)" >&2; exit 2; }
cluster="$tmp/slurm"
pid=""
slurm_cleanup_on_exit "$cluster"

export SLURM_CLOUD_NODES="c1:h100:2:8:16000:pool=h100 c2:h100:2:8:16000:pool=h100"
slurm_cluster_up "$cluster" n1:h100:2:8:16000 >"$tmp/cluster.log" 2>&1 ||
  { echo "the Slurm cluster did not start: $(cat "$tmp/cluster.log")" >&2; exit 1; }

engine='{template: reference, args: ["--hidden", "20"]}'
cat >"$tmp/serve.yaml" <<YAML
listen: 127.0.0.1:0
state: $tmp/state.db
log_dir: $tmp/logs
key_dir: $tmp/keys
drain_grace_s: 2
slurm:
  poll_interval_ms: 200
capacity:
  scale_up_delay_s: 0
  scale_down_delay_s: 1
  interval_s: 1
deployments:
  - name: base
    engine: $engine
    resources: {whole: 2}
    replicas: 1
  - name: lazy
    engine: $engine
    resources: {whole: 2, gpuModels: [H100-SXM-80GB]}
    autoscaling: {minReplicas: 0, maxReplicas: 1, lookBackPeriodS: 2,
                  upscaleDelayS: 1, downscaleDelayS: 2, idleTimeoutS: 2,
                  holdTimeoutS: 300}
tenants:
  - name: demo
YAML
serve_live "$tmp/serve.yaml"

sinfo_word() { sinfo -h -N -n "$1" -o %t | head -1; }
lazy_jobs() { squeue -h -o %j | grep -c '^gpusched\.lazy'; }
pool_states() {
  api GET /api/v1/pools | python3 -c '
import json, sys
print(" ".join(s["state"] for p in json.load(sys.stdin)["items"] for s in p["nodes"].values()))'
}
# Every pool node powered down, in Slurm (idle~) and in gpusched.
all_down() {
  [ "$(sinfo_word c1)" = "idle~" ] && [ "$(sinfo_word c2)" = "idle~" ] &&
    [ "$(pool_states)" = "powered_down powered_down" ]
}
for _ in $(seq 1 600); do all_down && break; sleep 0.2; done
all_down || { echo "the pool nodes are not powered down: $(sinfo -N)" >&2; exit 1; }

: >"$tmp/rounds"
for r in $(seq 1 "$rounds"); do
  t0=$(date +%s%6N)
  code=$(chat lazy)
  t1=$(date +%s%6N)
  if [ "$code" != 200 ]; then
    echo "round $r: lazy answered $code" >&2
    api GET "/api/v1/events?limit=60" | python3 -c '
import json, sys
for e in sorted(json.load(sys.stdin)["items"], key=lambda e: e["id"]):
    print(e["time"], e["kind"], e["message"])' >&2
    sinfo -N >&2
    squeue >&2
    tail -n 30 "$cluster/log/power.log" >&2
    grep -E "c1|reboot" "$cluster/log/slurmctld.log" | tail -n 60 >&2
    exit 1
  fi
  job=$(squeue -h -o '%i %j' | awk '$2 ~ /^gpusched\.lazy/ {print $1; exit}')
  node=$(squeue -h -j "$job" -o %N)
  api GET "/api/v1/events?kind=capacity.requested&limit=100" >"$tmp/req.json"
  python3 - "$t0" "$t1" "$job" "$node" "$tmp/req.json" "$cluster/log/slurmctld.log" \
    "$cluster/log/slurmd-$node.log" <<'PY' >>"$tmp/rounds" || exit 1
import datetime, json, re, sys
t0, t1, job, node = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
def slurm_times(path, pattern):  # Slurm's local-time stamps, in epoch micros
    out = []
    for line in open(path, errors="replace"):
        m = re.match(r"\[(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3})\] (.*)", line)
        if m and re.search(pattern, m.group(2)):
            t = datetime.datetime.strptime(m.group(1), "%Y-%m-%dT%H:%M:%S.%f")
            out.append(int(t.timestamp() * 1e6))
    return out
asks = [e["timeMicros"] for e in json.load(open(sys.argv[5]))["items"]
        if e["timeMicros"] >= t0]
if not asks:
    sys.exit("no capacity.requested after the request was sent")
ask = min(asks)
reg = [t for t in slurm_times(sys.argv[6], rf"Node {node} now responding") if t >= ask - 1000]
sub = slurm_times(sys.argv[6], rf"_slurm_rpc_submit_batch_job: JobId={job} ")
launch = slurm_times(sys.argv[7], rf"Launching batch job {job} ")
if not (reg and sub and launch):
    sys.exit(f"missing log lines: registered {reg} submitted {sub} launched {launch}")
reg, sub, launch = min(reg), min(sub), min(launch)
slurm = (reg - ask) + (launch - sub)
total = t1 - t0
print(node, total // 1000, (total - slurm) // 1000, slurm // 1000,
      (ask - t0) // 1000, (sub - reg) // 1000, (t1 - launch) // 1000,
      (reg - ask) // 1000, (launch - sub) // 1000)
PY
  tail -1 "$tmp/rounds" | awk -v r="$r" '{printf "round %d on %s: total %d ms, gpusched %d ms (arrival->ask %d, registered->submitted %d, launched->answer %d), Slurm/node %d ms (ask->registered %d, submitted->launched %d)\n", r, $1, $2, $3, $5, $6, $7, $4, $8, $9}'
  # Back to zero replicas, the node given back and powered down.
  for _ in $(seq 1 600); do [ "$(lazy_jobs)" = 0 ] && all_down && break; sleep 0.2; done
  all_down || { echo "round $r: the node was not powered down again: $(sinfo -N)" >&2; exit 1; }
done
python3 - "$tmp/rounds" <<'PY'
import statistics, sys
rows = [list(map(int, l.split()[1:])) for l in open(sys.argv[1])]
med = [statistics.median(c) for c in zip(*rows)]
print(f"median ({len(rows)} rounds): request -> answer {med[0]:.0f} ms; "
      f"gpusched's share {med[1]:.0f} ms (arrival -> ask {med[3]:.0f}, "
      f"registered -> submitted {med[4]:.0f}, launched -> answer {med[5]:.0f}); "
      f"Slurm's and the node's {med[2]:.0f} ms (ask -> registered {med[6]:.0f}, "
      f"submitted -> launched {med[7]:.0f}); target gpusched <= 1000 ms: "
      f"{'met' if med[1] <= 1000 else 'MISSED'}")
PY
