#!/bin/bash
# The power saving programs of the test cluster's CLOUD nodes
# (tests/slurm/cluster.sh, SLURM_CLOUD_NODES): slurmctld runs
# DIR/etc/{resume,suspend,resumefail}.sh, which run this as
#   power.sh resume|suspend|resumefail DIR HOSTLIST
# Slurm gives the programs no PATH and runs them inside slurmctld's own
# namespaces (network and mount): this enters the root ones through
# munged's pid (PID 1 refuses nsenter here) before touching the bridge.
#   resume: per node, its namespace on the cluster's bridge (at the address
#           slurm.conf gives it) and `slurmd -b -N NODE` in it (-b: the
#           namespaces share the kernel's boot time, so without it slurmctld
#           takes the registration for a node that never rebooted and
#           ignores it until ResumeTimeout); a node listed in DIR/resume-fail
#           is not started and the program exits 1.
#           It starts slurmd in a later wall-clock second than Slurm's
#           request: slurmctld takes the boot time of a node as now minus
#           the uptime slurmd reports, both in whole seconds, and ignores a
#           registration whose boot time is before the second of the request
#           (waiting_for_node_boot in node_mgr.c). With -b the uptime counts
#           from slurmd's start, so a slurmd started in the request's second
#           can come out a second early: its one registration is ignored and
#           the node fails at ResumeTimeout (seen once in CI).
#   suspend: stops the node's slurmd and whatever else runs in its
#            namespace, removes the namespace and its veth.
#   resumefail: logs only (Slurm marked the nodes DOWN after ResumeTimeout).
# Every call appends "<epoch seconds> <action> <nodes>" to DIR/log/power.log.
export PATH=/usr/sbin:/usr/bin:/sbin:/bin
action=$1 dir=$2 nodes=$3
# slurmctld closes every descriptor before it runs a program (closeall(0) in
# power_save.c), stdin, stdout and stderr included. A daemon started from
# here would then open its log and its listening socket as fds 0-2 and lose
# them when it daemonizes: slurmd registers, but its first batch launch
# fails and the job is requeued held ("launch failed requeued held").
exec </dev/null >>"$dir/log/power.out" 2>&1
export SLURM_CONF=$dir/etc/slurm.conf
if [ -z "${GS_ROOT_NS:-}" ]; then
  exec env GS_ROOT_NS=1 nsenter -t "$(cat "$dir/munged.pid")" -n -m -u -- /bin/bash "$0" "$@"
fi
source "$(dirname "$0")/cluster.sh"
log() { echo "$(date +%s.%N) $*" >>"$dir/log/power.log"; }
log "$action $nodes"
tag=$(cat "$dir/tag")
rc=0
if [ "$action" = resume ]; then
  left=$((1000000000 - 10#$(date +%N)))
  sleep "$((left / 1000000000)).$(printf '%09d' $((left % 1000000000)))"
fi
for node in $(scontrol show hostnames "$nodes"); do
  read -r _ addr suffix < <(awk -v n="$node" '$1 == n' "$dir/cloud_nodes")
  [ -n "$suffix" ] || { log "$action: $node is not a cloud node"; rc=1; continue; }
  case $action in
    resume)
      if grep -qx "$node" "$dir/resume-fail"; then
        log "resume-refused $node"
        rc=1
        continue
      fi
      ip netns del "$tag-$suffix" 2>/dev/null
      ip link del "${tag}v$suffix" 2>/dev/null
      slurm_add_host "$dir" "$suffix" "$addr"
      if _slurm_ns_exec "$tag-$suffix" "$node" slurmd -b -N "$node" -f "$SLURM_CONF"; then
        log "slurmd-started $node"
      else
        log "slurmd-failed $node"
        rc=1
      fi
      ;;
    suspend)
      _slurm_kill_pidfile "$dir/slurmd-$node.pid"
      for p in $(ip netns pids "$tag-$suffix" 2>/dev/null); do kill -9 "$p" 2>/dev/null; done
      ip netns del "$tag-$suffix" 2>/dev/null
      ip link del "${tag}v$suffix" 2>/dev/null
      log "stopped $node"
      ;;
    resumefail) ;;
  esac
done
exit $rc
