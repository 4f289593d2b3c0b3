#!/usr/bin/env bash
# A real Slurm cluster on this machine, for tests: one slurmctld and N slurmd
# hosts, each in a network namespace of its own (veth pairs on a bridge,
# addresses in a private /24 of the test's own) with its own hostname, and
# fake GPUs declared in gres.conf (File= device nodes made with mknod).
# Root only. Source it, then:
#   slurm_cluster_up DIR SPEC...   SPEC = name:gpu_type:gpus:cpus:memory_mib
#                                  [:shards[:mig]], shards: gres/shard per
#                                  GPU (may be empty); mig: MIG devices as
#                                  typed GRES, "1g.10gb=7,3g.40gb=1", after
#                                  the whole GPUs in gres.conf and Gres=
#   slurm_cluster_down DIR         stops every daemon it started, removes the
#                                  namespaces, the bridge and the veths
#   slurm_ctld_stop|start DIR      stops or starts slurmctld alone
#   slurm_add_host DIR SUFFIX ADDR another host on the cluster's bridge (a
#                                  namespace <tag>-SUFFIX), removed with it
# CLOUD nodes (Slurm's power saving), when SLURM_CLOUD_NODES is set before
# up: specs "name:gpu_type:gpus:cpus:memory_mib:features" separated by spaces
# (features comma-separated, e.g. "pool=h100,spot"). They are State=CLOUD in
# a partition "cloud" of their own whose SuspendTime (SLURM_SUSPEND_TIME,
# default 300 s) enables power saving for them alone (SuspendTime=INFINITE
# elsewhere, and SuspendExcNodes names the static nodes). The cluster's
# ResumeProgram (etc/resume.sh, written here) enters the root namespaces
# through munged's pid (the programs run inside slurmctld's namespaces),
# makes the node's namespace and starts `slurmd -b -N NODE` there; a node
# named in $dir/resume-fail instead makes the program exit 1 without
# starting it. SuspendProgram (etc/suspend.sh) stops slurmd and removes the
# namespace. Each program appends "<epoch.ns> <program> <nodes>" to
# $dir/log/power.log. ResumeTimeout is SLURM_RESUME_TIMEOUT (default 30 s).
# After up: SLURM_CONF is exported (every Slurm command uses the test's own
# config), SLURM_BRIDGE_ADDR is the root namespace's address on the bridge,
# and `slurm_node_addr NAME` prints a node's address.
#
# Facts this relies on (Debian 12, Slurm 22.05): `ip netns exec` remounts
# /sys, so the host's cgroup tree is bound back inside; the host's cgroups are
# hybrid, which Slurm refuses to autodetect, so cgroup.conf names cgroup/v1
# with every constraint off; proctrack/linuxproc and task/none need no cgroup
# setup; `slurmd -N NAME` with %n in its paths keeps the daemons apart.

slurm_cluster_available() {  # prints why not and fails when it cannot run here
  if [ "$(id -u)" != 0 ]; then echo "not root: network namespaces cannot be created"; return 1; fi
  for c in slurmctld slurmd munged scontrol sbatch squeue scancel ip unshare mknod; do
    command -v "$c" >/dev/null 2>&1 || { echo "$c not installed (scripts/install-deps.sh installs slurm-wlm and munge)"; return 1; }
  done
  local probe="gsprobe$$"
  if ! ip netns add "$probe" 2>/dev/null; then echo "ip netns add failed: network namespaces cannot be created"; return 1; fi
  ip netns del "$probe"
}

# A /24 unlikely to be in use: 10.213.(pid % 200 + 20).0/24, moved on while
# the root namespace already has a route into it.
_slurm_pick_net() {
  local i n
  for i in $(seq 0 199); do
    n=$(( ($$ + i) % 200 + 20 ))
    ip route show | grep -q "^10\.213\.$n\." || { echo "10.213.$n"; return 0; }
  done
  return 1
}

_slurm_ns_exec() {  # ns, hostname, command... (in the namespace, with its own hostname and the host's cgroups)
  local ns=$1 host=$2; shift 2
  ip netns exec "$ns" unshare --uts --mount -- sh -c '
    mount --rbind /proc/1/root/sys/fs/cgroup /sys/fs/cgroup 2>/dev/null
    hostname "$0"; exec "$@"' "$host" "$@"
}

# A host on the cluster's bridge: a namespace "<tag>-SUFFIX" with ADDRESS,
# removed with the cluster (slurm_cluster_down).
slurm_add_host() {  # dir suffix address
  local dir=$1 tag ns
  tag=$(cat "$dir/tag")
  ns="${tag}-$2"
  ip netns add "$ns"
  ip link add "${tag}v$2" type veth peer name "${tag}p$2"
  ip link set "${tag}p$2" netns "$ns"
  ip link set "${tag}v$2" master "${tag}br" up
  ip netns exec "$ns" ip addr add "$3/24" dev "${tag}p$2"
  ip netns exec "$ns" ip link set "${tag}p$2" up
  ip netns exec "$ns" ip link set lo up
  echo "$ns" >>"$dir/namespaces"
}

slurm_cluster_up() {
  local dir=$1; shift
  local tag="gs$$" net
  net=$(_slurm_pick_net) || { echo "cluster: no free 10.213.x.0/24" >&2; return 1; }
  mkdir -p "$dir"/{etc,state,dev,log}
  echo "$tag" >"$dir/tag"
  echo "$net" >"$dir/net"
  export SLURM_CONF=$dir/etc/slurm.conf
  export SLURM_BRIDGE_ADDR=$net.1

  # The bridge, in the root namespace (gpusched and the tests live here).
  ip link add "${tag}br" type bridge
  ip addr add "$net.1/24" dev "${tag}br"
  ip link set "${tag}br" up

  # munge: its own key and socket.
  dd if=/dev/urandom of="$dir/etc/munge.key" bs=1024 count=1 status=none
  chmod 400 "$dir/etc/munge.key"
  munged --force --key-file="$dir/etc/munge.key" --socket="$dir/munge.sock" \
    --pid-file="$dir/munged.pid" --log-file="$dir/log/munged.log" \
    --seed-file="$dir/munge.seed" || { echo "cluster: munged did not start" >&2; return 1; }

  local nodes="" gresconf="" gres_types=gpu i=0 spec name type gpus cpus mem shards mig gres addr g m mtype mcount dev
  for spec in "$@"; do
    i=$((i + 1))
    shards=""
    mig=""
    IFS=: read -r name type gpus cpus mem shards mig <<<"$spec"
    addr="$net.$((10 + i))"
    echo "$name $addr" >>"$dir/nodes"
    mkdir -p "$dir/dev/$name"
    for g in $(seq 0 $((gpus - 1))); do
      mknod "$dir/dev/$name/nvidia$g" c 195 "$g"
    done
    gres=""
    if [ "$gpus" -gt 0 ]; then
      gres="gpu:$type:$gpus"
      gresconf+="NodeName=$name Name=gpu Type=$type File=$dir/dev/$name/nvidia[0-$((gpus - 1))]"$'\n'
    fi
    if [ -n "$shards" ]; then
      # Shards per GPU device, in the GPUs' order: a shard's index is its GPU's.
      gres_types=gpu,shard
      gres+=",shard:$((gpus * shards))"
      for g in $(seq 0 $((gpus - 1))); do
        gresconf+="NodeName=$name Name=shard Count=$shards File=$dir/dev/$name/nvidia$g"$'\n'
      done
    fi
    # MIG devices: one device node each, numbered after the whole GPUs (a
    # real node's are /dev/nvidia-caps/nvidia-capN plus the parent GPU).
    dev=$gpus
    for m in ${mig//,/ }; do
      mtype=${m%%=*}
      mcount=${m#*=}
      gres="${gres:+$gres,}gpu:$mtype:$mcount"
      for g in $(seq 1 "$mcount"); do
        mknod "$dir/dev/$name/nvidia$dev" c 195 "$dev"
        gresconf+="NodeName=$name Name=gpu Type=$mtype File=$dir/dev/$name/nvidia$dev"$'\n'
        dev=$((dev + 1))
      done
    done
    nodes+="NodeName=$name NodeAddr=$addr NodeHostname=$name CPUs=$cpus RealMemory=$mem Gres=$gres State=UNKNOWN"$'\n'
  done
  local all cloud="" power="" cloud_list="" ret2service=1
  all=$(awk '{print $1}' "$dir/nodes" | paste -sd, -)
  if [ -n "${SLURM_CLOUD_NODES:-}" ]; then
    _slurm_cloud_config "$dir" "$net" "$all" || return 1
    cloud=$(cat "$dir/etc/cloud.conf")$'\n'
    power=$(cat "$dir/etc/power.conf")
    gresconf+=$(cat "$dir/etc/cloud-gres.conf")$'\n'
    cloud_list=$(awk '{print $1}' "$dir/cloud_nodes" | paste -sd, -)
    # `slurmd -b` claims a boot at its start: a registration after the
    # first (rare, seconds after a resume) then looks like a reboot, and
    # slurmctld set the node DOWN "Node unexpectedly rebooted", failing its
    # job (seen once in ~35 power-ups of bench/slurm_capacity_live.sh).
    # ReturnToService=2 is the FAQ's way to keep such a node in service.
    ret2service=2
  fi

  cat >"$SLURM_CONF" <<CONF
ClusterName=gstest
SlurmctldHost=ctl($net.2)
AuthType=auth/munge
AuthInfo=socket=$dir/munge.sock
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool/%n
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd-%n.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SwitchType=switch/none
MpiDefault=none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
GresTypes=$gres_types
ReturnToService=$ret2service
SlurmctldTimeout=30
SlurmdTimeout=20
InactiveLimit=0
MinJobAge=60
KillWait=5
Waittime=0
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=2
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
JobAcctGatherType=jobacct_gather/none
MailProg=/bin/true
SlurmdParameters=config_overrides
$power
$nodes$cloud
PartitionName=gpu Nodes=$all${cloud_list:+,$cloud_list} Default=YES MaxTime=INFINITE State=UP
${cloud_list:+PartitionName=cloud Nodes=$cloud_list MaxTime=INFINITE State=UP SuspendTime=${SLURM_SUSPEND_TIME:-300}}
CONF
  printf '%s' "$gresconf" >"$dir/etc/gres.conf"
  cat >"$dir/etc/cgroup.conf" <<CONF
CgroupPlugin=cgroup/v1
ConstrainCores=no
ConstrainRAMSpace=no
ConstrainDevices=no
CONF

  slurm_add_host "$dir" ctl "$net.2"
  _slurm_ns_exec "${tag}-ctl" ctl slurmctld -i -f "$SLURM_CONF" ||
    { echo "cluster: slurmctld did not start (see $dir/log/slurmctld.log)" >&2; return 1; }
  i=0
  while read -r name addr; do
    i=$((i + 1))
    slurm_add_host "$dir" "n$i" "$addr"
    mkdir -p "$dir/spool/$name"
    _slurm_ns_exec "${tag}-n$i" "$name" slurmd -N "$name" -f "$SLURM_CONF" ||
      { echo "cluster: slurmd $name did not start (see $dir/log/slurmd-$name.log)" >&2; return 1; }
  done <"$dir/nodes"

  # Up when every node answers idle.
  local want deadline=$((SECONDS + 60)) idle
  want=$(wc -l <"$dir/nodes")
  while [ $SECONDS -lt $deadline ]; do
    idle=$(sinfo -h -N -o '%N %t' 2>/dev/null | awk '$2 == "idle"' | wc -l)
    [ "$idle" -ge "$want" ] && return 0
    sleep 0.5
  done
  echo "cluster: $idle of $want nodes idle after 60 s:" >&2
  sinfo -N >&2 || true
  return 1
}

# The CLOUD nodes of SLURM_CLOUD_NODES: writes etc/cloud.conf (NodeName
# lines), etc/cloud-gres.conf, etc/power.conf (the power saving settings),
# the programs (etc/{resume,suspend,resumefail}.sh, each running
# tests/slurm/power.sh), and $dir/cloud_nodes ("name address suffix" a line).
_slurm_cloud_config() {  # dir net static-node-list
  local dir=$1 net=$2 static=$3 j=0 spec name type gpus cpus mem features g gres prog here
  : >"$dir/cloud_nodes"
  : >"$dir/etc/cloud.conf"
  : >"$dir/etc/cloud-gres.conf"
  : >"$dir/resume-fail"
  for spec in $SLURM_CLOUD_NODES; do
    j=$((j + 1))
    IFS=: read -r name type gpus cpus mem features <<<"$spec"
    echo "$name $net.$((100 + j)) k$j" >>"$dir/cloud_nodes"
    mkdir -p "$dir/dev/$name" "$dir/spool/$name"
    gres=""
    if [ "$gpus" -gt 0 ]; then
      for g in $(seq 0 $((gpus - 1))); do mknod "$dir/dev/$name/nvidia$g" c 195 "$g"; done
      gres=" Gres=gpu:$type:$gpus"
      echo "NodeName=$name Name=gpu Type=$type File=$dir/dev/$name/nvidia[0-$((gpus - 1))]" >>"$dir/etc/cloud-gres.conf"
    fi
    echo "NodeName=$name NodeAddr=$net.$((100 + j)) NodeHostname=$name CPUs=$cpus RealMemory=$mem$gres${features:+ Feature=$features} State=CLOUD" >>"$dir/etc/cloud.conf"
  done
  # Slurm runs the programs by absolute path, without PATH; they must not be
  # group- or world-writable.
  here=$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")
  for prog in resume suspend resumefail; do
    printf '#!/bin/bash\nexec /bin/bash %q %s %q "$@"\n' "$here/power.sh" "$prog" "$dir" >"$dir/etc/$prog.sh"
    chmod 755 "$dir/etc/$prog.sh"
  done
  cat >"$dir/etc/power.conf" <<EOF
SuspendTime=INFINITE
SuspendExcNodes=$static
SuspendTimeout=10
ResumeTimeout=${SLURM_RESUME_TIMEOUT:-30}
ResumeProgram=$dir/etc/resume.sh
SuspendProgram=$dir/etc/suspend.sh
ResumeFailProgram=$dir/etc/resumefail.sh
SlurmctldParameters=idle_on_node_suspend,power_save_interval=1,power_save_min_interval=0
PrivateData=cloud
TreeWidth=65533
CommunicationParameters=NoAddrCache
DebugFlags=Power
EOF
}

# The capacity drills' cluster (slurm_capacity, slurm_capacity_live): a
# static node n1 (2 H100s) and three CLOUD nodes, c1 and c2 (2 H100s each) in
# pool "h100" and c3 (2 L4s) in pool "broken", whose ResumeProgram fails;
# ResumeTimeout 20 s. On failure the test fails with the logs and finishes
# (`fail`, `finish` and `tmp` of tests/lib.sh).
slurm_capacity_cluster_up() {  # dir test-name
  export SLURM_CLOUD_NODES="c1:h100:2:8:16000:pool=h100 c2:h100:2:8:16000:pool=h100 c3:l4:2:8:16000:pool=broken"
  export SLURM_RESUME_TIMEOUT=20
  if ! slurm_cluster_up "$1" n1:h100:2:8:16000 >"$tmp/cluster.log" 2>&1; then
    fail "the Slurm cluster did not start: $(cat "$tmp/cluster.log")"
    tail -20 "$1"/log/*.log
    finish "$2"
  fi
  echo c3 >"$1/resume-fail"
}

# slurmctld alone, stopped and started again (its state survives): Slurm's
# controller going away under a running cluster.
slurm_ctld_stop() { _slurm_kill_pidfile "$1/slurmctld.pid"; }
slurm_ctld_start() {
  _slurm_ns_exec "$(cat "$1/tag")-ctl" ctl slurmctld -i -f "$SLURM_CONF"
}

slurm_node_addr() { awk -v n="$1" '$1 == n {print $2}' "$SLURM_DIR_FOR_ADDR/nodes"; }

_slurm_kill_pidfile() {
  local f=$1 pid
  [ -f "$f" ] || return 0
  pid=$(cat "$f" 2>/dev/null) || return 0
  [ -n "$pid" ] && kill "$pid" 2>/dev/null
  for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.1; done
  kill -9 "$pid" 2>/dev/null || true
}

# On the script's exit (and through it on INT or TERM, so a killed test
# leaves nothing): kill -9 the gpusched it started ($pid, when set), bring
# the cluster in DIR down and remove $tmp.
slurm_cleanup_on_exit() {  # dir
  _slurm_cleanup_dir="$1"
  trap '[ -n "${pid:-}" ] && kill -9 "$pid" 2>/dev/null; slurm_cluster_down "$_slurm_cleanup_dir"; rm -rf "$tmp"' EXIT
  trap 'exit 1' INT TERM
}

slurm_cluster_down() {
  local dir=$1 tag f ns
  [ -f "$dir/tag" ] || return 0
  tag=$(cat "$dir/tag")
  # Jobs first (their engines), then the daemons, then munge.
  scancel --quiet --full --signal=KILL -u root 2>/dev/null || true
  for f in "$dir"/slurmd-*.pid; do _slurm_kill_pidfile "$f"; done
  _slurm_kill_pidfile "$dir/slurmctld.pid"
  _slurm_kill_pidfile "$dir/munged.pid"
  # Anything still running in a namespace the test made (an engine a slurmd
  # left behind) is the test's own: end it.
  if [ -f "$dir/namespaces" ]; then
    while read -r ns; do
      for p in $(ip netns pids "$ns" 2>/dev/null); do kill -9 "$p" 2>/dev/null || true; done
      ip netns del "$ns" 2>/dev/null || true
    done <"$dir/namespaces"
  fi
  ip link del "${tag}br" 2>/dev/null || true
  rm -f "$dir/tag"
}
