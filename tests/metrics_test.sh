#!/usr/bin/env bash
# End-to-end test of GET /metrics on `gpusched serve` (the real binary,
# reference engines on a declared inventory, 127.0.0.1, port 0):
# tests/e2e/metrics.mjs sends chat (whole and streamed) and embedding
# requests, an unknown priority class and requests over a tenant's rate
# limit, scales a deployment, then parses the whole exposition with a
# Prometheus text-format parser from npm (parse-prometheus-text-format,
# pinned in tests/e2e/package-lock.json) and checks every family (HELP,
# TYPE, names), the expected families and types, request counters against
# what it sent, cumulative histogram buckets and bounded label values.
# Skipped only where node is absent; scripts/install-deps.sh installs node
# and runs `npm ci` in tests/e2e.
# Usage: metrics_test.sh GPUSCHED_BINARY SOURCE_DIR
set -u
bin="$1"
e2e="$2/tests/e2e"
source "$(dirname "$0")/lib.sh"

need_node_package metrics parse-prometheus-text-format

# Engine sizes unlike the other tests': they look for their own engines by
# their command line, and ctest runs tests at once.
{ serve_config_head; cat <<YAML; } >"$tmp/serve.yaml"
gpu_prices: {H100-SXM-80GB: 3.6}
deployments:
  - name: chat
    engine: {template: reference, args: ["--hidden", "28"]}
    replicas: {min: 1, max: 2}
    resources: {fraction: {milli: 250, memory: 10Gi}}
    slo: {ttftMs: 30000, tpotMs: 5000}
  - name: embed
    engine: {template: reference, args: ["--hidden", "32"]}
    replicas: 1
    resources: {fraction: {milli: 250, memory: 10Gi}}
tenants:
  - name: demo
  - name: limited
    models: [chat]
    limits: {requestsPerMinute: 1}
YAML
start_serve "$tmp/serve.yaml"
served_or_finish metrics
limited=$(grep -o 'tenant limited key: gs-[A-Za-z0-9_-]*' "$tmp/out" | head -1)
limited=${limited#tenant limited key: }

METRICS_DUMP="${METRICS_DUMP:-$tmp/metrics.txt}" node "$e2e/metrics.mjs" "$url" "$key" "$limited" "$(cat "$tmp/keys/admin.key")" \
  >"$tmp/node.out" 2>&1
rc=$?
cat "$tmp/node.out"
[ "$rc" -eq 0 ] || fail "the metrics checks failed (exit $rc); the exposition:
$(cat "$tmp/metrics.txt" 2>/dev/null)"

# Every metric the Grafana dashboard queries is one the server exports.
python3 - "$2/deploy/grafana/gpusched.json" "$tmp/metrics.txt" >"$tmp/grafana.out" <<'PY'
import json, re, sys
exprs = []
def walk(o):
    if isinstance(o, dict):
        for k, v in o.items():
            (exprs.append(v) if k == "expr" else walk(v))
    elif isinstance(o, list):
        for v in o: walk(v)
walk(json.load(open(sys.argv[1])))
used = {re.sub(r"_(bucket|sum|count)$", "", n)
        for e in exprs for n in re.findall(r"gpusched_[a-z0-9_]+", e)}
exported = set(re.findall(r"^# TYPE (gpusched_[a-z0-9_]+)", open(sys.argv[2]).read(), re.M))
missing = sorted(used - exported)
print("missing:", " ".join(missing) if missing else "none", "of", len(used))
PY
grep -q "missing: none" "$tmp/grafana.out" ||
  fail "deploy/grafana/gpusched.json queries metrics /metrics does not export: $(cat "$tmp/grafana.out")"

kill -TERM "$pid"
wait "$pid"
rc=$?
[ "$rc" -eq 0 ] || fail "SIGTERM: exit status $rc: $(cat "$tmp/err")"
finish metrics
