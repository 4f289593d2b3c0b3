#!/usr/bin/env bash
# Integration test of `gpusched serve` (the real binary): it launches two
# reference engines, serves the gateway on 127.0.0.1 port 0, answers a
# tenant's chat and streamed completion, refuses a wrong key, rejects a bad
# config with its line, and on SIGTERM drains and stops its engines.
# Usage: serve_cli_test.sh GPUSCHED_BINARY SOURCE_DIR
set -u
bin="$1"
source "$(dirname "$0")/lib.sh"

cat >"$tmp/serve.yaml" <<YAML
listen: 127.0.0.1:0
state: $tmp/state.db
log_dir: $tmp/logs
deployments:
  - name: chat
    engine: {template: reference, args: ["--hidden", "16"]}
    replicas: 2
tenants:
  - name: demo
YAML
start_serve "$tmp/serve.yaml"
served_or_finish serve_cli
curl -s "$url/v1/chat/completions" -H "Authorization: Bearer $key" \
  -H 'Content-Type: application/json' \
  -d '{"model":"chat","messages":[{"role":"user","content":"hello"}],"max_tokens":3}' >"$tmp/chat.json"
expect_contains "$tmp/chat.json" '"completion_tokens":3'
curl -s "$url/v1/completions" -H "Authorization: Bearer $key" \
  -d '{"model":"chat","prompt":"hi","max_tokens":2,"stream":true}' >"$tmp/stream.txt"
expect_contains "$tmp/stream.txt" "data: [DONE]"
code=$(curl -s -o /dev/null -w '%{http_code}' "$url/v1/models" -H "Authorization: Bearer gs-nope")
[ "$code" = 401 ] || fail "wrong key: expected 401, got $code"
[ -s "$tmp/logs/chat-0.out" ] || fail "engine log chat-0.out missing"
kill -TERM "$pid"
wait "$pid"
rc=$?
[ "$rc" -eq 0 ] || fail "SIGTERM: exit status $rc: $(cat "$tmp/err")"
if pgrep -f "engine --port .* --model chat --hidden 16" >/dev/null; then
  fail "engines still running after serve exited"
fi

# A bad config is refused with its line.
printf 'deployments:\n  - name: x\n    replicas: 0\ntenants: [{name: t}]\n' >"$tmp/bad.yaml"
"$bin" serve --config "$tmp/bad.yaml" >/dev/null 2>"$tmp/err"
[ $? -eq 2 ] || fail "bad config: expected exit 2"
expect_contains "$tmp/err" "bad.yaml:3: deployments[0].replicas: needs replicas >= 1 or endpoints"

finish serve_cli
