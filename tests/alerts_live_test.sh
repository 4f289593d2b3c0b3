#!/usr/bin/env bash
# The shipped alerts end to end: a real Prometheus (Debian's prometheus)
# scrapes a live gpusched and evaluates deploy/prometheus/gpusched.rules.yaml
# with its windows and `for` durations divided by 20 (a test-only copy; the
# shipped file keeps the SRE workbook's, as docs/runbooks.md states), a real
# Alertmanager (prometheus-alertmanager) routes to a webhook this test runs.
# Three faults at once: an engine that crash-loops (bad arguments), a
# deployment whose SLO is missed (the reference engine replaying a slow GPU
# profile, under steady traffic), and a GPU made unhealthy through the fake
# NVML (tests/fake_nvml: uncorrected ECC errors). Each alert must reach the
# webhook with its labels, show in GET /api/v1/alerts and `gpusched get
# alerts` and the dashboard's alerts card with its runbook link; removing
# each fault (a good engine applied,
# a fast engine applied, the ECC errors gone) must resolve it. Everything
# on 127.0.0.1 with free ports; only the processes started here are ended.
# Skipped where prometheus or alertmanager is absent
# (scripts/install-deps.sh installs both).
# Usage: alerts_live_test.sh GPUSCHED_BINARY SOURCE_DIR FAKE_NVML_DIR
set -u
bin="$1"
src="$2"
nvml_dir="$3"
source "$(dirname "$0")/lib.sh"
test_name=alerts_live

# Debian names the Alertmanager binary prometheus-alertmanager.
am_bin=$(command -v prometheus-alertmanager || command -v alertmanager || true)
if ! command -v prometheus >/dev/null 2>&1 || [ -z "$am_bin" ]; then
  echo "$test_name: skipped (prometheus or prometheus-alertmanager is not installed; scripts/install-deps.sh installs both)"
  exit 0
fi

pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
  [ -n "${pid:-}" ] && kill -TERM "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null; done
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}
prom_port=$(free_port)
am_port=$(free_port)
hook_port=$(free_port)

# --- the webhook receiver: one JSON line per notification -------------------
python3 - "$hook_port" "$tmp/hook.jsonl" >"$tmp/hook.log" 2>&1 <<'PY' &
import http.server, sys
port, out = int(sys.argv[1]), sys.argv[2]
class H(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        n = int(self.headers.get("Content-Length", "0"))
        body = self.rfile.read(min(n, 1 << 20)).decode()
        with open(out, "a") as f:
            f.write(body.replace("\n", " ") + "\n")
        self.send_response(200)
        self.end_headers()
    def log_message(self, *a):
        pass
http.server.HTTPServer(("127.0.0.1", port), H).serve_forever()
PY
pids+=($!)

# --- gpusched on two fake NVML GPUs -----------------------------------------
nvml_state="$tmp/nvml.state"
set_gpus() {  # ECC errors of GPU 0, GPU 1
  printf 'GPU-00000000-0000-0000-0000-000000000000 81559 1024 10 %s\nGPU-11111111-1111-1111-1111-111111111111 81559 1024 10 %s\n' \
    "$1" "$2" >"$nvml_state.new"
  mv "$nvml_state.new" "$nvml_state"
}
set_gpus 0 0
crashy_bad='["--no-such-flag"]'
good='["--hidden", "18"]'
slow_args='["--hidden", "18", "--mode", "profile", "--profile-model", "baichuan-7b", "--gpu", "A10-24GB"]'
deployment() {  # name args-json
  cat <<YAML
apiVersion: gpusched.io/v1
kind: Deployment
metadata: {name: $1}
spec:
  engine: {template: reference, args: $2}
  replicas: 1
  resources: {fraction: {milli: 200, memory: 4Gi}}
  slo: {ttftMs: 300}
YAML
}
cat >"$tmp/serve.yaml" <<YAML
listen: 127.0.0.1:0
state: $tmp/state.db
log_dir: $tmp/logs
key_dir: $tmp/keys
gpu_discovery: nvml
alerts:
  prometheus_url: http://127.0.0.1:$prom_port
  runbook_base_url: https://runbooks.example/gpusched/
  timeout_ms: 2000
tenants:
  - name: demo
YAML
LD_LIBRARY_PATH="$nvml_dir" GPUSCHED_FAKE_NVML_STATE="$nvml_state" start_serve "$tmp/serve.yaml"
served_or_finish "$test_name"
admin=$(cat "$tmp/keys/admin.key")
demo=$(cat "$tmp/keys/demo.key")
apply() {  # name args-json
  deployment "$1" "$2" >"$tmp/$1.yaml"
  GPUSCHED_SERVER="$url" GPUSCHED_KEY="$admin" "$bin" apply -f "$tmp/$1.yaml" >"$tmp/apply.out" 2>&1 ||
    fail "apply $1: $(cat "$tmp/apply.out")"
}
gpus_json=$(curl -s -m 10 "$url/api/v1/gpus" -H "Authorization: Bearer $admin")
node=$(echo "$gpus_json" | jq_py "j['items'][0]['node']" 2>/dev/null)
[ -n "$node" ] || fail "no NVML GPU listed: $gpus_json"
gport=${url##*:}

# --- Prometheus with a test copy of the rules, and Alertmanager -------------
python3 - "$src/deploy/prometheus/gpusched.rules.yaml" "$tmp/rules.yaml" <<'PY'
import re, sys
# Durations / 20, at least 2 s: [1h] -> [180s], for: 10m -> 30s.
unit = {"s": 1, "m": 60, "h": 3600, "d": 86400}
def short(n, u):
    return f"{max(2, int(n) * unit[u] // 20)}s"
text = open(sys.argv[1]).read()
text = re.sub(r"\[(\d+)([smhd])\]", lambda m: f"[{short(*m.groups())}]", text)
text = re.sub(r"(\n\s+for: )(\d+)([smhd])\b", lambda m: m.group(1) + short(m.group(2), m.group(3)), text)
open(sys.argv[2], "w").write(text)
PY
promtool check rules "$tmp/rules.yaml" >"$tmp/check.out" 2>&1 ||
  fail "the shortened rules: $(cat "$tmp/check.out")"
cat >"$tmp/prometheus.yml" <<YAML
global: {scrape_interval: 1s, evaluation_interval: 1s}
rule_files: [$tmp/rules.yaml]
alerting:
  alertmanagers: [{static_configs: [{targets: ["127.0.0.1:$am_port"]}]}]
scrape_configs:
  - job_name: gpusched
    static_configs: [{targets: ["127.0.0.1:$gport"]}]
YAML
cat >"$tmp/alertmanager.yml" <<YAML
route:
  receiver: webhook
  group_by: [alertname, deployment, tenant, node, gpu]
  group_wait: 1s
  group_interval: 2s
  repeat_interval: 1h
receivers:
  - name: webhook
    webhook_configs: [{url: "http://127.0.0.1:$hook_port/hook", send_resolved: true}]
YAML
"$am_bin" --config.file="$tmp/alertmanager.yml" --storage.path="$tmp/am" \
  --web.listen-address="127.0.0.1:$am_port" --cluster.listen-address= \
  >"$tmp/am.log" 2>&1 &
pids+=($!)
prometheus --config.file="$tmp/prometheus.yml" --storage.tsdb.path="$tmp/prom" \
  --web.listen-address="127.0.0.1:$prom_port" --rules.alert.resend-delay=1s \
  >"$tmp/prom.log" 2>&1 &
pids+=($!)

# --- the faults ---------------------------------------------------------------
apply crashy "$crashy_bad"
apply slow "$slow_args"
set_gpus 0 3
# Steady traffic for the SLO: tenant demo, one request after another.
(
  while :; do
    curl -s -o /dev/null -m 30 "$url/v1/chat/completions" -H "Authorization: Bearer $demo" \
      -H 'Content-Type: application/json' \
      -d '{"model":"slow","max_tokens":32,"messages":[{"role":"user","content":"tell me"}]}'
  done
) &
pids+=($!)

# The webhook's last word on an alert: firing, resolved, or nothing yet;
# with HOOK_EVER=1, "firing" once it has fired at all (an alert that fired
# and resolved while the others were still coming reached the webhook).
hook_state() {  # python condition over an alert's labels `l`
  HOOK_EVER=${HOOK_EVER:-0} python3 - "$tmp/hook.jsonl" "$1" <<'PY'
import json, os, sys
ever = os.environ.get("HOOK_EVER") == "1"
last = "none"
try:
    lines = open(sys.argv[1]).read().splitlines()
except FileNotFoundError:
    lines = []
for line in lines:
    for a in json.loads(line).get("alerts", []):
        l = a["labels"]
        if eval(sys.argv[2]) and not (ever and last == "firing"):
            last = a["status"]
print(last)
PY
}
crash_q='l["alertname"] == "GpuschedReplicaCrashLooping" and l.get("deployment") == "crashy" and l.get("severity") == "warning"'
slo_q='l["alertname"] == "GpuschedSloBurnFast" and l.get("deployment") == "slow" and l.get("tenant") == "demo" and l.get("severity") == "critical" and l.get("window") == "fast"'
gpu_q="l['alertname'] == 'GpuschedGpuUnhealthy' and l.get('node') == '$node' and l.get('gpu') == '1' and l.get('severity') == 'critical' and l.get('job') == 'gpusched'"
wait_hook() {  # want seconds queries...
  local want=$1 deadline=$((SECONDS + $2))
  shift 2
  while [ $SECONDS -lt $deadline ]; do
    local all=1
    for q in "$@"; do [ "$(hook_state "$q")" = "$want" ] || all=0; done
    [ $all -eq 1 ] && return 0
    sleep 1
  done
  return 1
}
started=$SECONDS
if HOOK_EVER=1 wait_hook firing 240 "$crash_q" "$slo_q" "$gpu_q"; then
  echo "all three alerts reached the webhook after $((SECONDS - started)) s"
else
  fail "not every alert reached the webhook in 240 s: crash-loop $(hook_state "$crash_q"), SLO $(hook_state "$slo_q"), GPU $(hook_state "$gpu_q"); webhook:
$(tail -c 3000 "$tmp/hook.jsonl" 2>/dev/null)
Prometheus alerts: $(curl -s -m 5 "http://127.0.0.1:$prom_port/api/v1/alerts" | head -c 3000)"
fi
# The GPU that stayed healthy never alerted.
[ "$(hook_state "l['alertname'] == 'GpuschedGpuUnhealthy' and l.get('gpu') == '0'")" = none ] ||
  fail "GpuschedGpuUnhealthy fired for the healthy GPU 0"

# gpusched shows what Prometheus fires, with the runbook links: the alerts
# that stay firing while their fault lasts. The crash loop is checked where
# it is shown (it fired at the webhook above): with the windows divided by
# 20 and the restart backoff not (1 s doubling to 60 s), its 45 s window
# soon holds fewer than 3 failures, and it may have resolved by now (seen
# on a loaded machine).
curl -s -m 20 "$url/api/v1/alerts" -H "Authorization: Bearer $admin" >"$tmp/api_alerts.json"
python3 - "$tmp/api_alerts.json" >"$tmp/api_alerts.out" 2>&1 <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
names = {(a["name"], a["labels"].get("deployment", a["labels"].get("gpu"))): a for a in j["items"]}
for key, anchor in [(("GpuschedReplicaCrashLooping", "crashy"), "gpuschedreplicacrashlooping"),
                    (("GpuschedSloBurnFast", "slow"), "gpuschedsloburnfast"),
                    (("GpuschedGpuUnhealthy", "1"), "gpuschedgpuunhealthy")]:
    a = names.get(key)
    if a is None and key[0] == "GpuschedReplicaCrashLooping":
        continue  # may have resolved already (see above)
    if a is None:
        print("missing", key)
    elif a["runbookUrl"] != "https://runbooks.example/gpusched/docs/runbooks.md#" + anchor:
        print("runbook", key, a["runbookUrl"])
    elif not a["summary"]:
        print("no summary", key)
print("configured", j.get("configured"), "source", j.get("source"))
PY
grep -q "^missing\|^runbook\|^no summary" "$tmp/api_alerts.out" &&
  fail "GET /api/v1/alerts: $(cat "$tmp/api_alerts.out"): $(head -c 2000 "$tmp/api_alerts.json")"
expect_contains "$tmp/api_alerts.out" "configured True source http://127.0.0.1:$prom_port"
GPUSCHED_SERVER="$url" GPUSCHED_KEY="$admin" "$bin" get alerts >"$tmp/get_alerts.out" 2>&1 ||
  fail "gpusched get alerts: $(cat "$tmp/get_alerts.out")"
for want in GpuschedSloBurnFast GpuschedGpuUnhealthy \
  "tenant=demo" "gpu=1" "#gpuschedsloburnfast"; do
  expect_contains "$tmp/get_alerts.out" "$want"
done

# The dashboard's alerts card, in headless chromium where node, chromium and
# playwright-core are installed (tests/dashboard_test.sh covers the rest).
chromium=""
for c in /usr/bin/chromium /usr/bin/chromium-browser; do
  [ -x "$c" ] && chromium="$c" && break
done
if command -v node >/dev/null 2>&1 && [ -n "$chromium" ] &&
  [ -f "$src/tests/e2e/node_modules/playwright-core/package.json" ]; then
  # Not the crash loop, for the reason above.
  node "$src/tests/e2e/alerts_dashboard.mjs" "$url" "$admin" "$chromium" \
    GpuschedSloBurnFast GpuschedGpuUnhealthy >"$tmp/browser.out" 2>&1 ||
    fail "the dashboard's alerts card: $(cat "$tmp/browser.out")"
  cat "$tmp/browser.out"
else
  echo "(the dashboard's alerts card not checked: node, chromium or playwright-core missing)"
fi

# --- remove the faults ----------------------------------------------------------
apply crashy "$good"
apply slow "$good"
set_gpus 0 0
started=$SECONDS
if wait_hook resolved 240 "$crash_q" "$slo_q" "$gpu_q"; then
  echo "all three alerts resolved at the webhook after $((SECONDS - started)) s"
else
  fail "not every alert resolved in 240 s: crash-loop $(hook_state "$crash_q"), SLO $(hook_state "$slo_q"), GPU $(hook_state "$gpu_q"); Prometheus alerts: $(curl -s -m 5 "http://127.0.0.1:$prom_port/api/v1/alerts" | head -c 3000)"
fi

# Prometheus that stops answering: a clear error, not a hang.
kill "${pids[-2]}" 2>/dev/null  # Prometheus
wait "${pids[-2]}" 2>/dev/null
code=$(curl -s -o "$tmp/down.json" -w '%{http_code}' -m 20 "$url/api/v1/alerts" -H "Authorization: Bearer $admin")
[ "$code" = 503 ] || fail "GET /api/v1/alerts with Prometheus down: HTTP $code, want 503: $(cat "$tmp/down.json")"
expect_contains "$tmp/down.json" "127.0.0.1:$prom_port"

finish "$test_name"
