#!/usr/bin/env bash
# The control CLI as a new user meets it, against `gpusched serve` (real
# binary, reference engines, 127.0.0.1 port 0):
# - every command's --help exits 0 and says what the command takes;
# - every kind `apply` takes (Deployment, Tenant, ModelRoute) can be got,
#   described and deleted by each of its names (plural, singular, alias),
#   and every `get` kind lists;
# - the server refuses an unknown query parameter (400 naming it);
# - serve creates its state file's folder;
# - --reason is kept on every rollout action (event and status), a manual
#   step says it waits for `rollout promote`, a 409 on a finished rollout
#   points to `retry`, a parked stable shows "parked by route X", AGE of
#   routes is shown;
# - validation output: the file's name and line, each problem once, and a
#   line for a missing deployment;
# - messages: no server (error: and a hint), no key (--key and
#   GPUSCHED_KEY), an unreadable file (the OS reason), a misspelt flag (the
#   near one), --limit 0 / --tail 0 (the range);
# - one source of truth: a tenant changed through the API survives a
#   restart; --reapply-config puts the config's back.
# Usage: cli_kinds_test.sh GPUSCHED_BINARY SOURCE_DIR
set -u
bin="$1"
source "$(dirname "$0")/lib.sh"

# A state file in a folder that does not exist yet.
cat >"$tmp/serve.yaml" <<YAML
listen: 127.0.0.1:0
state: $tmp/fresh/nested/state.db
log_dir: $tmp/logs
key_dir: $tmp/keys
deployments:
  - name: chat
    engine: {template: reference, args: ["--hidden", "14"]}
    replicas: 1
tenants:
  - name: demo
    models: [chat]
YAML

cli() {  # args... -> stdout+stderr in $tmp/cli, status in $rc
  "$bin" "$@" >"$tmp/cli" 2>&1
  rc=$?
}
expect_rc() {  # status what
  [ "$rc" -eq "$1" ] || fail "$2: exit $rc, expected $1: $(cat "$tmp/cli")"
}
cli_ok() { cli "$@"; expect_rc 0 "gpusched $*"; }

# --- Help: every command's, without a server. ---
"$bin" --help >"$tmp/help" 2>&1 || fail "gpusched --help: exit $?"
commands=$(awk '/^Subcommands:/{on=1; next} on && /^  [a-z]/{print $1}' "$tmp/help")
[ "$(echo "$commands" | wc -w)" -ge 10 ] || fail "too few commands in --help: $(cat "$tmp/help")"
for c in $commands; do
  cli "$c" --help
  expect_rc 0 "gpusched $c --help"
  grep -q "^Usage: .*$c" "$tmp/cli" || fail "gpusched $c --help has no usage line: $(cat "$tmp/cli")"
done
cli apply --help
expect_contains "$tmp/cli" "ModelRoute"
for c in describe delete; do
  cli "$c" --help
  expect_contains "$tmp/cli" "deployment, tenant or route"
done
cli rollout --help
for action in "promote (the next step now" "pause (hold the weights" "retry (start a" "--reason"; do
  expect_contains "$tmp/cli" "$action"
done
cli serve --help
expect_contains "$tmp/cli" "--reapply-config"

# --- Messages without a server. ---
export GPUSCHED_SERVER="http://127.0.0.1:1"
cli get deployments
expect_rc 2 "no server"
expect_contains "$tmp/cli" "error: cannot reach gpusched at http://127.0.0.1:1"
expect_contains "$tmp/cli" "hint: start it (\`gpusched serve --config FILE\`), or point --server"
cli apply -f "$tmp/nosuch.yaml"
expect_rc 2 "unreadable file"
expect_contains "$tmp/cli" "error: cannot read $tmp/nosuch.yaml: No such file or directory"
cli events --limt 5
expect_rc 2 "misspelt flag"
expect_contains "$tmp/cli" "did you mean --limit?"
cli events --limit 0
expect_rc 2 "--limit 0"
expect_contains "$tmp/cli" "not in range 1 to 1000"
cli logs chat --tail 0
expect_rc 2 "--tail 0"
expect_contains "$tmp/cli" "not in range 1 to 10000"

# --- The server. ---
serve_until_ready "$tmp/serve.yaml"
served_or_finish cli_kinds
[ -f "$tmp/fresh/nested/state.db" ] || fail "serve did not create the state file's folder"
export GPUSCHED_SERVER="$url"
admin=$(cat "$tmp/keys/admin.key")

cli get deployments
expect_rc 1 "no key"
expect_contains "$tmp/cli" "--key"
expect_contains "$tmp/cli" "GPUSCHED_KEY"
export GPUSCHED_KEY="$admin"

code=$(curl -s -o "$tmp/body" -w '%{http_code}' -H "Authorization: Bearer $admin" \
  "$url/api/v1/events?route=assistant")
[ "$code" = 400 ] || fail "unknown query parameter: $code $(cat "$tmp/body")"
expect_contains "$tmp/body" "unknown query parameter 'route'"
code=$(curl -s -o "$tmp/body" -w '%{http_code}' -H "Authorization: Bearer $admin" \
  "$url/api/v1/deployments?name=chat")
[ "$code" = 400 ] || fail "a query on a route that takes none: $code $(cat "$tmp/body")"


# Validation: locations in the file's name, each problem once, a line for
# the missing deployment.
cat >"$tmp/m.yaml" <<YAML
apiVersion: gpusched.io/v1
kind: ModelRoute
metadata: {name: lost}
spec:
  targets:
    - {deployment: nowhere}
YAML
{ cat <<YAML; cat "$tmp/m.yaml"; } >"$tmp/w.yaml"
apiVersion: gpusched.io/v1
kind: Deployment
metadata: {name: bad}
spec:
  engine: {template: reference}
  replicas: two
---
YAML
cli apply -f "$tmp/w.yaml"
expect_rc 1 "invalid manifest"
expect_contains "$tmp/cli" "$tmp/w.yaml:6"
grep -q "request body" "$tmp/cli" && fail "validation names the request body: $(cat "$tmp/cli")"
[ "$(sort "$tmp/cli" | uniq -d | wc -l)" -eq 0 ] || fail "a problem printed twice: $(cat "$tmp/cli")"
cli apply -f "$tmp/m.yaml"
expect_rc 1 "missing deployment"
expect_contains "$tmp/cli" "error: $tmp/m.yaml:1: ModelRoute/lost: spec.targets[0].deployment: unknown deployment 'nowhere'"
[ "$(wc -l <"$tmp/cli")" -eq 1 ] || fail "one problem, one line: $(cat "$tmp/cli")"

# Objects of every kind apply takes: a canary route whose first step is
# manual.
cat >"$tmp/objects.yaml" <<YAML
apiVersion: gpusched.io/v1
kind: Deployment
metadata: {name: chat-v2}
spec:
  engine: {template: reference, args: ["--hidden", "14"]}
---
apiVersion: gpusched.io/v1
kind: Tenant
metadata: {name: team}
spec:
  models: [assistant]
---
apiVersion: gpusched.io/v1
kind: ModelRoute
metadata: {name: assistant}
spec:
  targets:
    - {deployment: chat, version: "1"}
    - {deployment: chat-v2, version: "2"}
  rollout:
    canary: chat-v2
    steps: [{weight: 10, manual: true}, {weight: 50, pauseS: 3600}]
YAML
cli_ok apply -f "$tmp/objects.yaml"
expect_contains "$tmp/cli" "modelroute/assistant created"

for k in deployments deployment deploy Deployment tenants tenant routes route modelroute modelroutes ModelRoute; do
  cli_ok get "$k"
done
for k in replicas gpus nodes queues events instances; do
  cli get "$k"
  [ "$rc" -eq 0 ] || fail "gpusched get $k: exit $rc: $(cat "$tmp/cli")"
done
cli_ok get routes
awk 'NR == 2 {exit ($NF == "-")}' "$tmp/cli" || fail "get routes: AGE is '-': $(cat "$tmp/cli")"
for pair in "deployment chat-v2" "deploy chat-v2" "tenant team" "tenants team" "route assistant" "modelroute assistant" "ModelRoutes assistant"; do
  # shellcheck disable=SC2086
  cli_ok describe $pair
  grep -q "Events:" "$tmp/cli" || fail "describe $pair shows no events: $(cat "$tmp/cli")"
done
cli_ok describe route assistant
expect_contains "$tmp/cli" "Route:     assistant"
expect_contains "$tmp/cli" "Canary:    chat-v2 (stable chat)"
expect_contains "$tmp/cli" "route assistant created"
grep -q "server.started" "$tmp/cli" && fail "describe route shows the cluster's events: $(cat "$tmp/cli")"
cli describe pod x
expect_rc 2 "describe of an unknown kind"
expect_contains "$tmp/cli" "want deployment, tenant or route"

# Rollout: the manual step, --reason on every action, 409 -> retry.
cli_ok rollout status assistant
expect_contains "$tmp/cli" "waits for \`gpusched rollout promote assistant\`"
for action in pause resume promote abort; do
  cli_ok rollout "$action" assistant --reason "why-$action"
  expect_contains "$tmp/cli" "Reason:    why-$action"
done
cli rollout promote assistant
expect_rc 1 "promote after abort"
expect_contains "$tmp/cli" "gpusched rollout retry assistant"
for action in retry promote-full; do
  cli_ok rollout "$action" assistant --reason "why-$action"
  expect_contains "$tmp/cli" "Reason:    why-$action"
done
cli_ok events --kind rollout.paused --kind rollout.resumed --kind rollout.step --kind rollout.aborted --kind rollout.promoted
for action in pause resume promote abort retry promote-full; do
  expect_contains "$tmp/cli" "why-$action"
done
cli rollout promote assistant
expect_rc 1 "promote after promotion"

# The promoted canary parks its stable (scaleDownStable, the default).
parked=""
for _ in $(seq 1 200); do
  cli get deployments
  if grep -q "parked by route assistant" "$tmp/cli"; then parked=yes; break; fi
  sleep 0.05
done
[ -n "$parked" ] || fail "get deployments does not show the parked stable: $(cat "$tmp/cli")"
cli_ok describe deployment chat
expect_contains "$tmp/cli" "0 desired (parked by route assistant"

# Delete every kind by a name of its kind.
cli_ok delete modelroute assistant
expect_contains "$tmp/cli" "route/assistant deleted"
cli_ok delete tenants team
cli_ok delete deploy chat-v2
cli get route assistant
expect_rc 1 "a deleted route"

# One source of truth: the API's change survives a restart; the config's
# comes back with --reapply-config.
cat >"$tmp/demo.yaml" <<YAML
apiVersion: gpusched.io/v1
kind: Tenant
metadata: {name: demo}
spec:
  models: [chat, assistant]
YAML
cli_ok apply -f "$tmp/demo.yaml"
kill -TERM "$pid"
wait "$pid"
serve_until_ready "$tmp/serve.yaml"
served_or_finish cli_kinds
export GPUSCHED_SERVER="$url"
cli_ok get tenant demo
expect_contains "$tmp/cli" "chat,assistant"
# Counts in the singular where they are 1.
cli_ok events --kind server.started --limit 1
expect_contains "$tmp/cli" "1 deployment, 1 tenant and 0 routes stored; "
grep -qE "[^0-9]1 (nodes|deployments|tenants|routes)" "$tmp/cli" &&
  fail "a plural after 1: $(cat "$tmp/cli")"
kill -TERM "$pid"
wait "$pid"
serve_until_ready "$tmp/serve.yaml" --reapply-config
served_or_finish cli_kinds
export GPUSCHED_SERVER="$url"
cli_ok get tenant demo
grep -q "assistant" "$tmp/cli" && fail "--reapply-config kept the API's tenant: $(cat "$tmp/cli")"

kill -TERM "$pid"
wait "$pid"
rc=$?
[ "$rc" -eq 0 ] || fail "SIGTERM: exit status $rc: $(cat "$tmp/err")"
finish cli_kinds
