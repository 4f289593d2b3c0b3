#!/usr/bin/env bash
# Browser test of the dashboard (web/, served by `gpusched serve` at /):
# gpusched runs reference-engine deployments on a declared inventory
# (127.0.0.1, port 0); the static files are checked with curl (types, ETag
# and 304, 404, no auth); then tests/e2e/dashboard.mjs drives Debian's
# chromium headless with playwright-core (pinned in tests/e2e): the GPU map
# shows each replica on the GPUs /api/v1/gpus says, the charts and counters
# move while traffic flows, a deployment applied through /api/v1/apply
# shows up in the events feed (deployment.created, replica.placed) and on
# the map, a ModelRoute applied the same way shows its weight split in the
# model routes panel, and a screenshot is saved to
# SOURCE_DIR/out/dashboard.png.
# Skipped only where node or chromium is absent (scripts/install-deps.sh
# installs both and runs `npm ci` in tests/e2e).
# Usage: dashboard_test.sh GPUSCHED_BINARY SOURCE_DIR
set -u
bin="$1"
src="$2"
e2e="$src/tests/e2e"
source "$(dirname "$0")/lib.sh"

chromium=""
for c in /usr/bin/chromium /usr/bin/chromium-browser; do
  [ -x "$c" ] && chromium="$c" && break
done
if ! command -v node >/dev/null 2>&1 || [ -z "$chromium" ]; then
  echo "dashboard: skipped (node or chromium is not installed; scripts/install-deps.sh installs both)"
  exit 0
fi
need_node_package dashboard playwright-core

cat >"$tmp/inventory.yaml" <<YAML
apiVersion: gpusched.io/v1
kind: Inventory
spec:
  nodes:
    - name: node-a
      cpu: "16"
      memory: 64Gi
      gpus: {model: H100-SXM-80GB, count: 2, nvlink: all}
    - name: node-b
      cpu: "8"
      memory: 32Gi
      gpus: {model: L4-24GB, count: 1}
YAML
{ serve_config_lines; cat <<YAML; } >"$tmp/serve.yaml"
deployments:
  - name: chat
    engine: {template: reference, args: ["--hidden", "12"]}
    replicas: 2
    resources: {fraction: {milli: 300, memory: 20Gi}}
    spread: gpu  # both on node-a's H100s: the L4 stays for summarize
  - name: embed
    engine: {template: reference, args: ["--hidden", "10"]}
    replicas: 1
    resources: {fraction: {milli: 200, memory: 6Gi}}
tenants:
  - name: demo
  - name: team2
    models: [embed]
    weight: 2
    limits: {requestsPerMinute: 6000}
    quota: {gpus: 1, limit: 2}
YAML
start_serve "$tmp/serve.yaml"
served_or_finish dashboard
admin=$(cat "$tmp/keys/admin.key")
demo=$(cat "$tmp/keys/demo.key")

# The static files: no key needed, right types, ETag revalidation, 404.
head_of() {  # path -> status and headers in $tmp/h
  curl -s -D "$tmp/h" -o "$tmp/b" -w '%{http_code}' "$url$1" "${@:2}"
}
[ "$(head_of /)" = 200 ] || fail "GET /: $(cat "$tmp/h")"
grep -qi '^content-type: text/html' "$tmp/h" || fail "GET /: not text/html: $(cat "$tmp/h")"
expect_contains "$tmp/b" '/ui/app.js'
etag=$(grep -i '^etag:' "$tmp/h" | sed 's/^[^:]*: *//' | tr -d '\r')
[ -n "$etag" ] || fail "GET /: no ETag"
[ "$(head_of / -H "If-None-Match: $etag")" = 304 ] || fail "GET / with its ETag: not 304"
for f in app.js:text/javascript style.css:text/css uPlot.iife.min.js:text/javascript uPlot.min.css:text/css; do
  [ "$(head_of "/ui/${f%%:*}")" = 200 ] || fail "GET /ui/${f%%:*}: $(cat "$tmp/h")"
  grep -qi "^content-type: ${f#*:}" "$tmp/h" || fail "/ui/${f%%:*}: wrong type: $(cat "$tmp/h")"
  grep -qi '^cache-control: no-cache' "$tmp/h" || fail "/ui/${f%%:*}: no Cache-Control"
done
[ "$(head_of /ui/nope.js)" = 404 ] || fail "GET /ui/nope.js: not 404"
[ "$(head_of /ui/app.js -X POST)" = 405 ] || fail "POST /ui/app.js: not 405"
[ "$(head_of /api/v1/stats)" = 401 ] || fail "GET /api/v1/stats without a key: not 401"
[ "$(head_of /api/v1/stats -H "Authorization: Bearer $admin")" = 200 ] ||
  fail "GET /api/v1/stats: $(cat "$tmp/b")"

mkdir -p "$src/out"
node "$e2e/dashboard.mjs" "$url" "$admin" "$demo" "$chromium" "$src/out/dashboard.png" \
  >"$tmp/node.out" 2>&1
rc=$?
cat "$tmp/node.out"
[ "$rc" -eq 0 ] || fail "the dashboard checks failed (exit $rc)"

# The stats the charts read counted the traffic.
curl -s "$url/api/v1/stats" -H "Authorization: Bearer $admin" >"$tmp/stats.json"
python3 - "$tmp/stats.json" <<'PY' || fail "stats: $(cat "$tmp/stats.json")"
import json, sys
j = json.load(open(sys.argv[1]))
chat = [d for d in j["deployments"] if d["deployment"] == "chat"][0]
assert chat["completed"] > 0 and chat["ttftSeconds"]["p50"] > 0, chat
assert chat["e2eSeconds"]["p90"] >= chat["ttftSeconds"]["p50"], chat
demo = [t for t in j["tenants"] if t["tenant"] == "demo"][0]
assert demo["requests"] >= chat["completed"] and demo["outputTokens"] > 0, demo
PY

kill -TERM "$pid"
wait "$pid"
rc=$?
[ "$rc" -eq 0 ] || fail "SIGTERM: exit status $rc: $(cat "$tmp/err")"
finish dashboard
