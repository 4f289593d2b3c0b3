#!/usr/bin/env bash
# Model versions end to end (the real binary, reference engines in profile
# mode, 127.0.0.1, port 0; docs/versions.md): a ModelRoute splits a public
# name over two versions by weight (a binomial test), keeps a session on one
# version, rolls a slower canary back automatically within its analysis
# window while no request fails (also against a baseline of the stable's
# version, which is parked afterwards), promotes a healthy canary to 100% and
# drains the old version, keeps its state over a restart, and refuses bad
# routes with a 422 naming the field.
# Usage: versions_live_test.sh GPUSCHED_BINARY SOURCE_DIR
set -u
bin="$1"
source "$(dirname "$0")/lib.sh"
test_name=versions_live

# Engine width 30: unlike the other tests' engines. Stable and good canary:
# baichuan-7b on an H800; the slow canary: the same model on an A10 (~4x
# the decode time per token).
fast='{template: reference, args: ["--hidden", "30", "--mode", "profile", "--profile-model", "baichuan-7b", "--gpu", "H800"]}'
slow='{template: reference, args: ["--hidden", "30", "--mode", "profile", "--profile-model", "baichuan-7b", "--gpu", "A10-24GB"]}'
{ serve_config_head; cat <<YAML; } >"$tmp/serve.yaml"
health_check_period_ms: 500
drain_grace_s: 5
deployments:
  - name: chat-v1
    engine: $fast
    resources: {fraction: {milli: 250, memory: 10Gi}}
  - name: chat-v2
    engine: $fast
    resources: {fraction: {milli: 250, memory: 10Gi}}
  - name: chat-slow
    engine: $slow
    resources: {fraction: {milli: 250, memory: 10Gi}}
  - name: chat-base
    engine: $fast
    resources: {fraction: {milli: 250, memory: 10Gi}}
tenants:
  - name: demo
YAML

serve_live "$tmp/serve.yaml"

# POST /api/v1/apply with manifest $1: the body on stdout, the status in
# $tmp/code.
apply() {
  curl -s -m 10 -o "$tmp/body" -w '%{http_code}' -X POST "$url/api/v1/apply" \
    -H "Authorization: Bearer $admin" --data-binary "$1" >"$tmp/code"
  cat "$tmp/body"
}
route() {  # targets-yaml [rollout-yaml] -> a ModelRoute manifest
  printf 'apiVersion: gpusched.io/v1\nkind: ModelRoute\nmetadata: {name: assistant}\nspec:\n%s\n%s\n' "$1" "${2:-}"
}
# Load: python3 load.py OUT N CONCURRENCY [SESSIONS]: N chat requests for
# "assistant" (16 tokens), each line of OUT "code model session".
cat >"$tmp/load.py" <<'PY'
import json, sys, threading, urllib.request, urllib.error
out, n, conc = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
sessions = int(sys.argv[4]) if len(sys.argv) > 4 else 0
url, key = sys.argv[5], sys.argv[6]
lock, lines, next_i = threading.Lock(), [], [0]
def worker():
    while True:
        with lock:
            i = next_i[0]; next_i[0] += 1
        if i >= n: return
        s = f"s{i % sessions}" if sessions else ""
        body = json.dumps({"model": "assistant", "max_tokens": 16,
                           "messages": [{"role": "user", "content": "hi"}]})
        req = urllib.request.Request(url + "/v1/chat/completions", body.encode(),
            {"Authorization": "Bearer " + key, "Content-Type": "application/json"})
        if s: req.add_header("X-Gpusched-Session", s)
        try:
            with urllib.request.urlopen(req, timeout=60) as r:
                code, model = r.status, json.load(r).get("model", "?")
        except urllib.error.HTTPError as e:
            code, model = e.code, "-"
        except Exception as e:
            code, model = 0, type(e).__name__
        with lock:
            lines.append(f"{code} {model} {s or '-'}")
ts = [threading.Thread(target=worker) for _ in range(conc)]
for t in ts: t.start()
for t in ts: t.join()
open(out, "w").write("\n".join(lines) + "\n")
PY
load() { python3 "$tmp/load.py" "$1" "$2" "$3" "${4:-0}" "$url" "$demo"; }
count() { awk -v m="$2" '$2 == m' "$1" | wc -l; }  # file model
not_ok() { awk '$1 != 200' "$1" | wc -l; }

# 1. Bad routes: each a 422 naming the field; nothing is applied.
apply "$(route '  targets: [{deployment: chat-v1, weight: 60}, {deployment: chat-v2, weight: 30}]')" >/dev/null
[ "$(cat "$tmp/code")" = 422 ] || fail "weights adding to 90: $(cat "$tmp/code")"
expect_contains "$tmp/body" "spec.targets: the weights must add up to 100, got 90"
apply "$(route '  targets: [{deployment: chat-v9}]')" >/dev/null
[ "$(cat "$tmp/code")" = 422 ] || fail "unknown target: $(cat "$tmp/code")"
expect_contains "$tmp/body" "spec.targets[0].deployment: unknown deployment 'chat-v9'"
apply "$(route '  targets: [{deployment: chat-v1}]' '  rollout: {canary: chat-v1}')" >/dev/null
[ "$(cat "$tmp/code")" = 422 ] || fail "rollout without a stable: $(cat "$tmp/code")"
expect_contains "$tmp/body" "no stable version"
apply "$(route '  targets: [{deployment: chat-v1}]')" >/dev/null
[ "$(cat "$tmp/code")" = 200 ] || fail "a one-target route: $(cat "$tmp/code") $(cat "$tmp/body")"
apply "$(route '  targets: [{deployment: chat-v1}]
  shadow: {deployment: chat-v8, percent: 10}')" >/dev/null
[ "$(cat "$tmp/code")" = 422 ] || fail "an unknown shadow: $(cat "$tmp/code")"
expect_contains "$tmp/body" "spec.shadow.deployment: unknown deployment 'chat-v8'"
printf 'apiVersion: gpusched.io/v1\nkind: ModelRoute\nmetadata: {name: loop}\nspec:\n  targets: [{deployment: assistant}]\n' >"$tmp/loop.yaml"
apply "$(cat "$tmp/loop.yaml")" >/dev/null
[ "$(cat "$tmp/code")" = 422 ] || fail "a route to a route: $(cat "$tmp/code")"
expect_contains "$tmp/body" "'assistant' is a ModelRoute; routes target deployments only"

# 2. Weights: 30% of 300 requests to v2. The split gives a lighter target
# exact shares (serving::WeightedSplit::Next): at most 90, and fewer by at
# most 2.
apply "$(route '  targets: [{deployment: chat-v1, version: "1", weight: 70}, {deployment: chat-v2, version: "2", weight: 30}]')" >/dev/null
[ "$(cat "$tmp/code")" = 200 ] || fail "the 70/30 route: $(cat "$tmp/body")"
load "$tmp/split" 300 6
v2=$(count "$tmp/split" chat-v2)
[ "$(not_ok "$tmp/split")" = 0 ] || fail "requests failed: $(awk '$1 != 200' "$tmp/split" | sort | uniq -c)"
{ [ "$v2" -ge 88 ] && [ "$v2" -le 90 ]; } || fail "v2 got $v2 of 300 requests at 30% (want 88..90)"
echo "weights: chat-v2 got $v2 of 300 at 30%"
curl -s "$url/v1/models" -H "Authorization: Bearer $demo" >"$tmp/models"
expect_contains "$tmp/models" '"id":"assistant"'
grep -q '"id":"chat-v1"' "$tmp/models" && fail "/v1/models lists a version: $(cat "$tmp/models")"
curl -s "$url/metrics" >"$tmp/metrics"
expect_contains "$tmp/metrics" 'gpusched_route_weight{route="assistant",version="2"} 30'
expect_contains "$tmp/metrics" 'gpusched_route_requests_total{route="assistant",version="2"}'

# Shadow copies: every request also goes to chat-slow; clients get only
# v1's and v2's answers, and the copies show in chat-slow's stats.
apply "$(route '  targets: [{deployment: chat-v1, version: "1", weight: 70}, {deployment: chat-v2, version: "2", weight: 30}]
  shadow: {deployment: chat-slow, percent: 100}')" >/dev/null
[ "$(cat "$tmp/code")" = 200 ] || fail "the shadow route: $(cat "$tmp/body")"
load "$tmp/shadow" 20 2
[ "$(count "$tmp/shadow" chat-slow)" = 0 ] || fail "a client got the shadow's answer"
[ "$(not_ok "$tmp/shadow")" = 0 ] || fail "shadowed requests failed"
for _ in $(seq 1 50); do
  done_slow=$(api GET /api/v1/stats | jq_py "[d['completed'] for d in j['deployments'] if d['deployment'] == 'chat-slow'] or [0]" | tr -d '[]')
  [ "${done_slow:-0}" -ge 20 ] && break
  sleep 0.2
done
[ "${done_slow:-0}" -ge 20 ] || fail "chat-slow completed ${done_slow:-0} shadow copies of 20"

# 3. Stickiness: 20 sessions x 6 requests, each session on one version.
apply "$(route '  sticky: session
  targets: [{deployment: chat-v1, version: "1", weight: 50}, {deployment: chat-v2, version: "2", weight: 50}]')" >/dev/null
load "$tmp/sticky" 120 6 20
split=$(awk '{print $3, $2}' "$tmp/sticky" | sort -u | awk '{print $1}' | uniq -d | wc -l)
[ "$split" = 0 ] || fail "$split sessions saw both versions"
[ "$(not_ok "$tmp/sticky")" = 0 ] || fail "sticky requests failed"

# 4. A slower canary is rolled back within its analysis window; no request
# fails. Load runs throughout.
apply "$(route '  targets: [{deployment: chat-v1}, {deployment: chat-slow}]' '  rollout:
    canary: chat-slow
    steps: [{weight: 30, pauseS: 120}]
    analysis: {windowS: 30, minRequests: 10, maxTtftRatio: 0, maxE2eRatio: 2.5}')" >/dev/null
[ "$(cat "$tmp/code")" = 200 ] || fail "the slow rollout: $(cat "$tmp/body")"
load "$tmp/bad" 240 4 &
load_pid=$!
wait_event rollout.rolled_back 90 || fail "the slow canary was not rolled back in 90 s"
wait "$load_pid"
[ "$(not_ok "$tmp/bad")" = 0 ] || fail "requests failed during the bad canary: $(awk '$1 != 200' "$tmp/bad" | sort | uniq -c)"
api GET "/api/v1/routes/assistant" >"$tmp/r"
[ "$(jq_py "j['rollout']['phase']" <"$tmp/r")" = rolled_back ] || fail "phase: $(cat "$tmp/r")"
[ "$(jq_py "[t['weight'] for t in j['targets']]" <"$tmp/r")" = "[100, 0]" ] || fail "weights after rollback: $(cat "$tmp/r")"
api GET "/api/v1/events?kind=rollout.rolled_back&limit=1" >"$tmp/ev"
api GET "/api/v1/events?kind=rollout.started&limit=1" >"$tmp/ev0"
expect_contains "$tmp/ev" "end-to-end"
# The figures docs/versions.md quotes.
python3 - "$tmp/bad" "$tmp/ev" "$tmp/ev0" <<'PY'
import datetime, json, sys
lines = [l.split() for l in open(sys.argv[1]) if l.strip()]
e = json.load(open(sys.argv[2]))["items"][0]
s = json.load(open(sys.argv[3]))["items"][0]
t = lambda x: datetime.datetime.fromisoformat(x["time"].replace("Z", "+00:00"))
a = e["details"]["analysis"]
print(f"rollback: {(t(e) - t(s)).total_seconds():.1f} s after the rollout started; canary p95 "
      f"e2e {a['canary']['e2eSeconds']*1000:.0f} ms vs stable "
      f"{a['stable']['e2eSeconds']*1000:.0f} ms over {a['canary']['requests']} canary requests; "
      f"{sum(1 for l in lines if l[1] == 'chat-slow')} of {len(lines)} load requests reached the canary")
PY
"$bin" rollout status assistant --server "$url" --key "$admin" >"$tmp/status" 2>&1
expect_contains "$tmp/status" "Phase:     rolled_back"

# 4b. The same slow canary against a baseline (spec.rollout.baseline: the
# stable's version, given the canary's share): the baseline and the canary
# get 30% each, the analysis compares the two, the rollback names the
# baseline, and the baseline is parked once the rollout has ended.
apply "$(route '  targets: [{deployment: chat-v1}, {deployment: chat-slow}, {deployment: chat-base}]' '  rollout:
    canary: chat-slow
    baseline: chat-base
    steps: [{weight: 30, pauseS: 120}]
    analysis: {windowS: 30, minRequests: 10, maxTtftRatio: 0, maxE2eRatio: 2.5}')" >/dev/null
[ "$(cat "$tmp/code")" = 200 ] || fail "the rollout with a baseline: $(cat "$tmp/body")"
api GET "/api/v1/routes/assistant" >"$tmp/r"
[ "$(jq_py "[t['weight'] for t in j['targets']]" <"$tmp/r")" = "[40, 30, 30]" ] ||
  fail "weights with a baseline: $(cat "$tmp/r")"
load "$tmp/based" 160 4 &
load_pid=$!
# The baseline is parked right at the rollback (keys are sorted, so the
# message follows the kind; the rollback's own text does not name it).
wait_event deployment.parked 90 "rollout's baseline" ||
  fail "the slow canary was not rolled back against its baseline in 90 s: $(api GET /api/v1/routes/assistant)"
wait "$load_pid"
[ "$(not_ok "$tmp/based")" = 0 ] || fail "requests failed during the rollout with a baseline"
[ "$(count "$tmp/based" chat-base)" -gt 0 ] || fail "no request reached the baseline: $(sort "$tmp/based" | uniq -c)"
api GET "/api/v1/routes/assistant" >"$tmp/r"
[ "$(jq_py "[t['weight'] for t in j['targets']]" <"$tmp/r")" = "[100, 0, 0]" ] ||
  fail "weights after the rollback with a baseline: $(cat "$tmp/r")"
[ "$(jq_py "j['rollout']['phase']" <"$tmp/r")" = rolled_back ] || fail "phase with a baseline: $(cat "$tmp/r")"
[ "$(jq_py "j['rollout']['baseline']" <"$tmp/r")" = chat-base ] || fail "no baseline in the route: $(cat "$tmp/r")"
[ "$(api GET /api/v1/deployments/chat-base | jq_py "j['status'].get('parkedBy')")" = assistant ] ||
  fail "the baseline is not parked after the rollout: $(api GET /api/v1/deployments/chat-base)"
"$bin" rollout status assistant --server "$url" --key "$admin" >"$tmp/status" 2>&1
expect_contains "$tmp/status" "baseline chat-base: the analysis compares the canary with it"
expect_contains "$tmp/status" "  baseline: "

# 5. A healthy canary is promoted to 100%; the old version drains. The
# analysis is tolerant of a few slow requests on a loaded machine: p90 over
# at least 30 requests per version, within 3x.
apply "$(route '  targets: [{deployment: chat-v1}, {deployment: chat-v2}]' '  rollout:
    canary: chat-v2
    steps: [{weight: 50, pauseS: 3}]
    analysis: {windowS: 20, minRequests: 30, percentile: 90, maxTtftRatio: 0, maxE2eRatio: 3}')" >/dev/null
[ "$(cat "$tmp/code")" = 200 ] || fail "the good rollout: $(cat "$tmp/body")"
load "$tmp/good" 400 4 &
load_pid=$!
wait_event rollout.promoted 90 || fail "the healthy canary was not promoted in 90 s"
wait "$load_pid"
[ "$(not_ok "$tmp/good")" = 0 ] || fail "requests failed during the good canary"
api GET "/api/v1/routes/assistant" >"$tmp/r"
[ "$(jq_py "[t['weight'] for t in j['targets']]" <"$tmp/r")" = "[0, 100]" ] || fail "weights after promotion: $(cat "$tmp/r")"
wait_ready chat-v1 0 30 || fail "chat-v1 did not drain: $(api GET /api/v1/deployments/chat-v1)"
[ "$(api GET /api/v1/deployments/chat-v1 | jq_py "j['status'].get('parkedBy')")" = assistant ] ||
  fail "chat-v1 is not parked by the route"
# Deleting a version a route targets is refused.
api DELETE /api/v1/deployments/chat-v1 >"$tmp/del"
expect_contains "$tmp/del" "is a target of ModelRoute 'assistant'"

# 6. A restart keeps the route and its promoted rollout.
kill -TERM "$pid"
wait "$pid"
serve_live "$tmp/serve.yaml"
api GET "/api/v1/routes/assistant" >"$tmp/r"
[ "$(jq_py "j['rollout']['phase']" <"$tmp/r")" = promoted ] || fail "after a restart: $(cat "$tmp/r")"
load "$tmp/after" 20 2
[ "$(count "$tmp/after" chat-v2)" = 20 ] || fail "after a restart: $(sort "$tmp/after" | uniq -c)"
[ "$(ready_count chat-v1)" = 0 ] || fail "chat-v1 came back after the restart"

kill -TERM "$pid"
wait "$pid"
finish versions_live
