# Shared helpers for the shell integration tests (sourced, not run).
# Each test sets up `tmp`, calls fail/expect_contains, and ends with finish.
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
failures=0

fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}

expect_contains() {  # file, text
  grep -qF -- "$2" "$1" || fail "expected '$2' in $(basename "$1"):
$(cat "$1")"
}

finish() {  # name
  if [ "$failures" -ne 0 ]; then
    echo "$failures failure(s)"
    exit 1
  fi
  echo "$1: all checks passed"
}

# Starts `$bin serve --config FILE` in the background and waits until its
# replicas are ready and it has printed the tenants' keys: sets pid, url
# (http://127.0.0.1:PORT, empty when serve did not start; its stderr is in
# $tmp/err) and key (the first tenant's API key).
start_serve() {  # config file
  "$bin" serve --config "$1" >"$tmp/out" 2>"$tmp/err" &
  pid=$!
  url=""
  key=""
  for _ in $(seq 1 600); do
    key=$(grep -o 'key: gs-[A-Za-z0-9_-]*' "$tmp/out" 2>/dev/null | head -1 || true)
    [ -n "$key" ] && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.05
  done
  key=${key#key: }
  url=$(grep -o 'http://127.0.0.1:[0-9]*' "$tmp/out" 2>/dev/null | head -1 || true)
}

# Starts `$bin serve --config FILE` in the background and waits until it
# says every replica is ready: sets pid and url (empty when serve did not
# start; its stderr is appended to $tmp/err).
serve_until_ready() {  # config file [serve flags...]
  : >"$tmp/out"
  "$bin" serve --config "$1" "${@:2}" >"$tmp/out" 2>>"$tmp/err" &
  pid=$!
  for _ in $(seq 1 600); do
    grep -q "all replicas ready" "$tmp/out" 2>/dev/null && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.05
  done
  url=$(grep -o 'http://127.0.0.1:[0-9]*' "$tmp/out" | head -1)
  grep -q "all replicas ready" "$tmp/out" || url=""
}

# Polls GET /api/v1/deployments/NAME (as $admin) until the python condition
# over its status `s` holds; false after TIMEOUT seconds.
wait_status() {  # deployment condition timeout-seconds
  for _ in $(seq 1 $(($3 * 20))); do
    if [ "$(curl -s "$url/api/v1/deployments/$1" -H "Authorization: Bearer $admin" |
      jq_py "(lambda s: $2)(j['status'])" 2>/dev/null)" = True ]; then
      return 0
    fi
    sleep 0.05
  done
  return 1
}

# Ends the test, failed, when serve did not start (`url` is empty).
served_or_finish() {  # test name
  [ -n "$url" ] && return 0
  fail "serve did not start: $(cat "$tmp/err")"
  kill -9 "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
  finish "$1"
}

# Skips the test where node is absent; fails it when the npm package is not
# installed in $e2e (tests/e2e).
need_node_package() {  # test name, package
  if ! command -v node >/dev/null 2>&1; then
    echo "$1: skipped (node is not installed; scripts/install-deps.sh installs it)"
    exit 0
  fi
  if [ ! -f "$e2e/node_modules/$2/package.json" ]; then
    fail "no $2 in $e2e/node_modules: run scripts/install-deps.sh (npm ci there)"
    finish "$1"
  fi
}

jq_py() {  # python expression over the JSON on stdin, bound to j
  python3 -c "import json,sys; j=json.load(sys.stdin); print($1)"
}

# Prints the platform lines of a serve config using $tmp/inventory.yaml:
# port 0, state, logs and keys under $tmp. A test appends its own lines.
serve_config_lines() {
  cat <<YAML
listen: 127.0.0.1:0
state: $tmp/state.db
log_dir: $tmp/logs
key_dir: $tmp/keys
inventory: $tmp/inventory.yaml
gpu_discovery: declared
YAML
}

# Writes $tmp/inventory.yaml (one declared node with two NVLinked H100s)
# and prints serve_config_lines.
serve_config_head() {
  cat >"$tmp/inventory.yaml" <<YAML
apiVersion: gpusched.io/v1
kind: Inventory
spec:
  nodes:
    - name: local
      cpu: "16"
      memory: 64Gi
      gpus: {model: H100-SXM-80GB, count: 2, nvlink: all}
YAML
  serve_config_lines
}

# The head of a live drill's serve config: port 0, state, logs and keys
# under $tmp, a 5 s drain grace.
live_config_head() {
  cat <<YAML
listen: 127.0.0.1:0
state: $tmp/state.db
log_dir: $tmp/logs
key_dir: $tmp/keys
drain_grace_s: 5
YAML
}

# --- Live serve with an admin key and a tenant `demo` (key_dir $tmp/keys),
# for the cluster drills (slurm_live, kube_live). `test_name` names the test.
serve_live() {  # config file [serve flags...]: sets pid, url, admin, demo
  serve_until_ready "$@"
  served_or_finish "$test_name"
  admin=$(cat "$tmp/keys/admin.key")
  demo=$(cat "$tmp/keys/demo.key")
}
api() {  # method path [curl args]
  curl -s -m 10 -X "$1" "$url$2" -H "Authorization: Bearer $admin" "${@:3}"
}
chat() {  # deployment -> status code
  curl -s -o /dev/null -w '%{http_code}\n' -m 60 "$url/v1/chat/completions" \
    -H "Authorization: Bearer $demo" -H 'Content-Type: application/json' \
    -d "{\"model\":\"$1\",\"max_tokens\":4,\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}"
}
# Applies a deployment of the reference engine with RESOURCES (a YAML map)
# through the control API; prints the HTTP status, the body goes to
# $tmp/apply.out.
apply_reference() {  # name resources replicas
  curl -s -o "$tmp/apply.out" -w '%{http_code}' -m 10 -X POST "$url/api/v1/apply" \
    -H "Authorization: Bearer $admin" --data-binary "apiVersion: gpusched.io/v1
kind: Deployment
metadata: {name: $1}
spec:
  model: $1
  engine: {template: reference, args: [\"--hidden\", \"20\"]}
  resources: $2
  replicas: $3"
}
# The same on one MIG slice of PROFILE.
apply_mig() { apply_reference "$1" "{mig: $2}" "$3"; }  # name profile replicas
ready_count() {  # deployment
  api GET "/api/v1/deployments/$1" | jq_py "j['status']['readyReplicas']" 2>/dev/null
}
wait_ready() {  # deployment count seconds
  for _ in $(seq 1 $(($3 * 10))); do
    [ "$(ready_count "$1")" = "$2" ] && return 0
    sleep 0.1
  done
  return 1
}
wait_event() {  # kind seconds [text]: until an event of `kind` (with text)
  for _ in $(seq 1 $(($2 * 5))); do
    api GET "/api/v1/events?kind=$1&limit=20" | grep -q "\"kind\":\"$1\".*${3:-}" && return 0
    sleep 0.2
  done
  return 1
}
# The Slurm drills' views (slurm_live, slurm_capacity_live), for
# wait_views_agree. One line per replica of gpusched's view: name node gpus
# job, sorted.
replicas_view() {
  api GET /api/v1/deployments | python3 -c '
import json, sys
for d in json.load(sys.stdin)["items"]:
    for r in d["status"]["replicaStatus"]:
        if r["state"] in ("ready", "starting"):
            print(r["name"], r["node"], ",".join(map(str, sorted(r["gpus"]))), r["pid"])
' | sort
}
# The same from Slurm: gpusched's running jobs.
manager_view() {
  scontrol show job -d --oneliner | python3 -c '
import re, sys
def idx(s):
    out = []
    for part in s.split(","):
        a, _, b = part.partition("-")
        out += range(int(a), int(b or a) + 1)
    return out
for line in sys.stdin:
    f = dict(re.findall(r"(\S+?)=(\S*)", line))
    if not f.get("JobName", "").startswith("gpusched.") or f.get("JobState") != "RUNNING":
        continue
    m = re.search(r" GRES=(?:gpu|shard):[^(]*\(IDX:([^)]*)\)", line)
    print(f["JobName"][len("gpusched."):], f["BatchHost"], ",".join(map(str, idx(m.group(1)))) if m else "", f["JobId"])
' | sort
}

# Until replicas_view (gpusched's) and manager_view (the cluster manager's),
# Slurm's above or the test's own, print the same `count` lines.
wait_views_agree() {  # seconds count
  for _ in $(seq 1 $(($1 * 5))); do
    replicas_view >"$tmp/ours"
    manager_view >"$tmp/theirs"
    [ -s "$tmp/ours" ] && [ "$(wc -l <"$tmp/ours")" = "$2" ] &&
      cmp -s "$tmp/ours" "$tmp/theirs" && return 0
    sleep 0.2
  done
  return 1
}
# --- Capacity on demand drills (slurm_capacity_live, kube_capacity_live) ---
# Events of KIND (oldest first) as "timeMicros message" lines.
events() {
  api GET "/api/v1/events?kind=$1&limit=100" | python3 -c '
import json, sys
for e in sorted(json.load(sys.stdin)["items"], key=lambda e: e["id"]):
    print(e["timeMicros"], e["message"])'
}
wait_line() {  # seconds command... : until the command prints a line
  local s=$1
  shift
  for _ in $(seq 1 $((s * 5))); do
    [ -n "$("$@" 2>/dev/null)" ] && return 0
    sleep 0.2
  done
  return 1
}
event_with() { events "$1" | grep -F -- "$2"; }
# gpusched's capacity state of NODE (GET /api/v1/pools).
pool_state() {
  api GET /api/v1/pools | python3 -c '
import json, sys
for p in json.load(sys.stdin)["items"]:
    n = p["nodes"].get(sys.argv[1])
    if n: print(n["state"])' "$1"
}
wait_pool_state() { wait_output "$3" "$2" pool_state "$1"; }  # node state seconds
# Until the command prints exactly TEXT.
wait_output() {  # seconds text command...
  local s=$1 want=$2
  shift 2
  for _ in $(seq 1 $((s * 5))); do
    [ "$("$@" 2>/dev/null)" = "$want" ] && return 0
    sleep 0.2
  done
  return 1
}
# The node a deployment's ready replica runs on, as gpusched says.
replica_node() { replicas_view | awk -v d="$1" 'index($1, d "-") == 1 {print $2; exit}'; }

# The drills' deployments on the reference engine: solo (2 x 1 GPU), tp
# (1 x 2 GPUs), share (a quarter of a GPU), as serve-config YAML.
drill_deployments() {
  local engine='{template: reference, args: ["--hidden", "20"]}'
  cat <<YAML
deployments:
  - name: solo
    engine: $engine
    resources: {whole: 1}
    replicas: 2
  - name: tp
    engine: $engine
    resources: {whole: 2}
    replicas: 1
  - name: share
    engine: $engine
    resources: {fraction: {milli: 250, memory: 20Gi}}
    replicas: 1
YAML
}

# The leader's id in a GET /api/v1/cluster answer on stdin ("" for none or
# for an answer that is not one).
cluster_leader() {
  python3 -c '
import json, sys
try:
    l = json.load(sys.stdin)["leader"]
    print(l["id"] if l else "")
except Exception:
    print("")'
}
