#!/usr/bin/env bash
# A real etcd cluster (Debian's etcd-server 3.4) for tests: N members, each
# on its own loopback (or given) address and free ports, with data
# directories under DIR. Source it, then:
#   etcd_cluster_up DIR N [ADDR]   starts N members listening on ADDR
#                                  (default 127.0.0.1); waits until the
#                                  cluster answers
#   etcd_cluster_down DIR          stops every member it started (by pid)
#   etcd_member_kill DIR I         kill -9 of member I (1..N)
#   etcd_member_start DIR I        starts member I again (its data kept)
#   etcd_endpoints DIR             the client URLs, comma-separated
#   etcd_endpoints_yaml DIR        the same as a YAML flow list
#   etcd_leader_member DIR         the index of the raft leader member
#   etcd_wait_healthy DIR [S]      waits (up to S s, default 30) until a
#                                  quorum answers
# Only the members' own pids are signalled; nothing else is touched.

etcd_available() {  # prints why not and fails when etcd cannot run here
  command -v etcd >/dev/null 2>&1 || { echo "etcd not installed (scripts/install-deps.sh installs etcd-server)"; return 1; }
  command -v etcdctl >/dev/null 2>&1 || { echo "etcdctl not installed (scripts/install-deps.sh installs etcd-client)"; return 1; }
}

_etcd_free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}

_etcd_member_run() {  # dir i state
  local dir=$1 i=$2 state=$3 addr cport pport
  addr=$(cat "$dir/addr")
  cport=$(sed -n "${i}p" "$dir/client_ports")
  pport=$(sed -n "${i}p" "$dir/peer_ports")
  setsid etcd --name "m$i" --data-dir "$dir/m$i" \
    --listen-client-urls "http://$addr:$cport" \
    --advertise-client-urls "http://$addr:$cport" \
    --listen-peer-urls "http://$addr:$pport" \
    --initial-advertise-peer-urls "http://$addr:$pport" \
    --initial-cluster "$(cat "$dir/initial_cluster")" \
    --initial-cluster-token "$(cat "$dir/token")" \
    --initial-cluster-state "$state" \
    --logger zap --log-outputs "$dir/m$i.log" \
    </dev/null >>"$dir/m$i.out" 2>&1 &
  echo $! >"$dir/m$i.pid"
}

etcd_cluster_up() {
  local dir=$1 n=$2 addr=${3:-127.0.0.1} i ic=""
  mkdir -p "$dir"
  echo "$addr" >"$dir/addr"
  echo "$n" >"$dir/n"
  echo "gstest-$$-$RANDOM" >"$dir/token"
  : >"$dir/client_ports"
  : >"$dir/peer_ports"
  for i in $(seq 1 "$n"); do
    _etcd_free_port >>"$dir/client_ports"
    _etcd_free_port >>"$dir/peer_ports"
  done
  for i in $(seq 1 "$n"); do
    ic+="${ic:+,}m$i=http://$addr:$(sed -n "${i}p" "$dir/peer_ports")"
  done
  echo "$ic" >"$dir/initial_cluster"
  for i in $(seq 1 "$n"); do _etcd_member_run "$dir" "$i" new; done
  etcd_wait_healthy "$dir" 30
}

etcd_endpoints() {
  local dir=$1 addr
  addr=$(cat "$dir/addr")
  sed "s|^|http://$addr:|" "$dir/client_ports" | paste -sd, -
}

etcd_endpoints_yaml() { echo "[$(etcd_endpoints "$1" | sed 's/,/, /g')]"; }

etcd_wait_healthy() {  # dir [seconds]
  local dir=$1 deadline=$((SECONDS + ${2:-30}))
  while [ $SECONDS -lt "$deadline" ]; do
    ETCDCTL_API=3 etcdctl --endpoints "$(etcd_endpoints "$dir")" \
      --command-timeout=2s put /gstest-health ok >/dev/null 2>&1 && return 0
    sleep 0.2
  done
  echo "etcd: no quorum after ${2:-30} s (logs in $dir/m*.log)" >&2
  return 1
}

etcd_member_kill() {  # dir i
  local pid
  pid=$(cat "$1/m$2.pid" 2>/dev/null) || return 0
  kill -9 "$pid" 2>/dev/null || true
  # Reaped here when this shell started it (no "Killed" notice later).
  wait "$pid" 2>/dev/null || true
  for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.1; done
}

etcd_member_start() { _etcd_member_run "$1" "$2" existing; }

etcd_cluster_down() {
  local dir=$1 i pid
  [ -f "$dir/n" ] || return 0
  for i in $(seq 1 "$(cat "$dir/n")"); do
    pid=$(cat "$dir/m$i.pid" 2>/dev/null) || continue
    kill "$pid" 2>/dev/null || true
  done
  for i in $(seq 1 "$(cat "$dir/n")"); do
    pid=$(cat "$dir/m$i.pid" 2>/dev/null) || continue
    for _ in $(seq 1 50); do _etcd_running "$pid" || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
    # Reaped here when this shell started it (no "Killed" notice later).
    wait "$pid" 2>/dev/null || true
  done
  rm -f "$dir/n"
}

# Whether process PID runs (a zombie that its parent has not reaped yet has
# ended).
_etcd_running() {
  local st
  st=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
  st=${st##*) }
  [ "${st%% *}" != Z ]
}

etcd_leader_member() {  # dir -> the index (1..N) of etcd's raft leader
  ETCDCTL_API=3 etcdctl --endpoints "$(etcd_endpoints "$1")" --command-timeout=2s \
    endpoint status -w json 2>/dev/null | python3 -c '
import json, sys
st = json.load(sys.stdin)
for i, s in enumerate(st, 1):
    if s["Status"]["header"]["member_id"] == s["Status"]["leader"]:
        print(i)
        break'
}
