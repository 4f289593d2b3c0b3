#!/usr/bin/env bash
# End-to-end test with the official OpenAI Node client (tests/e2e, pinned in
# its package-lock.json): `gpusched serve` runs two reference-engine
# deployments on 127.0.0.1 port 0, and tests/e2e/openai_client.mjs does chat
# (whole and streamed), legacy completions, embeddings, models.list, a wrong
# key (AuthenticationError) and an unknown model (NotFoundError) through the
# client, which rejects shapes it does not accept.
# openai stays at 6.x: 7.x needs Node >= 22 and Debian 12 ships 18 (6.49.0
# passes on Debian's 18.20.4 and on Node 20). Skipped only where node is
# absent; scripts/install-deps.sh installs node and runs `npm ci` in
# tests/e2e.
# Usage: openai_client_test.sh GPUSCHED_BINARY SOURCE_DIR
set -u
bin="$1"
e2e="$2/tests/e2e"
source "$(dirname "$0")/lib.sh"

need_node_package openai_client openai

# Sizes unlike serve_cli_test.sh's: it looks for its own engines by their
# command line, and ctest runs both at once.
cat >"$tmp/serve.yaml" <<YAML
listen: 127.0.0.1:0
state: $tmp/state.db
log_dir: $tmp/logs
deployments:
  - name: chat
    engine: {template: reference, args: ["--hidden", "20"]}
    replicas: 1
  - name: embed
    engine: {template: reference, args: ["--hidden", "24"]}
    replicas: 1
tenants:
  - name: demo
YAML
start_serve "$tmp/serve.yaml"
served_or_finish openai_client

node "$e2e/openai_client.mjs" "$url/v1" "$key" >"$tmp/node.out" 2>&1
rc=$?
cat "$tmp/node.out"
[ "$rc" -eq 0 ] || fail "the openai client checks failed (exit $rc)"

kill -TERM "$pid"
wait "$pid"
rc=$?
[ "$rc" -eq 0 ] || fail "SIGTERM: exit status $rc: $(cat "$tmp/err")"
finish openai_client
