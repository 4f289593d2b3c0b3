#!/usr/bin/env bash
# End-to-end test of live autoscaling in `gpusched serve` (the real binary,
# reference engines, 127.0.0.1, port 0): a deployment with minReplicas 0
# starts with no replica; concurrent load is held at zero replicas, then
# answered (a scale from zero, one replica for the burst), the count grows
# past 1 under load (target_ongoing_requests), and goes back to 0 once idle
# (idle_timeout), with no failed request. The decisions are events carrying
# their reason and signal values, and count in the metrics. A second
# deployment that can never be placed shows the hold bound (503 with
# Retry-After beyond maxHeld) and the hold deadline (503 with Retry-After
# after holdTimeoutS).
# Usage: autoscale_test.sh GPUSCHED_BINARY SOURCE_DIR
set -u
bin="$1"
source "$(dirname "$0")/lib.sh"

# Engine width 22: unlike the other tests' engines (they find their own by
# command line, and ctest runs tests at once). Profile mode (~30 ms per
# token) keeps requests in flight long enough to drive the count up.
{ serve_config_head; cat <<YAML; } >"$tmp/serve.yaml"
health_check_period_ms: 500
drain_grace_s: 5
deployments:
  - name: auto
    engine:
      template: reference
      args: ["--hidden", "22", "--mode", "profile", "--profile-model",
             "baichuan-7b", "--gpu", "A10-24GB"]
    resources: {fraction: {milli: 250, memory: 10Gi}}
    autoscaling:
      minReplicas: 0
      maxReplicas: 3
      targetOngoingRequests: 1
      lookBackPeriodS: 2
      upscaleDelayS: 1
      downscaleDelayS: 2
      idleTimeoutS: 3
  # Asks for a GPU model the inventory lacks: its replica never starts, so
  # its requests stay held.
  - name: stuck
    engine: {template: reference, args: ["--hidden", "22"]}
    resources: {fraction: {milli: 250, memory: 10Gi},
                gpuModels: [A100-SXM4-80GB]}
    autoscaling: {minReplicas: 0, maxReplicas: 1, maxHeld: 1,
                  holdTimeoutS: 15}
tenants:
  - name: demo
YAML

serve_until_ready "$tmp/serve.yaml"
served_or_finish autoscale
admin=$(cat "$tmp/keys/admin.key")
demo=$(cat "$tmp/keys/demo.key")

api() {  # method path [body] -> body on stdout, status in $tmp/code
  curl -s -o "$tmp/body" -w '%{http_code}' -X "$1" "$url$2" \
    -H "Authorization: Bearer $admin" --data-binary "${3:-}" >"$tmp/code"
  cat "$tmp/body"
}
status() {  # deployment python-expression over its status
  api GET "/api/v1/deployments/$1" | jq_py "j['status']$2" 2>/dev/null
}
wait_for() {  # deployment condition timeout-seconds; $tmp/body: its state
  wait_status "$@"
  local rc=$?
  api GET "/api/v1/deployments/$1" >/dev/null
  return $rc
}
chat() {  # deployment max_tokens -> the status code on stdout
  curl -s -o /dev/null -w '%{http_code}\n' -m 60 "$url/v1/chat/completions" \
    -H "Authorization: Bearer $demo" -H 'Content-Type: application/json' \
    -d "{\"model\":\"$1\",\"max_tokens\":$2,\"messages\":[{\"role\":\"user\",\"content\":\"scale me\"}]}"
}

# Starts at zero replicas.
[ "$(status auto "['replicas']")" = 0 ] && [ "$(status auto "['desiredReplicas']")" = 0 ] ||
  fail "auto should start with 0 replicas: $(api GET /api/v1/deployments/auto)"

# A manual scale of an autoscaled deployment is refused with the reason.
api POST /api/v1/deployments/auto/scale '{"replicas": 2}' >"$tmp/scale.json"
[ "$(cat "$tmp/code")" = 409 ] || fail "scale of an autoscaled deployment: $(cat "$tmp/code")"
expect_contains "$tmp/scale.json" "autoscaled"

# Load: 4 clients, each 12 requests in a row (~0.5 s each).
for c in 1 2 3 4; do
  (for _ in $(seq 1 12); do chat auto 16; done >"$tmp/codes.$c") &
  loaders="${loaders:-} $!"
done
# Held at zero, then exactly one replica for the burst, then more.
wait_for auto 's["desiredReplicas"] >= 1' 10 || fail "no scale from zero"
wait_for auto 's["readyReplicas"] >= 2' 30 ||
  fail "never more than one ready replica under load: $(cat "$tmp/body")"
for p in $loaders; do wait "$p"; done
total=$(cat "$tmp"/codes.* | wc -l)
ok=$(cat "$tmp"/codes.* | grep -c '^200$')
[ "$total" = 48 ] && [ "$ok" = 48 ] ||
  fail "expected 48 answered requests, got $ok of $total: $(sort "$tmp"/codes.* | uniq -c)"

# Idle: back to zero replicas (idle 3 s, then drained and stopped).
wait_for auto 's["replicas"] == 0 and s["desiredReplicas"] == 0' 30 ||
  fail "auto did not scale back to 0: $(cat "$tmp/body")"

# Every decision is an event with its reason and signal values.
api GET '/api/v1/events?deployment=auto&kind=deployment.autoscaled&limit=100' >"$tmp/events.json"
reasons=$(jq_py '" ".join(sorted(set(e["details"]["reason"] for e in j["items"])))' <"$tmp/events.json")
for r in held_requests target_ongoing_requests idle_timeout; do
  case " $reasons " in *" $r "*) ;; *) fail "no '$r' decision; reasons: $reasons" ;; esac
done
[ "$(jq_py 'all(set(e["details"]["signals"]) >= {"desired","in_flight","queued","ready","starting","ongoing_mean","idle_s","run_s"} and "from" in e["details"] and "to" in e["details"] for e in j["items"])' <"$tmp/events.json")" = True ] ||
  fail "decision events without from/to/signals: $(cat "$tmp/events.json")"
# The first decision starts one replica for the whole first burst (events
# come newest first).
[ "$(jq_py '(lambda e: e["from"] == 0 and e["to"] == 1 and e["reason"] == "held_requests" and e["signals"]["queued"] >= 1)(j["items"][-1]["details"])' <"$tmp/events.json")" = True ] ||
  fail "the first decision should be 0 -> 1 for held requests: $(cat "$tmp/events.json")"
api GET '/api/v1/events?deployment=auto&kind=replica.cold_start' >"$tmp/cold.json"
[ "$(jq_py 'len(j["items"]) >= 1 and all(e["details"]["total_ms"] > 0 and e["details"]["engine_ready_ms"] > 0 for e in j["items"])' <"$tmp/cold.json")" = True ] ||
  fail "no replica.cold_start event with its phases: $(cat "$tmp/cold.json")"

# Metrics: decisions counted, held requests and their hold time.
curl -s "$url/metrics" >"$tmp/metrics.txt"
grep -q '^gpusched_scale_decisions_total{deployment="auto",direction="up"} [1-9]' "$tmp/metrics.txt" ||
  fail "no up decisions counted: $(grep scale_decisions "$tmp/metrics.txt")"
grep -q '^gpusched_scale_decisions_total{deployment="auto",direction="down"} [1-9]' "$tmp/metrics.txt" ||
  fail "no down decisions counted: $(grep scale_decisions "$tmp/metrics.txt")"
grep -q '^gpusched_held_requests_total{deployment="auto"} [1-9]' "$tmp/metrics.txt" ||
  fail "no held requests counted: $(grep held_requests "$tmp/metrics.txt")"
grep -q '^gpusched_request_hold_seconds_count{deployment="auto"} [1-9]' "$tmp/metrics.txt" ||
  fail "no hold times: $(grep hold_seconds "$tmp/metrics.txt")"

# Hold bound and deadline: stuck holds one request (maxHeld 1); the next
# gets 503 with Retry-After at once, the held one 503 after holdTimeoutS.
# holdTimeoutS is 15 s, not 2: the second request must arrive while the
# first is still held, and on a loaded 2-core machine the poll and curl
# start-up between them took longer than 2 s (the held one had timed out,
# so the second was held too and answered queue_timeout, not hold_limit).
curl -s -D "$tmp/held.h" -o "$tmp/held.json" -w '%{http_code}' -m 30 \
  "$url/v1/chat/completions" -H "Authorization: Bearer $demo" \
  -H 'Content-Type: application/json' \
  -d '{"model":"stuck","max_tokens":1,"messages":[{"role":"user","content":"x"}]}' \
  >"$tmp/held.code" &
held=$!
wait_for stuck 's["queued"] == 1' 12 || fail "stuck holds no request: $(cat "$tmp/body")"
code=$(curl -s -D "$tmp/over.h" -o "$tmp/over.json" -w '%{http_code}' \
  "$url/v1/chat/completions" -H "Authorization: Bearer $demo" \
  -H 'Content-Type: application/json' \
  -d '{"model":"stuck","max_tokens":1,"messages":[{"role":"user","content":"x"}]}')
[ "$code" = 503 ] || fail "over the hold bound: expected 503, got $code $(cat "$tmp/over.json")"
grep -qi '^retry-after: [0-9]' "$tmp/over.h" || fail "no Retry-After: $(cat "$tmp/over.h")"
expect_contains "$tmp/over.json" "hold_limit"
expect_contains "$tmp/over.json" '"type":"overloaded_error"'
wait "$held"
[ "$(cat "$tmp/held.code")" = 503 ] || fail "held past holdTimeoutS: expected 503, got $(cat "$tmp/held.code")"
grep -qi '^retry-after: [0-9]' "$tmp/held.h" || fail "no Retry-After on the timed-out request"
expect_contains "$tmp/held.json" "queue_timeout"

kill -TERM "$pid" 2>/dev/null
wait "$pid" 2>/dev/null
finish autoscale
