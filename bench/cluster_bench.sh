# What bench/slurm_bench.sh and bench/kube_bench.sh share (sourced after
# tests/lib.sh): timing helpers, a serve started and stopped with its state
# cleared, and apply -> 4 ready rounds. Uses bin, rounds, tmp, url, admin.
now() { date +%s.%N; }
calc() { python3 -c "print(round($1, 3))"; }
median() { sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
ready() {  # deployment -> its ready replicas
  api GET "/api/v1/deployments/$1" | jq_py "j['status']['readyReplicas']" 2>/dev/null
}
engine='{template: reference, args: ["--hidden", "20"]}'

apply_rounds() {  # one apply -> 4 ready figure per line
  for _ in $(seq 1 "$rounds"); do
    cat >"$tmp/d.yaml" <<YAML
apiVersion: gpusched.io/v1
kind: Deployment
metadata: {name: bench}
spec:
  engine: $engine
  resources: {whole: 1}
  replicas: 4
YAML
    t0=$(now)
    "$bin" apply -f "$tmp/d.yaml" --server "$url" --key "$admin" >/dev/null
    for _ in $(seq 1 1200); do [ "$(ready bench)" = 4 ] && break; sleep 0.05; done
    calc "$(now) - $t0"
    "$bin" delete deployment bench --server "$url" --key "$admin" >/dev/null
    for _ in $(seq 1 600); do
      api GET /api/v1/deployments/bench | grep -q '"name":"bench"' || break
      sleep 0.1
    done
    sleep 1
  done
}
start() {  # config
  serve_until_ready "$1"
  [ -n "$url" ] || { echo "serve did not start: $(cat "$tmp/err")" >&2; exit 1; }
  admin=$(cat "$tmp/keys/admin.key")
}
stop() {
  kill -TERM "$pid"; wait "$pid" 2>/dev/null; pid=""
  rm -rf "$tmp/state.db" "$tmp/keys" "$tmp/logs"
}
head="listen: 127.0.0.1:0
state: $tmp/state.db
log_dir: $tmp/logs
key_dir: $tmp/keys
drain_grace_s: 2"

