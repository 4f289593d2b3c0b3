#!/usr/bin/env bash
# gpusched on a real Slurm cluster (tests/slurm/cluster.sh: slurmctld and
# three slurmd hosts in network namespaces of the test's own, fake GPUs in
# gres.conf), gpusched and the test in the root namespace:
#   1. apply whole, multi-GPU and fractional (gres/shard) deployments -> one
#      Slurm job per replica on the nodes placement chose; squeue/scontrol and
#      gpusched agree on the node and GPU indexes of every replica; GPUs another user's job holds
#      are never placed onto; chat requests succeed through the gateway to
#      engines on every node used.
#   2. scancel a replica's job under steady load -> replaced, 0 failed
#      requests, the event says Slurm cancelled it.
#   3. scontrol update state=down on a node -> its replicas move, the events
#      say why.
#   4. autoscaling 0 -> 1 -> 0: requests held at zero are answered by a
#      replica started through Slurm, whose job ends at the scale to 0.
#   5. kill -9 gpusched and restart it -> the same jobs are adopted (no new
#      job, none twice), a job of its prefix it no longer wants is ended,
#      keys and deployments intact.
#   6. slurmctld stopped, then started again -> one manager.unreachable
#      event, the replicas keep serving, manager.reachable once it answers,
#      the same jobs.
#   7. MIG: node3 has, after its 4 H100s, four 1g.10gb MIG devices as typed
#      GRES; another user's job holds one. A MIG deployment runs as jobs
#      with --gres=gpu:1g.10gb:1; gpusched's instance of each replica is the
#      device Slurm gave (its k-th 1g.10gb device is the k-th instance in
#      /api/v1/gpus), the other user's is shown foreign and never used, chat
#      works; after kill -9 and a restart the same jobs are adopted; a delete
#      ends them.
#   8. SIGTERM: the jobs keep running (replicas outlive gpusched) and a
#      restart adopts them; a gpusched started with --stop-replicas-on-exit
#      ends them when it stops.
# Skips only where network namespaces cannot be made (not root).
# Usage: slurm_live_test.sh GPUSCHED_BINARY
set -u
bin="$1"
source "$(dirname "$0")/lib.sh"
test_name=slurm_live
source "$(dirname "$0")/slurm/cluster.sh"

if ! why=$(slurm_cluster_available); then
  echo "slurm_live: skipped ($why)"
  exit 0
fi
chmod 755 "$tmp"  # the other user's job reads slurm.conf under it
cluster="$tmp/slurm"
pid=""
slurm_cleanup_on_exit "$cluster"

# 100 gres/shard per GPU on every node, for fractions; node3 has four MIG
# devices too (Slurm's indexes 4-7, after its H100s).
if ! slurm_cluster_up "$cluster" node1:h100:4:16:64000:100 \
  node2:h100:4:16:64000:100 node3:h100:4:16:64000:100:1g.10gb=4 >"$tmp/cluster.log" 2>&1; then
  fail "the Slurm cluster did not start: $(cat "$tmp/cluster.log")"
  tail -20 "$cluster"/log/*.log
  finish slurm_live
fi

# Another user's job holds three of node1's four GPUs.
su nobody -s /bin/sh -c "SLURM_CONF=$SLURM_CONF sbatch --parsable \
  --job-name=other-user --nodelist=node1 --gres=gpu:h100:3 -c 1 --mem=100 \
  -o /dev/null --wrap='sleep 3600'" >"$tmp/foreign.id" 2>"$tmp/foreign.err" ||
  fail "the other user's job was refused: $(cat "$tmp/foreign.err")"
for _ in $(seq 1 100); do
  squeue -h -j "$(cat "$tmp/foreign.id")" -o %T | grep -q RUNNING && break
  sleep 0.1
done

engine='{template: reference, args: ["--hidden", "20"]}'
cat >"$tmp/serve.yaml" <<YAML
listen: 127.0.0.1:0
state: $tmp/state.db
log_dir: $tmp/logs
key_dir: $tmp/keys
drain_grace_s: 5
slurm:
  poll_interval_ms: 300
$(drill_deployments)
  - name: lazy
    engine: $engine
    resources: {whole: 1}
    autoscaling: {minReplicas: 0, maxReplicas: 1, lookBackPeriodS: 2,
                  upscaleDelayS: 1, downscaleDelayS: 2, idleTimeoutS: 3}
tenants:
  - name: demo
YAML

serve() { serve_live "$tmp/serve.yaml" "$@"; }
# --- 1. Replicas as Slurm jobs ----------------------------------------------
serve
wait_ready solo 2 60 || fail "solo: not 2 ready replicas"
wait_ready tp 1 60 || fail "tp: not 1 ready replica"
wait_ready share 1 60 || fail "share: not 1 ready replica"
wait_views_agree 30 4 ||
  fail "gpusched and Slurm disagree:
gpusched (replica node gpus job):
$(cat "$tmp/ours")
Slurm:
$(cat "$tmp/theirs")"
# spread (default node): solo's two replicas on two nodes.
[ "$(awk '$1 ~ /^solo/ {print $2}' "$tmp/ours" | sort -u | wc -l)" = 2 ] ||
  fail "solo's replicas share a node: $(cat "$tmp/ours")"
# node1 GPUs 0-2 are the other user's: no replica there, and gpusched shows
# them taken.
if awk '$2 == "node1" {print $3}' "$tmp/ours" | tr , '\n' | grep -q '^[0-2]$'; then
  fail "a replica on the other user's GPUs: $(cat "$tmp/ours")"
fi
api GET /api/v1/gpus >"$tmp/gpus.json"
python3 - "$tmp/gpus.json" <<'PY' || fail "node1 GPUs 0-2 are shown free: $(cat "$tmp/gpus.json")"
import json, sys
gpus = json.load(open(sys.argv[1]))
gpus = gpus.get("items", gpus) if isinstance(gpus, dict) else gpus
n1 = {g["index"]: g for g in gpus if g["node"] == "node1"}
sys.exit(0 if all(not n1[i]["healthy"] for i in (0, 1, 2)) else 1)
PY
api GET /api/v1/nodes >"$tmp/nodes.json"
python3 - "$tmp/nodes.json" <<'PY' || fail "the nodes view lacks Slurm's word: $(cat "$tmp/nodes.json")"
import json, sys
n = {x["name"]: x for x in json.load(open(sys.argv[1]))["items"]}
ok = (set(n) == {"node1", "node2", "node3"} and n["node1"]["foreignGpus"] == [0, 1, 2]
      and all(x["usable"] and x["address"].startswith("10.213.") for x in n.values()))
sys.exit(0 if ok else 1)
PY
# The fraction is a job on 25 of its GPU's 100 shards (20Gi of 80GB, 250
# milli: a quarter), and gpusched accounts that quarter on the GPU Slurm gave.
share_job=$(awk '$1 ~ /^share/ {print $4}' "$tmp/ours")
scontrol show job -d --oneliner "$share_job" >"$tmp/share.job"
expect_contains "$tmp/share.job" "GRES=shard:25(IDX:"
read -r share_node share_gpu <<<"$(awk '$1 ~ /^share/ {print $2, $3}' "$tmp/ours")"
python3 - "$tmp/gpus.json" "$share_node" "$share_gpu" <<'PY' || fail "share's quarter is not accounted on $share_node GPU $share_gpu: $(cat "$tmp/gpus.json")"
import json, sys
gpus = json.load(open(sys.argv[1]))
gpus = gpus.get("items", gpus) if isinstance(gpus, dict) else gpus
g = [g for g in gpus if g["node"] == sys.argv[2] and g["index"] == int(sys.argv[3])][0]
sys.exit(0 if any(r["deployment"] == "share" and r["milli"] == 250 for r in g["replicas"]) else 1)
PY
squeue -h -o '%j %T %k' | grep gpusched >"$tmp/squeue"
[ "$(grep -c RUNNING "$tmp/squeue")" = 4 ] || fail "squeue: $(cat "$tmp/squeue")"
expect_contains "$tmp/squeue" "gpusched:solo/"
expect_contains "$tmp/squeue" "gpusched:tp/"
for d in solo solo solo tp tp share share; do
  [ "$(chat $d)" = 200 ] || fail "chat $d through the gateway failed"
done
# Engines bind their node's address, and the gateway reaches them there.
api GET /api/v1/deployments/solo | jq_py "j['status']['replicaStatus'][0]['endpoint']" >"$tmp/ep"
grep -q "^10\.213\." "$tmp/ep" || fail "endpoint is not a node address: $(cat "$tmp/ep")"

# --- 2. scancel under load ----------------------------------------------------
victim=$(awk '$1 ~ /^solo/ {print $4; exit}' "$tmp/ours")
( ok=0; bad=0
  for _ in $(seq 1 120); do
    if [ "$(chat solo)" = 200 ]; then ok=$((ok + 1)); else bad=$((bad + 1)); fi
  done
  echo "$ok $bad" >"$tmp/load" ) &
load=$!
sleep 1
scancel "$victim"
wait "$load"
read -r ok bad <"$tmp/load"
[ "$bad" = 0 ] || fail "$bad of $((ok + bad)) requests failed while job $victim was cancelled"
wait_ready solo 2 60 || fail "solo was not back to 2 ready replicas"
wait_views_agree 30 4 || fail "after scancel: $(cat "$tmp/ours") vs $(cat "$tmp/theirs")"
grep -q " $victim\$" "$tmp/theirs" && fail "job $victim still runs"
api GET "/api/v1/events?kind=replica.exited&limit=50" >"$tmp/exited.json"
expect_contains "$tmp/exited.json" "Slurm job $victim"
expect_contains "$tmp/exited.json" "CANCELLED"

# --- 3. A node set down -------------------------------------------------------
down=$(awk '$1 ~ /^tp/ {print $2; exit}' "$tmp/ours")
scontrol update nodename="$down" state=down reason=gpusched-test
for _ in $(seq 1 300); do
  replicas_view >"$tmp/ours"
  grep -q "^tp.* $down " "$tmp/ours" || break
  sleep 0.2
done
wait_ready tp 1 60 || fail "tp was not ready again after $down went down"
wait_ready share 1 60 || fail "share was not ready again after $down went down"
wait_ready solo 2 60 || fail "solo was not ready again after $down went down"
wait_views_agree 30 4 || fail "after $down went down: $(cat "$tmp/ours") vs $(cat "$tmp/theirs")"
awk -v n="$down" '$2 == n' "$tmp/ours" | grep -q . && fail "replicas still on $down: $(cat "$tmp/ours")"
api GET "/api/v1/events?kind=node.unusable&limit=10" >"$tmp/node.json"
expect_contains "$tmp/node.json" "node $down is DOWN"
expect_contains "$tmp/node.json" "gpusched-test"
[ "$(chat tp)" = 200 ] || fail "chat tp after the move failed"
scontrol update nodename="$down" state=resume

# --- 4. Autoscaling 0 -> 1 -> 0 through Slurm ----------------------------------
[ "$(ready_count lazy)" = 0 ] || fail "lazy does not start at 0 replicas"
squeue -h -o %j | grep -q '^gpusched\.lazy' && fail "lazy has a job at 0 replicas"
held=()
for i in 1 2 3; do
  chat lazy >"$tmp/lazy.$i" &
  held+=($!)
done
wait "${held[@]}"
cat "$tmp"/lazy.* | sort | uniq -c >"$tmp/lazy"
[ "$(cat "$tmp"/lazy.* | grep -c '^200$')" = 3 ] ||
  fail "requests held at 0 replicas were not all answered: $(cat "$tmp/lazy")"
api GET "/api/v1/events?kind=replica.started&limit=50" >"$tmp/started.json"
expect_contains "$tmp/started.json" "lazy-"
for _ in $(seq 1 300); do
  [ "$(ready_count lazy)" = 0 ] && ! squeue -h -o %j | grep -q '^gpusched\.lazy' && break
  sleep 0.2
done
[ "$(ready_count lazy)" = 0 ] || fail "lazy did not scale back to 0"
squeue -h -o %j | grep -q '^gpusched\.lazy' && fail "lazy's job outlived its scale to 0"

# --- 5. kill -9 and restart ---------------------------------------------------
replicas_view >"$tmp/before"
# A job with gpusched's prefix for a deployment that no longer exists.
sbatch --parsable --job-name=gpusched.ghost-0 --comment=gpusched:ghost/ghost-0:1.0.0 \
  --nodelist=node3 -c 1 --mem=100 -o /dev/null --wrap='sleep 3600' >"$tmp/ghost.id"
kill -9 "$pid"
wait "$pid" 2>/dev/null
pid=""
serve
wait_ready solo 2 60 || fail "after restart: solo not ready"
wait_ready tp 1 60 || fail "after restart: tp not ready"
wait_ready share 1 60 || fail "after restart: share not ready"
wait_views_agree 30 4 || fail "after restart: $(cat "$tmp/ours") vs $(cat "$tmp/theirs")"
# The same jobs serve (adopted, not started again), none twice.
[ "$(awk '{print $4}' "$tmp/before" | sort)" = "$(awk '{print $4}' "$tmp/ours" | sort)" ] ||
  fail "jobs were not adopted: before
$(cat "$tmp/before")
after
$(cat "$tmp/ours")"
[ "$(squeue -h -o %j -t running,pending | grep -c '^gpusched\.')" = 4 ] ||
  fail "duplicate jobs after restart: $(squeue -o '%i %j %T %N')"
api GET "/api/v1/events?kind=replica.adopted&limit=10" >"$tmp/adopted.json"
[ "$(grep -o '"kind":"replica.adopted"' "$tmp/adopted.json" | wc -l)" = 4 ] ||
  fail "expected 4 replica.adopted events: $(cat "$tmp/adopted.json")"
api GET "/api/v1/events?kind=replica.orphan_killed&limit=10" >"$tmp/orphans.json"
expect_contains "$tmp/orphans.json" "Slurm job $(cat "$tmp/ghost.id") (gpusched.ghost-0)"
expect_contains "$tmp/orphans.json" "its deployment is gone"
for _ in $(seq 1 50); do
  squeue -h -j "$(cat "$tmp/ghost.id")" -o %T 2>/dev/null | grep -q . || break
  squeue -h -j "$(cat "$tmp/ghost.id")" -o %T | grep -qE 'RUNNING|PENDING' || break
  sleep 0.2
done
squeue -h -j "$(cat "$tmp/ghost.id")" -o %T 2>/dev/null | grep -qE 'RUNNING|PENDING' &&
  fail "the unwanted job still runs"
[ "$(chat solo)" = 200 ] || fail "the demo key no longer works after restart"
[ "$(chat tp)" = 200 ] || fail "tp does not answer after its job was adopted"
[ "$(chat share)" = 200 ] || fail "share does not answer after its job was adopted"

# --- 6. slurmctld goes away and comes back ----------------------------------------
slurm_ctld_stop "$cluster"
wait_event manager.unreachable 60 || fail "no manager.unreachable event while slurmctld was down"
for d in solo tp share; do
  [ "$(chat $d)" = 200 ] || fail "chat $d failed while slurmctld was down"
done
slurm_ctld_start "$cluster" || fail "slurmctld did not start again"
wait_event manager.reachable 60 || fail "no manager.reachable event after slurmctld came back"
wait_views_agree 30 4 || fail "after slurmctld came back: $(cat "$tmp/ours") vs $(cat "$tmp/theirs")"
[ "$(awk '{print $4}' "$tmp/before" | sort)" = "$(awk '{print $4}' "$tmp/ours" | sort)" ] ||
  fail "jobs changed while slurmctld was away: $(cat "$tmp/ours")"

# --- 7. MIG devices as typed GRES ---------------------------------------------
su nobody -s /bin/sh -c "SLURM_CONF=$SLURM_CONF sbatch --parsable \
  --job-name=other-mig --nodelist=node3 --gres=gpu:1g.10gb:1 -c 1 --mem=100 \
  -o /dev/null --wrap='sleep 3600'" >"$tmp/foreign_mig.id" 2>"$tmp/foreign_mig.err" ||
  fail "the other user's MIG job was refused: $(cat "$tmp/foreign_mig.err")"
wait_event node.mig_foreign 30 || fail "no node.mig_foreign event for the other user's MIG job"
[ "$(apply_mig slim 1g.10gb 2)" = 200 ] || fail "apply slim: $(cat "$tmp/apply.out")"
wait_ready slim 2 60 || fail "slim: not 2 ready MIG replicas: $(api GET /api/v1/deployments/slim)"
# gpusched's instance of each replica against the device Slurm gave its job
# (Slurm's index - 4 = the instance's place among node3's 1g.10gb ones),
# and the other user's device shown foreign.
mig_views() {  # prints "agree" or what differs
  api GET /api/v1/gpus >"$tmp/gpus.json"
  api GET /api/v1/deployments/slim >"$tmp/slim.json"
  scontrol show job -d --oneliner >"$tmp/jobs.txt"
  python3 - "$tmp/gpus.json" "$tmp/slim.json" "$tmp/jobs.txt" "$(cat "$tmp/foreign_mig.id")" <<'PY'
import json, re, sys
gpus = json.load(open(sys.argv[1]))
gpus = gpus.get("items", gpus) if isinstance(gpus, dict) else gpus
inst = []  # node3's 1g.10gb instances, in order
for g in sorted((g for g in gpus if g["node"] == "node3" and g.get("migInstances")), key=lambda g: g["index"]):
    for m in sorted(g["migInstances"], key=lambda m: m["start"]):
        if m["profile"] == "1g.10gb":
            inst.append((g["index"], m["start"], m["replica"], m["foreign"]))
slim = json.load(open(sys.argv[2]))
ours = {}
for r in slim["status"]["replicaStatus"]:
    if r["state"] == "ready":
        s = r["gpuShare"][0]
        ours[str(r["pid"])] = (r["node"], s["gpu"], s.get("migStart"), r["name"])
jobs = {}
for line in open(sys.argv[3]):
    f = dict(re.findall(r"(\S+?)=(\S*)", line))
    m = re.search(r" GRES=gpu:1g\.10gb:1\(IDX:(\d+)\)", line)
    if m and f.get("JobState") == "RUNNING":
        jobs[f["JobId"]] = int(m.group(1)) - 4
problems = []
if len(inst) != 4:
    problems.append(f"node3 shows {len(inst)} 1g.10gb instances, not 4")
if len(ours) != 2:
    problems.append(f"{len(ours)} ready slim replicas")
for pid, (node, gpu, start, name) in ours.items():
    k = jobs.get(pid)
    if node != "node3" or k is None or k >= len(inst) or inst[k][:2] != (gpu, start) or inst[k][2] != name:
        problems.append(f"{name} (job {pid}) holds GPU {gpu} slot {start} on {node}; Slurm gave device {k}")
k = jobs.get(sys.argv[4])
if k is None or k >= len(inst) or not inst[k][3] or inst[k][2]:
    problems.append(f"the other user's device {k} is not shown foreign and free of replicas")
print("; ".join(problems) + f" (instances {inst}, jobs {jobs})" if problems else "agree")
PY
}
for _ in $(seq 1 150); do
  [ "$(mig_views)" = agree ] && break
  sleep 0.2
done
[ "$(mig_views)" = agree ] || fail "MIG: gpusched and Slurm disagree: $(mig_views)"
scontrol show job -d --oneliner | grep "JobName=gpusched.slim" >"$tmp/slim.jobs"
[ "$(grep -c "GRES=gpu:1g.10gb:1(IDX:" "$tmp/slim.jobs")" = 2 ] ||
  fail "slim's jobs do not hold one 1g.10gb device each: $(cat "$tmp/slim.jobs")"
for _ in 1 2 3; do
  [ "$(chat slim)" = 200 ] || fail "chat slim through the gateway failed"
done
slim_jobs=$(squeue -h -o '%i %j' | awk '$2 ~ /^gpusched\.slim/ {print $1}' | sort)
kill -9 "$pid"
wait "$pid" 2>/dev/null
pid=""
serve
wait_ready slim 2 60 || fail "after restart: slim not ready"
for _ in $(seq 1 150); do
  [ "$(mig_views)" = agree ] && break
  sleep 0.2
done
[ "$(mig_views)" = agree ] || fail "MIG after restart: $(mig_views)"
[ "$(squeue -h -o '%i %j' | awk '$2 ~ /^gpusched\.slim/ {print $1}' | sort)" = "$slim_jobs" ] ||
  fail "slim's jobs were not adopted: before $slim_jobs, now $(squeue -o '%i %j %T')"
[ "$(chat slim)" = 200 ] || fail "chat slim after the restart failed"
api DELETE /api/v1/deployments/slim >/dev/null
for _ in $(seq 1 150); do
  squeue -h -o %j | grep -q '^gpusched\.slim' || break
  sleep 0.2
done
squeue -h -o %j | grep -q '^gpusched\.slim' && fail "slim's jobs outlived its delete: $(squeue)"
scancel "$(cat "$tmp/foreign_mig.id")"

# --- 8. A clean stop leaves the jobs; --stop-replicas-on-exit ends them ----
wait_views_agree 30 4 || fail "before the clean stop: $(cat "$tmp/ours") vs $(cat "$tmp/theirs")"
cp "$tmp/ours" "$tmp/before_stop"
kill -TERM "$pid"
wait "$pid" 2>/dev/null
pid=""
# gpusched has exited: whatever it would have cancelled is cancelled now.
[ "$(manager_view | awk '{print $4}' | sort)" = "$(awk '{print $4}' "$tmp/before_stop" | sort)" ] ||
  fail "a clean stop (SIGTERM) ended jobs: before
$(cat "$tmp/before_stop")
now $(squeue -o '%i %j %T')"
serve --stop-replicas-on-exit
wait_views_agree 30 4 || fail "after the clean restart: $(cat "$tmp/ours") vs $(cat "$tmp/theirs")"
[ "$(awk '{print $4}' "$tmp/ours" | sort)" = "$(awk '{print $4}' "$tmp/before_stop" | sort)" ] ||
  fail "jobs were not adopted after a clean stop: before
$(cat "$tmp/before_stop")
after
$(cat "$tmp/ours")"
[ "$(chat solo)" = 200 ] || fail "chat solo after the clean restart failed"
kill -TERM "$pid"
wait "$pid" 2>/dev/null
pid=""
# With --stop-replicas-on-exit, a clean stop ends its jobs.
for _ in $(seq 1 100); do
  squeue -h -o %j | grep -q '^gpusched\.' || break
  sleep 0.2
done
squeue -h -o %j | grep -q '^gpusched\.' && fail "jobs left after a stop with --stop-replicas-on-exit: $(squeue)"

finish slurm_live
