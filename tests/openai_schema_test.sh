#!/usr/bin/env bash
# OpenAI's wire format, checked against OpenAI's own OpenAPI schemas: every
# OpenAI-shaped body `gpusched serve` sends (models, chat and completions
# whole and each streamed chunk, embeddings, and the error bodies) is
# validated by tests/e2e/openai_schema.mjs with Ajv against
# testdata/openai-openapi/schemas.json (the schemas of
# github.com/openai/openai-openapi's openapi.yaml, MIT; its README says
# which). Reference engines on 127.0.0.1 port 0. Skipped only where node is
# absent; scripts/install-deps.sh installs node and runs `npm ci` in
# tests/e2e.
# Usage: openai_schema_test.sh GPUSCHED_BINARY SOURCE_DIR
set -u
bin="$1"
src="$2"
e2e="$src/tests/e2e"
source "$(dirname "$0")/lib.sh"

need_node_package openai_schema ajv

# Sizes unlike the other serve tests': some look for their own engines by
# their command line, and ctest runs them at once.
cat >"$tmp/serve.yaml" <<YAML
listen: 127.0.0.1:0
state: $tmp/state.db
log_dir: $tmp/logs
key_dir: $tmp/keys
deployments:
  - name: chat
    engine: {template: reference, args: ["--hidden", "22"]}
    replicas: 1
  - name: embed
    engine: {template: reference, args: ["--hidden", "26"]}
    replicas: 1
tenants:
  - name: demo
  - name: limited
    limits: {requestsPerMinute: 1}
YAML
start_serve "$tmp/serve.yaml"
served_or_finish openai_schema
admin=$(cat "$tmp/keys/admin.key")
limited=$(curl -s -X POST "$url/api/v1/tenants/limited/keys" \
  -H "Authorization: Bearer $admin" | jq_py 'j["secret"]')

node "$e2e/openai_schema.mjs" "$url" "$key" "$admin" "$limited" \
  "$src/testdata/openai-openapi/schemas.json" >"$tmp/node.out" 2>&1
rc=$?
cat "$tmp/node.out"
[ "$rc" -eq 0 ] || fail "the OpenAPI schema checks failed (exit $rc)"

kill -TERM "$pid"
wait "$pid"
rc=$?
[ "$rc" -eq 0 ] || fail "SIGTERM: exit status $rc: $(cat "$tmp/err")"
finish openai_schema
