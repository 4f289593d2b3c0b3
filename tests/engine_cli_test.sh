#!/usr/bin/env bash
# Integration test of `gpusched engine` (the real binary, a real process on
# 127.0.0.1 with port 0): OpenAI completions (plain and streamed), chat,
# embeddings, KServe v2, vLLM-named metrics, profile mode, bad flags, and a
# graceful exit on SIGTERM.
# Usage: engine_cli_test.sh GPUSCHED_BINARY SOURCE_DIR
set -u
bin="$1"
source "$(dirname "$0")/lib.sh"

# start_engine NAME ARGS...: starts an engine, sets $pid and $url.
start_engine() {
  local name=$1
  shift
  "$bin" engine --port 0 "$@" >"$tmp/$name.out" 2>"$tmp/$name.err" &
  pid=$!
  url=""
  for _ in $(seq 1 200); do
    url=$(grep -o 'http://127.0.0.1:[0-9]*' "$tmp/$name.out" 2>/dev/null || true)
    [ -n "$url" ] && return 0
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.05
  done
  fail "$name: engine did not start: $(cat "$tmp/$name.err")"
  return 1
}

post() {  # PATH JSON -> body on stdout
  curl -s -X POST -H 'Content-Type: application/json' -d "$2" "$url$1"
}

if start_engine cpu --model tiny --hidden 16; then
  post /v1/completions '{"model":"tiny","prompt":"hello there","max_tokens":4}' >"$tmp/c.json"
  python3 - "$tmp/c.json" <<'PY' || fail "completion response: $(cat "$tmp/c.json")"
import json, sys
r = json.load(open(sys.argv[1]))
assert r["object"] == "text_completion"
assert r["usage"]["completion_tokens"] == 4 and r["usage"]["prompt_tokens"] == 2
assert r["choices"][0]["finish_reason"] == "length"
PY
  post /v1/chat/completions '{"messages":[{"role":"user","content":"hi"}],"max_tokens":3,"stream":true}' >"$tmp/s.txt"
  expect_contains "$tmp/s.txt" "chat.completion.chunk"
  expect_contains "$tmp/s.txt" "data: [DONE]"
  post /v1/embeddings '{"input":"a b"}' >"$tmp/e.json"
  expect_contains "$tmp/e.json" '"object":"embedding"'
  post /v2/models/tiny/infer '{"inputs":[{"name":"text","datatype":"BYTES","shape":[1],"data":["a b"]}]}' >"$tmp/i.json"
  expect_contains "$tmp/i.json" '"datatype":"FP32"'
  curl -s "$url/metrics" >"$tmp/m.txt"
  expect_contains "$tmp/m.txt" 'vllm:num_requests_running{model_name="tiny"}'
  code=$(curl -s -o /dev/null -w '%{http_code}' -X POST -d '{oops' "$url/v1/completions")
  [ "$code" = 400 ] || fail "malformed JSON: expected 400, got $code"
  kill -TERM "$pid"
  wait "$pid"
  rc=$?
  [ "$rc" -eq 0 ] || fail "SIGTERM: exit status $rc"
fi

# Profile mode paces tokens like the profiled GPU.
if start_engine profile --model llama-2-7b --mode profile --gpu A100-80GB; then
  post /v1/completions '{"prompt":"a b c","max_tokens":2}' >"$tmp/p.json"
  expect_contains "$tmp/p.json" '"completion_tokens":2'
  kill -TERM "$pid"
  wait "$pid"
fi

# Bad flags name the problem.
"$bin" engine --port 0 --mode turbo >/dev/null 2>"$tmp/err"
[ $? -eq 2 ] || fail "bad --mode: expected exit 2"
expect_contains "$tmp/err" "--mode must be cpu or profile"
"$bin" engine --port 0 --mode profile --model gpt-9 >/dev/null 2>"$tmp/err"
[ $? -eq 2 ] || fail "unknown profile: expected exit 2"
expect_contains "$tmp/err" "gpt-9"

finish engine_cli
