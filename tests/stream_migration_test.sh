#!/usr/bin/env bash
# Streams that survive an engine crash (the real binary, reference engines
# in profile mode, 127.0.0.1, port 0): a streamed completion whose engine is
# killed with -9 mid-stream continues on the other replica. The client
# keeps one SSE stream with one id, gets every token it asked for and the
# final [DONE], and the platform records request.migrated and counts it.
# A stream that cannot continue (n = 2: several choices) ends at once with
# an error event in the OpenAI shape, not with a silent end or a hang.
# Usage: stream_migration_test.sh GPUSCHED_BINARY SOURCE_DIR
set -u
bin="$1"
source "$(dirname "$0")/lib.sh"

{ serve_config_head; cat <<YAML; } >"$tmp/serve.yaml"
health_check_period_ms: 500
deployments:
  - name: chat
    engine:
      template: reference
      # ~30 ms per token (baichuan-7b on an A10): a 150-token stream lasts
      # long enough to kill its engine in the middle.
      args: ["--hidden", "18", "--mode", "profile", "--profile-model",
             "baichuan-7b", "--gpu", "A10-24GB"]
    replicas: 2
    resources: {fraction: {milli: 250, memory: 10Gi}}
tenants:
  - name: demo
YAML

serve_until_ready "$tmp/serve.yaml"
served_or_finish stream_migration
admin=$(cat "$tmp/keys/admin.key")
demo=$(cat "$tmp/keys/demo.key")

# The engine (of this serve) that has a request running, by its metrics.
busy_engine() {
  for p in $(pgrep -P "$pid" || true); do
    port=$(tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null | grep -o -- '--port [0-9]*' | awk '{print $2}')
    [ -n "$port" ] || continue
    running=$(curl -s "http://127.0.0.1:$port/metrics" | awk '/^vllm:num_requests_running/ {print $2}')
    if [ -n "$running" ] && [ "$running" != 0 ]; then
      echo "$p"
      return
    fi
  done
}
# Starts a stream with body $1 into $2, waits until it has $3 data lines.
stream() {
  curl -sN -m 60 "$url/v1/${4:-completions}" -H "Authorization: Bearer $demo" \
    -H 'Content-Type: application/json' -d "$1" >"$2" &
  curl_pid=$!
  for _ in $(seq 1 400); do
    [ "$(grep -c '^data: ' "$2" 2>/dev/null)" -ge "$3" ] && return 0
    sleep 0.025
  done
  return 1
}

# 1. Migrated: 150 tokens asked, the engine killed after about 10.
stream '{"model":"chat","prompt":"tell me","max_tokens":150,"stream":true}' \
  "$tmp/s1" 10 || fail "the stream did not start: $(cat "$tmp/s1")"
victim=$(busy_engine)
[ -n "$victim" ] || fail "no engine has the request running"
[ -n "$victim" ] && kill -9 "$victim"
wait "$curl_pid"
rc=$?
[ "$rc" = 0 ] || fail "curl exited $rc (the stream should end normally)"
python3 - "$tmp/s1" >"$tmp/s1.check" <<'PY'
import json, sys
ids, tokens, done, errors, finish = set(), 0, False, [], None
for line in open(sys.argv[1]):
    line = line.strip()
    if line == "data: [DONE]":
        done = True
    elif line.startswith("data: "):
        j = json.loads(line[6:])
        if "error" in j:
            errors.append(j)
            continue
        ids.add(j.get("id"))
        for c in j.get("choices", []):
            if c.get("text"):
                tokens += 1
            finish = c.get("finish_reason") or finish
print(json.dumps({"ids": sorted(ids), "tokens": tokens, "done": done,
                  "errors": errors, "finish": finish}))
PY
check=$(cat "$tmp/s1.check")
echo "migrated stream: $check"
[ "$(jq_py 'len(j["ids"]) == 1' <<<"$check")" = True ] ||
  fail "one stream should keep one id: $check"
[ "$(jq_py 'j["done"] and not j["errors"] and j["finish"] == "length"' <<<"$check")" = True ] ||
  fail "the migrated stream should end with finish_reason length and [DONE]: $check"
# Every token asked for, give or take the one in flight when it died.
[ "$(jq_py '148 <= j["tokens"] <= 150' <<<"$check")" = True ] ||
  fail "the client should get the 150 tokens it asked for: $check"
curl -s "$url/api/v1/events?kind=request.migrated" -H "Authorization: Bearer $admin" >"$tmp/ev1"
[ "$(jq_py 'len([e for e in j["items"] if e["kind"] == "request.migrated" and e["deployment"] == "chat"]) == 1' <"$tmp/ev1")" = True ] ||
  fail "expected one request.migrated event: $(cat "$tmp/ev1")"
curl -s "$url/metrics" | grep -q 'gpusched_stream_migrations_total{deployment="chat",outcome="migrated"} 1' ||
  fail "the migration should be counted: $(curl -s "$url/metrics" | grep migrations)"

# 2. Cannot continue (two choices): an error event ends the stream at once.
for _ in $(seq 1 200); do  # both replicas ready again
  [ "$(curl -s "$url/api/v1/deployments/chat" -H "Authorization: Bearer $admin" |
    jq_py 'j["status"]["readyReplicas"] == 2' 2>/dev/null)" = True ] && break
  sleep 0.05
done
stream '{"model":"chat","prompt":"tell me","max_tokens":150,"n":2,"stream":true}' \
  "$tmp/s2" 6 || fail "the n=2 stream did not start: $(cat "$tmp/s2")"
victim=$(busy_engine)
[ -n "$victim" ] && kill -9 "$victim"
start=$(date +%s%N)
wait "$curl_pid"
ended_ms=$((($(date +%s%N) - start) / 1000000))
[ "$ended_ms" -lt 10000 ] || fail "the broken stream should end at once, took $ended_ms ms"
last=$(grep '^data: ' "$tmp/s2" | tail -1)
[ "$(jq_py 'j["error"]["type"] == "server_error" and j["error"]["code"] == "replica_failed" and "n > 1" in j["error"]["message"]' <<<"${last#data: }")" = True ] ||
  fail "the stream should end with an OpenAI error event: $last"
grep -q '^data: \[DONE\]' "$tmp/s2" && fail "a failed stream must not claim [DONE]"
curl -s "$url/metrics" | grep -q 'gpusched_stream_migrations_total{deployment="chat",outcome="failed"} 1' ||
  fail "the failed stream should be counted: $(curl -s "$url/metrics" | grep migrations)"
curl -s "$url/api/v1/events?kind=request.stream_failed" -H "Authorization: Bearer $admin" >"$tmp/ev2"
[ "$(jq_py 'any(e["kind"] == "request.stream_failed" for e in j["items"])' <"$tmp/ev2")" = True ] ||
  fail "expected a request.stream_failed event: $(cat "$tmp/ev2")"

kill -TERM "$pid"
wait "$pid"
finish stream_migration
