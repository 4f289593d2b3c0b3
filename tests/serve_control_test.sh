#!/usr/bin/env bash
# End-to-end test of the control plane of `gpusched serve` (the real binary,
# reference engines, 127.0.0.1, port 0): replicas placed on a declared
# inventory's GPUs, manifests applied through /api/v1/apply (an invalid one
# is refused whole with every problem listed), tenant keys limited to their
# own things, scaling, an engine killed with -9 under load (no request that
# had not started streaming fails; the engine is restarted), gpusched
# killed with -9 and restarted (deployments and tenants applied through the
# API come back, the old engines are cleaned up), delete, logs and events.
# Usage: serve_control_test.sh GPUSCHED_BINARY SOURCE_DIR
set -u
bin="$1"
source "$(dirname "$0")/lib.sh"

{ serve_config_head; cat <<YAML; } >"$tmp/serve.yaml"
health_check_period_ms: 500
drain_grace_s: 5
deployments:
  - name: chat
    engine:
      template: reference
      # ~30 ms per token (baichuan-7b on an A10): requests are in flight
      # long enough for the crash drill.
      args: ["--hidden", "18", "--mode", "profile", "--profile-model",
             "baichuan-7b", "--gpu", "A10-24GB"]
    replicas: {min: 1, max: 3}
    resources: {fraction: {milli: 250, memory: 10Gi}}
tenants:
  - name: demo
YAML

start_serve() { serve_until_ready "$tmp/serve.yaml"; }
api() {  # method path [body] -> body on stdout, status in $tmp/code
  curl -s -o "$tmp/body" -w '%{http_code}' -X "$1" "$url$2" \
    -H "Authorization: Bearer ${KEY:-$admin}" --data-binary "${3:-}" >"$tmp/code"
  cat "$tmp/body"
}
wait_for() {  # python condition over GET $1 ; timeout seconds $2
  for _ in $(seq 1 $(($2 * 20))); do
    if [ "$(api GET "$1" | jq_py "$3" 2>/dev/null)" = True ]; then return 0; fi
    sleep 0.05
  done
  return 1
}

start_serve
served_or_finish serve_control
admin=$(cat "$tmp/keys/admin.key")
demo=$(cat "$tmp/keys/demo.key")

# Placement: chat-0 holds a quarter of a declared GPU.
api GET /api/v1/gpus >"$tmp/gpus.json"
[ "$(jq_py 'sum(g["allocatedMilli"] for g in j["items"])' <"$tmp/gpus.json")" = 250 ] ||
  fail "expected 250 milli allocated: $(cat "$tmp/gpus.json")"
expect_contains "$tmp/gpus.json" '"name":"chat-0"'
grep -q "CUDA_VISIBLE_DEVICES=" "$tmp/logs/chat-0.out" 2>/dev/null ||
  api GET '/api/v1/events?kind=replica.started' | grep -q CUDA_VISIBLE_DEVICES ||
  fail "replica.started event does not name the GPUs"

# Apply a deployment and a tenant through the API.
cat >"$tmp/apply.yaml" <<YAML
apiVersion: gpusched.io/v1
kind: Deployment
metadata: {name: embed}
spec:
  engine: {template: reference, args: ["--hidden", "8"]}
  resources: {fraction: {milli: 100, memory: 4Gi}}
---
apiVersion: gpusched.io/v1
kind: Tenant
metadata: {name: team2}
spec:
  models: [embed]
  limits: {requestsPerMinute: 600}
YAML
api POST /api/v1/apply "$(cat "$tmp/apply.yaml")" >"$tmp/applied.json"
[ "$(cat "$tmp/code")" = 200 ] || fail "apply: $(cat "$tmp/code") $(cat "$tmp/applied.json")"
expect_contains "$tmp/applied.json" '"action":"created"'
wait_for /api/v1/deployments/embed 20 'j["status"]["readyReplicas"] == 1' ||
  fail "embed did not become ready: $(cat "$tmp/body")"
# Applying the same again changes nothing.
api POST /api/v1/apply "$(cat "$tmp/apply.yaml")" >"$tmp/again.json"
expect_contains "$tmp/again.json" '"action":"unchanged"'

# The route table: a known path with another method is 405 naming the
# allowed ones (and an Allow header); an unknown path is 404.
curl -s -D "$tmp/405.h" -o "$tmp/405.json" -X PUT "$url/api/v1/deployments/embed" \
  -H "Authorization: Bearer $admin" >/dev/null
grep -qi '^HTTP/1.1 405' "$tmp/405.h" || fail "PUT of a deployment: $(head -1 "$tmp/405.h")"
grep -qi '^allow: GET, DELETE' "$tmp/405.h" || fail "no Allow header: $(cat "$tmp/405.h")"
api GET /api/v1/no-such-thing >/dev/null
[ "$(cat "$tmp/code")" = 404 ] || fail "unknown control path: $(cat "$tmp/code")"

# An invalid manifest is refused whole, every problem listed.
cat >"$tmp/bad.yaml" <<YAML
apiVersion: gpusched.io/v1
kind: Deployment
metadata: {name: ok-one}
spec:
  engine: {template: reference}
---
apiVersion: gpusched.io/v1
kind: Deployment
metadata: {name: broken}
spec:
  replicas: two
  engine: {template: reference}
  resources: {fraction: {milli: 5000, memory: 1Gi}}
  colour: blue
YAML
api POST /api/v1/apply "$(cat "$tmp/bad.yaml")" >"$tmp/bad.json"
[ "$(cat "$tmp/code")" = 422 ] || fail "invalid manifest: expected 422, got $(cat "$tmp/code")"
n=$(jq_py 'len(j["error"]["problems"])' <"$tmp/bad.json")
[ "${n:-0}" -ge 3 ] || fail "expected >= 3 problems: $(cat "$tmp/bad.json")"
api GET /api/v1/deployments/ok-one >/dev/null
[ "$(cat "$tmp/code")" = 404 ] || fail "a refused apply changed something"
printf 'apiVersion: gpusched.io/v1\nkind: Deployment\nmetadata: {name: x}\nspec: {engine: {template: vlm}}\n' >"$tmp/bad2.yaml"
api POST /api/v1/apply "$(cat "$tmp/bad2.yaml")" >"$tmp/bad2.json"
[ "$(cat "$tmp/code")" = 422 ] || fail "unknown template: expected 422"
expect_contains "$tmp/bad2.json" "vlm"

# Tenant keys: own things only.
KEY=$demo api GET /api/v1/gpus >/dev/null
[ "$(cat "$tmp/code")" = 403 ] || fail "tenant key on /gpus: expected 403"
KEY=$demo api GET /api/v1/deployments >"$tmp/mine.json"
[ "$(cat "$tmp/code")" = 200 ] || fail "tenant key on /deployments: $(cat "$tmp/code")"
api GET /api/v1/tenants/team2/keys >/dev/null
team2=$(api POST /api/v1/tenants/team2/keys '{"name":"t"}' | jq_py 'j["secret"]')
code=$(curl -s -o "$tmp/x" -w '%{http_code}' "$url/v1/embeddings" -H "Authorization: Bearer $team2" \
  -d '{"model":"chat","input":"hi"}')
[ "$code" = 404 ] || fail "team2 may not use chat: got $code"
code=$(curl -s -o "$tmp/x" -w '%{http_code}' "$url/v1/embeddings" -H "Authorization: Bearer $team2" \
  -d '{"model":"embed","input":"hi"}')
[ "$code" = 200 ] || fail "team2 embeddings: $code $(cat "$tmp/x")"
code=$(curl -s -o "$tmp/x" -w '%{http_code}' "$url/v2/models/embed/infer" -H "Authorization: Bearer $team2" \
  -d '{"inputs":[{"name":"text","datatype":"BYTES","shape":[1],"data":["hi"]}]}')
[ "$code" = 200 ] || fail "team2 KServe infer: $code $(cat "$tmp/x")"

# Scale chat to 2 replicas.
api POST /api/v1/deployments/chat/scale '{"replicas": 2}' >/dev/null
[ "$(cat "$tmp/code")" = 200 ] || fail "scale: $(cat "$tmp/code") $(cat "$tmp/body")"
wait_for /api/v1/deployments/chat 20 'j["status"]["readyReplicas"] == 2' ||
  fail "chat did not scale to 2: $(cat "$tmp/body")"
api POST /api/v1/deployments/chat/scale '{"replicas": 9}' >/dev/null
[ "$(cat "$tmp/code")" = 422 ] || fail "scale beyond max: expected 422, got $(cat "$tmp/code")"

# kill -9 an engine under load: every request still succeeds.
victim=$(api GET /api/v1/deployments/chat | jq_py '[r["pid"] for r in j["status"]["replicaStatus"] if r["name"]=="chat-0"][0]')
seq 1 60 | xargs -P 6 -I{} curl -s -o /dev/null -w '%{http_code}\n' "$url/v1/completions" \
  -H "Authorization: Bearer $demo" -d '{"model":"chat","prompt":"load {}","max_tokens":24}' >"$tmp/codes" &
loader=$!
# Kill it while it has requests in flight.
for _ in $(seq 1 100); do
  [ "$(api GET /api/v1/queues | jq_py '[q["inFlight"] for q in j["items"] if q["deployment"]=="chat"][0] >= 4')" = True ] && break
  sleep 0.02
done
sleep 0.2
kill -9 "$victim"
wait "$loader"
bad=$(grep -vc '^200$' "$tmp/codes")
[ "$bad" = 0 ] || fail "$bad of 60 requests failed when an engine died: $(sort "$tmp/codes" | uniq -c)"
wait_for /api/v1/deployments/chat 20 \
  '[r for r in j["status"]["replicaStatus"] if r["name"]=="chat-0"][0]["restarts"] >= 1 and j["status"]["readyReplicas"] == 2' ||
  fail "chat-0 was not restarted: $(cat "$tmp/body")"
api GET '/api/v1/events?kind=replica.exited' >"$tmp/exited.json"
expect_contains "$tmp/exited.json" "chat-0"

# Logs.
api GET '/api/v1/deployments/chat/logs?replica=chat-1&stream=stderr&tail=5' >/dev/null
[ "$(cat "$tmp/code")" = 200 ] || fail "logs: $(cat "$tmp/code")"

# kill -9 gpusched, restart: what the API applied is back.
old_engines=$(api GET /api/v1/replicas | jq_py '" ".join(str(r["pid"]) for r in j["items"])')
kill -9 "$pid"
wait "$pid" 2>/dev/null
start_serve
grep -q "all replicas ready" "$tmp/out" || fail "restart: not ready: $(tail -5 "$tmp/err")"
api GET /api/v1/deployments/embed >/dev/null
[ "$(cat "$tmp/code")" = 200 ] || fail "embed not restored after kill -9"
api GET /api/v1/tenants/team2 >/dev/null
[ "$(cat "$tmp/code")" = 200 ] || fail "team2 not restored after kill -9"
code=$(curl -s -o "$tmp/x" -w '%{http_code}' "$url/v1/embeddings" -H "Authorization: Bearer $team2" \
  -d '{"model":"embed","input":"hi"}')
[ "$code" = 200 ] || fail "team2 key after restart: $code $(cat "$tmp/x")"
wait_for /api/v1/deployments/chat 20 'j["status"]["readyReplicas"] == 2' ||
  fail "chat not back at 2 replicas: $(cat "$tmp/body")"
running() {  # pid: alive and not a zombie awaiting its reaper
  local st
  st=$(ps -o stat= -p "$1" 2>/dev/null) || return 1
  case "$st" in Z*) return 1 ;; esac
  return 0
}
for p in $old_engines; do
  for _ in $(seq 1 40); do running "$p" || break; sleep 0.05; done
  if running "$p"; then fail "engine $p of the killed gpusched still runs: $(ps -o pid,stat,cmd -p "$p")"; fi
done

# Delete: the deployment goes, with its engine.
embed_pid=$(api GET /api/v1/deployments/embed | jq_py 'j["status"]["replicaStatus"][0]["pid"]')
api DELETE /api/v1/deployments/embed >/dev/null
[ "$(cat "$tmp/code")" = 200 ] || fail "delete: $(cat "$tmp/code")"
for _ in $(seq 1 200); do running "$embed_pid" || break; sleep 0.05; done
running "$embed_pid" && fail "embed engine still runs after delete"
for _ in $(seq 1 100); do
  api GET /api/v1/deployments/embed >/dev/null
  [ "$(cat "$tmp/code")" = 404 ] && break
  sleep 0.05
done
[ "$(cat "$tmp/code")" = 404 ] || fail "deleted deployment still listed: $(cat "$tmp/body")"
api GET '/api/v1/events?deployment=embed&limit=50' >"$tmp/events.json"
expect_contains "$tmp/events.json" "deployment.deleted"
expect_contains "$tmp/events.json" "replica.placed"

# Quotas: a tenant's GPU limit bounds what its deployments hold; its
# concurrency limit bounds its requests in flight.
cat >"$tmp/quota.yaml" <<YAML
apiVersion: gpusched.io/v1
kind: Tenant
metadata: {name: capped}
spec:
  quota: {limit: 0.3}
  limits: {maxConcurrency: 1}
---
apiVersion: gpusched.io/v1
kind: Deployment
metadata: {name: capped-a}
spec:
  tenant: capped
  replicas: 2
  engine: {template: reference, args: ["--hidden", "8"]}
  resources: {fraction: {milli: 250, memory: 1Gi}}
YAML
api POST /api/v1/apply "$(cat "$tmp/quota.yaml")" >/dev/null
[ "$(cat "$tmp/code")" = 200 ] || fail "quota apply: $(cat "$tmp/body")"
wait_for /api/v1/deployments/capped-a 20 \
  'j["status"]["readyReplicas"] == 1 and any("GPU limit" in r["message"] for r in j["status"]["replicaStatus"])' ||
  fail "the tenant's GPU limit did not hold the second replica: $(cat "$tmp/body")"
capped=$(api POST /api/v1/tenants/capped/keys '{}' | jq_py 'j["secret"]')
curls=()
for i in 1 2; do
  curl -s -o /dev/null -w '%{http_code}\n' "$url/v1/completions" -H "Authorization: Bearer $capped" \
    -d '{"model":"chat","prompt":"slow","max_tokens":30}' >>"$tmp/capped_codes" &
  curls+=($!)
done
wait "${curls[@]}"
sort "$tmp/capped_codes" | tr '\n' ' ' | grep -q "200 429" ||
  fail "maxConcurrency 1: expected one 200 and one 429, got $(cat "$tmp/capped_codes")"
wait_for '/api/v1/events?kind=request.rejected&tenant=capped' 5 \
  'any(e["details"]["reason"] == "tenant_concurrency_limit" for e in j["items"])' ||
  fail "no request.rejected event for the 429: $(cat "$tmp/body")"
api DELETE /api/v1/deployments/capped-a >/dev/null

# The CLI against the running server.
export GPUSCHED_SERVER="$url" GPUSCHED_KEY="$admin"
cat >"$tmp/cli.yaml" <<YAML
apiVersion: gpusched.io/v1
kind: Deployment
metadata: {name: cli-demo}
spec:
  engine: {template: reference, args: ["--hidden", "8"]}
YAML
"$bin" apply -f "$tmp/cli.yaml" >"$tmp/cli.out" 2>&1 || fail "gpusched apply: $(cat "$tmp/cli.out")"
expect_contains "$tmp/cli.out" "deployment/cli-demo created"
wait_for /api/v1/deployments/cli-demo 20 'j["status"]["readyReplicas"] == 1' ||
  fail "cli-demo not ready: $(cat "$tmp/body")"
# The example manifests a newcomer applies.
"$bin" apply -f "$2/examples/manifests.yaml" >"$tmp/cli.out" 2>&1 ||
  fail "apply examples/manifests.yaml: $(cat "$tmp/cli.out")"
expect_contains "$tmp/cli.out" "tenant/team-a created"
expect_contains "$tmp/cli.out" "deployment/summarize created"
expect_contains "$tmp/cli.out" "deployment/translate created"
wait_for /api/v1/deployments/summarize 20 'j["status"]["readyReplicas"] == 1' ||
  fail "summarize not ready: $(cat "$tmp/body")"
"$bin" get deployments >"$tmp/cli.out" 2>&1 || fail "gpusched get: $(cat "$tmp/cli.out")"
expect_contains "$tmp/cli.out" "cli-demo"
"$bin" get replicas >"$tmp/cli.out" 2>&1 || fail "gpusched get replicas"
expect_contains "$tmp/cli.out" "cli-demo-0"
"$bin" get gpus >"$tmp/cli.out" 2>&1 || fail "gpusched get gpus"
expect_contains "$tmp/cli.out" "H100"
"$bin" describe deployment chat >"$tmp/cli.out" 2>&1 || fail "gpusched describe: $(cat "$tmp/cli.out")"
expect_contains "$tmp/cli.out" "chat-0"
"$bin" logs chat --tail 3 >"$tmp/cli.out" 2>&1 || fail "gpusched logs: $(cat "$tmp/cli.out")"
"$bin" events --deployment chat --limit 5 >"$tmp/cli.out" 2>&1 || fail "gpusched events"
expect_contains "$tmp/cli.out" "replica."
"$bin" apply -f "$tmp/bad.yaml" >"$tmp/cli.out" 2>&1
[ $? -eq 1 ] || fail "gpusched apply of an invalid manifest: expected exit 1"
expect_contains "$tmp/cli.out" "replicas"
"$bin" delete -f "$tmp/cli.yaml" >"$tmp/cli.out" 2>&1 || fail "gpusched delete -f: $(cat "$tmp/cli.out")"
expect_contains "$tmp/cli.out" "deployment/cli-demo deleted"
GPUSCHED_KEY=$demo "$bin" get gpus >"$tmp/cli.out" 2>&1
[ $? -eq 1 ] || fail "gpusched get gpus with a tenant key: expected exit 1"

kill -TERM "$pid"
wait "$pid"
rc=$?
[ "$rc" -eq 0 ] || fail "SIGTERM: exit status $rc"
# serve reaps its engines before it exits: none may be left (waited on
# for up to 5 s, so a slow machine cannot make this flake).
for _ in $(seq 1 100); do
  [ -z "$(pgrep -f "engine --port .* --hidden 18" || true)" ] && break
  sleep 0.05
done
for p in $(pgrep -f "engine --port .* --hidden 18" || true); do
  fail "engine $p still running after serve exited"
done
# HTTPS when the config names a certificate.
if command -v openssl >/dev/null 2>&1; then
  openssl req -x509 -newkey rsa:2048 -nodes -keyout "$tmp/key.pem" -out "$tmp/cert.pem" \
    -days 1 -subj /CN=127.0.0.1 >/dev/null 2>&1
  cat >"$tmp/tls.yaml" <<YAML
listen: 127.0.0.1:0
state: ":memory:"
log_dir: $tmp/tls-logs
tls: {cert: $tmp/cert.pem, key: $tmp/key.pem}
deployments:
  - name: chat
    engine: {template: reference, args: ["--hidden", "12"]}
tenants:
  - name: demo
YAML
  "$bin" serve --config "$tmp/tls.yaml" >"$tmp/tls.out" 2>"$tmp/tls.err" &
  tls_pid=$!
  for _ in $(seq 1 200); do grep -q "key: gs-" "$tmp/tls.out" && break; sleep 0.05; done
  tls_url=$(grep -o 'https://127.0.0.1:[0-9]*' "$tmp/tls.out" | head -1)
  tls_key=$(grep -o 'key: gs-[A-Za-z0-9_-]*' "$tmp/tls.out" | head -1 | cut -c6-)
  code=$(curl -s -k -o "$tmp/x" -w '%{http_code}' "$tls_url/v1/chat/completions" \
    -H "Authorization: Bearer $tls_key" -d '{"model":"chat","messages":[{"role":"user","content":"hi"}],"max_tokens":2}')
  [ "$code" = 200 ] || fail "HTTPS chat: $code $(cat "$tmp/x") $(cat "$tmp/tls.err")"
  kill -TERM "$tls_pid"
  wait "$tls_pid"
else
  echo "serve_control: TLS part skipped (no openssl binary)"
fi
finish serve_control
