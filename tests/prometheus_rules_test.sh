#!/usr/bin/env bash
# The shipped Prometheus rules (deploy/prometheus/): `promtool check rules`;
# every group's `promtool test rules` file (deploy/prometheus/tests/), each
# alert tested with series that must fire and series that must not; every
# alert has a severity, a summary, a description and a runbook_url whose
# section exists in docs/runbooks.md. Then a live gpusched (the real binary,
# reference engines on a declared inventory, 127.0.0.1, port 0): its
# /metrics passes `promtool check metrics`, it exports every gpusched_*
# metric a rule uses, the Grafana dashboard's gpusched:* names are recorded
# by the rules, and `gpusched get alerts` without alerts.prometheus_url says
# so. Skipped where promtool is absent (scripts/install-deps.sh installs
# Debian's prometheus).
# Usage: prometheus_rules_test.sh GPUSCHED_BINARY SOURCE_DIR
set -u
bin="$1"
src="$2"
source "$(dirname "$0")/lib.sh"
rules="$src/deploy/prometheus/gpusched.rules.yaml"

if ! command -v promtool >/dev/null 2>&1; then
  echo "prometheus_rules: skipped (promtool is not installed; scripts/install-deps.sh installs prometheus)"
  exit 0
fi

promtool check rules "$rules" >"$tmp/check.out" 2>&1 ||
  fail "promtool check rules: $(cat "$tmp/check.out")"

# Each group has its test file; each alert fires in one case and stays
# silent in another; annotations and runbook sections are complete.
python3 - "$rules" "$src/deploy/prometheus/tests" "$src/docs/runbooks.md" >"$tmp/lint.out" 2>&1 <<'PY'
import os, re, sys, yaml
rules, tests_dir, runbooks = sys.argv[1:4]
problems = []
groups = yaml.safe_load(open(rules))["groups"]
headings = {re.sub(r"[^a-z0-9 -]", "", h.strip().lower()).replace(" ", "-")
            for h in re.findall(r"^#{2,3} (.+)$", open(runbooks).read(), re.M)}
fires, silent = set(), set()
alerts = []
for g in groups:
    short = g["name"].removeprefix("gpusched-")
    test = os.path.join(tests_dir, short + ".test.yaml")
    if not os.path.exists(test):
        problems.append(f"group {g['name']}: no test file {test}")
        continue
    for t in yaml.safe_load(open(test))["tests"]:
        for c in t.get("alert_rule_test", []):
            (fires if c.get("exp_alerts") else silent).add(c["alertname"])
    for r in g["rules"]:
        if "alert" not in r:
            continue
        name = r["alert"]
        alerts.append(name)
        sev = r.get("labels", {}).get("severity")
        if sev not in ("critical", "warning", "info"):
            problems.append(f"{name}: severity {sev!r}, want critical, warning or info")
        ann = r.get("annotations", {})
        for k in ("summary", "description", "runbook_url"):
            if not ann.get(k):
                problems.append(f"{name}: no {k}")
        if "{{ $labels." not in ann.get("description", "") + ann.get("summary", "") and \
           "{{ $value" not in ann.get("description", ""):
            problems.append(f"{name}: the description names nothing of the alert")
        want = "docs/runbooks.md#" + name.lower()
        if ann.get("runbook_url") != want:
            problems.append(f"{name}: runbook_url {ann.get('runbook_url')!r}, want {want!r}")
        if name.lower() not in headings:
            problems.append(f"{name}: docs/runbooks.md has no section '## {name}'")
for name in alerts:
    if name not in fires:
        problems.append(f"{name}: no test where it must fire")
    if name not in silent:
        problems.append(f"{name}: no test where it must not fire")
print(f"{len(alerts)} alerts in {len(groups)} groups")
for p in problems:
    print("problem:", p)
PY
grep -q "^problem:" "$tmp/lint.out" && fail "rules lint: $(cat "$tmp/lint.out")"
grep -q "alerts in" "$tmp/lint.out" || fail "rules lint did not run: $(cat "$tmp/lint.out")"

for t in "$src"/deploy/prometheus/tests/*.test.yaml; do
  (cd "$(dirname "$t")" && promtool test rules "$(basename "$t")") >"$tmp/unit.out" 2>&1 ||
    fail "promtool test rules $(basename "$t"): $(cat "$tmp/unit.out")"
done

# --- a live gpusched ---------------------------------------------------------
{ serve_config_head; cat <<YAML; } >"$tmp/serve.yaml"
gpu_prices: {H100-SXM-80GB: 3.6}
deployments:
  - name: chat
    engine: {template: reference, args: ["--hidden", "30"]}
    replicas: 1
    resources: {fraction: {milli: 250, memory: 10Gi}}
    slo: {ttftMs: 30000}
    queue: {maxQueueSize: 64}
tenants:
  - name: demo
    quota: {gpus: 1, limit: 2}
YAML
start_serve "$tmp/serve.yaml"
served_or_finish prometheus_rules
# One request: the per-tenant series exist.
curl -s -o /dev/null -m 60 "$url/v1/chat/completions" -H "Authorization: Bearer $key" \
  -H 'Content-Type: application/json' \
  -d '{"model":"chat","max_tokens":4,"messages":[{"role":"user","content":"hi"}]}'
curl -s -m 10 "$url/metrics" >"$tmp/metrics.txt"
promtool check metrics <"$tmp/metrics.txt" >"$tmp/lintm.out" 2>&1 ||
  fail "promtool check metrics on /metrics: $(cat "$tmp/lintm.out")"

python3 - "$rules" "$tmp/metrics.txt" "$src/deploy/grafana/gpusched.json" >"$tmp/names.out" 2>&1 <<'PY'
import json, re, sys, yaml
rules, metrics, grafana = sys.argv[1:4]
groups = yaml.safe_load(open(rules))["groups"]
used, recorded = set(), set()
for g in groups:
    for r in g["rules"]:
        if "record" in r:
            recorded.add(r["record"])
        used |= {re.sub(r"_(bucket|sum|count)$", "", n)
                 for n in re.findall(r"gpusched_[a-z0-9_]+", r["expr"])}
exported = set(re.findall(r"^# TYPE (gpusched_[a-z0-9_]+)", open(metrics).read(), re.M))
missing = sorted(used - exported)
print("rules use", len(used), "metrics; missing:", " ".join(missing) or "none")
exprs = []
def walk(o):
    if isinstance(o, dict):
        for k, v in o.items():
            (exprs.append(v) if k == "expr" else walk(v))
    elif isinstance(o, list):
        for v in o: walk(v)
walk(json.load(open(grafana)))
wanted = {n for e in exprs for n in re.findall(r"gpusched:[a-z0-9_:]+", e)}
unrecorded = sorted(wanted - recorded)
print("grafana uses", len(wanted), "recording rules; unrecorded:", " ".join(unrecorded) or "none")
PY
grep -q "missing: none" "$tmp/names.out" ||
  fail "rules use metrics /metrics does not export: $(cat "$tmp/names.out")"
grep -q "unrecorded: none" "$tmp/names.out" ||
  fail "the Grafana dashboard uses names no rule records: $(cat "$tmp/names.out")"
grep -q "grafana uses 0 " "$tmp/names.out" &&
  fail "the Grafana dashboard uses no recording rule (SLO burn and cost panels)"
cat "$tmp/names.out"

# No Prometheus configured: the API and the CLI say so.
GPUSCHED_SERVER="$url" GPUSCHED_KEY="$(cat "$tmp/keys/admin.key")" \
  "$bin" get alerts >"$tmp/alerts.out" 2>"$tmp/alerts.err" ||
  fail "gpusched get alerts without Prometheus: exit $?: $(cat "$tmp/alerts.err")"
expect_contains "$tmp/alerts.err" "alerts.prometheus_url is not set"

kill -TERM "$pid"
wait "$pid"
finish prometheus_rules
