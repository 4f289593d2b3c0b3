#!/usr/bin/env bash
# Slurm's share of adding a node (docs/capacity.md, "Slurm power saving"):
# the test cluster of tests/slurm/cluster.sh with two CLOUD nodes whose
# ResumeProgram starts `slurmd -b` in a fresh network namespace (a node that
# boots in ~0.1 s: what is measured is Slurm's own latency, not a cloud's).
# ROUNDS rounds, each timing both ways of getting a job onto a powered-down
# node, polled every 50 ms:
#   gpusched's: AddNodes (scontrol update State=POWER_UP, through the Slurm
#     launcher, slurm_capacity_tool) -> the node registered (State without
#     POWER*/NOT_RESPONDING) -> the job submitted then -> RUNNING;
#   Slurm's own: a job submitted to the powered-down node -> RUNNING (Slurm
#     resumes the node for it).
# Between rounds both nodes are powered down again (POWER_DOWN_ASAP) and
# waited for. Prints each trial and the medians.
# Usage: bench/slurm_power_up.sh [BUILD_DIR] [ROUNDS]
set -u
here=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:-$here/build}" && pwd)
rounds=${2:-5}
tool="$build/tests/slurm_capacity_tool"
source "$here/tests/lib.sh"
source "$here/tests/slurm/cluster.sh"
if ! why=$(slurm_cluster_available); then
  echo "slurm_power_up: cannot run: $why" >&2
  exit 2
fi
[ -x "$tool" ] || { echo "slurm_power_up: no $tool (build first)" >&2; exit 2; }
slurm_cleanup_on_exit "$tmp/slurm"

export SLURM_CLOUD_NODES="c1:h100:2:8:16000:pool=a c2:h100:2:8:16000:pool=b"
slurm_cluster_up "$tmp/slurm" n1:h100:2:8:16000 >"$tmp/cluster.log" 2>&1 ||
  { echo "the Slurm cluster did not start: $(cat "$tmp/cluster.log")" >&2; exit 1; }

now() { date +%s.%N; }
node_state() { scontrol show node "$1" | grep -o 'State=[^ ]*'; }
registered() {  # a state read, without POWER* or NOT_RESPONDING
  local s
  s=$(node_state "$1") && [ -n "$s" ] && ! grep -qE 'POWER|NOT_RESPONDING' <<<"$s"
}
running() { squeue -h -j "$1" -o %T | grep -q RUNNING; }
submit() { sbatch --parsable --nodelist="$1" --gres=gpu:h100:2 -c 1 --mem=100 -o /dev/null --wrap='sleep 600'; }
powered_down() { node_state "$1" | grep -q 'IDLE+CLOUD+POWERED_DOWN$'; }
ms() { python3 -c "import sys; print(round((float(sys.argv[2]) - float(sys.argv[1])) * 1000))" "$1" "$2"; }

printf '%-6s %14s %14s %14s %14s\n' round "up->reg ms" "up->run ms" "reg->run ms" "slurm-own ms"
for r in $(seq 1 "$rounds"); do
  # gpusched's way, on c1.
  t0=$(now)
  "$tool" add a 1 "round-$r" >"$tmp/add"
  grep -q '^added c1$' "$tmp/add" || { echo "AddNodes: $(cat "$tmp/add")" >&2; exit 1; }
  until registered c1; do sleep 0.05; done
  t1=$(now)
  j1=$(submit c1)
  until running "$j1"; do sleep 0.05; done
  t2=$(now)
  # Slurm's own resume, on c2.
  t3=$(now)
  j2=$(submit c2)
  for _ in $(seq 1 1800); do running "$j2" && break; sleep 0.05; done
  t4=$(now)
  running "$j2" || { echo "job $j2 did not run: $(scontrol show job "$j2")" >&2; exit 1; }
  printf '%-6s %14s %14s %14s %14s\n' "$r" "$(ms "$t0" "$t1")" "$(ms "$t0" "$t2")" \
    "$(ms "$t1" "$t2")" "$(ms "$t3" "$t4")" | tee -a "$tmp/trials"
  scancel "$j1" "$j2"
  scontrol update nodename=c1,c2 state=power_down_asap
  for _ in $(seq 1 1200); do powered_down c1 && powered_down c2 && break; sleep 0.1; done
  powered_down c1 && powered_down c2 ||
    { echo "not powered down: $(node_state c1) $(node_state c2)" >&2; exit 1; }
done
python3 - "$tmp/trials" <<'PY'
import statistics, sys
rows = [list(map(int, l.split()[1:])) for l in open(sys.argv[1])]
med = [statistics.median(c) for c in zip(*rows)]
print(f"median ({len(rows)} rounds): power_up -> registered {med[0]:.0f} ms, "
      f"-> job running {med[1]:.0f} ms (of which submit -> running {med[2]:.0f} ms); "
      f"a job sent to the powered-down node (Slurm's own resume) -> running {med[3]:.0f} ms "
      f"({med[3] / med[1]:.1f}x)")
PY
