#!/usr/bin/env bash
# Smoke test of kube_test_apiserver (tests/kube/apiserver.h), the stand-in
# Kubernetes API server that gpusched's Kubernetes launcher is tested
# against: HTTPS with a self-signed certificate for 127.0.0.1 and a bearer
# token, port 0. Covers nodes list/get, pod create (409 on a duplicate, 422
# without containers), binding (409 twice, 404 to a missing node), the
# kubelet running the pod (Running, podIP 127.0.1.1, $(VAR) expansion,
# fieldRef env, its log), an httpGet readiness probe, selectors and paging,
# watches (ADDED/MODIFIED/DELETED, bookmarks, 410 Expired after
# /testing/expire-watches), injected 429 faults with Retry-After, graceful
# delete ending the process, StartError, recorded bodies, stats, 401 without
# the token, and SIGTERM killing what the server started.
# Usage: apiserver_smoke.sh KUBE_TEST_APISERVER_BINARY
set -u
bin="${1:?usage: apiserver_smoke.sh KUBE_TEST_APISERVER_BINARY}"
tmp="$(mktemp -d)"
server_pid=""
watch_pids=()
pod_pids=()
cleanup() {
  for p in "${watch_pids[@]}"; do kill "$p" 2>/dev/null; done
  if [ -n "$server_pid" ]; then
    kill "$server_pid" 2>/dev/null
    wait "$server_pid" 2>/dev/null
  fi
  # Should the server have died, the pod processes it started go too.
  for p in "${pod_pids[@]}"; do kill -9 "$p" 2>/dev/null; done
  rm -rf "$tmp"
}
trap cleanup EXIT
failures=0
fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}

# wait_for SECONDS CMD...: polls CMD every 0.1 s; false when it never held.
wait_for() {
  local deadline=$((SECONDS + $1))
  shift
  while [ "$SECONDS" -lt "$deadline" ]; do
    "$@" && return 0
    sleep 0.1
  done
  "$@"
}

# check FILE PYTHON-EXPR: the expression over d (the file's JSON) holds.
check() {
  python3 - "$1" "$2" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
sys.exit(0 if eval(sys.argv[2]) else 1)
PY
}
# jget FILE PYTHON-EXPR: prints the expression over d.
jget() {
  python3 - "$1" "$2" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
print(eval(sys.argv[2]))
PY
}
# events FILE PYTHON-EXPR: some line of a watch stream (as e) satisfies it.
events() {
  python3 - "$1" "$2" <<'PY'
import json, sys
ok = False
for line in open(sys.argv[1]):
    line = line.strip()
    if not line:
        continue
    e = json.loads(line)
    o = e["object"]
    if eval(sys.argv[2]):
        ok = True
sys.exit(0 if ok else 1)
PY
}

# A self-signed certificate for 127.0.0.1.
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
  -keyout "$tmp/key.pem" -out "$tmp/cert.pem" -days 1 -subj /CN=127.0.0.1 \
  -addext subjectAltName=IP:127.0.0.1 2>"$tmp/openssl.err" ||
  { echo "openssl: $(cat "$tmp/openssl.err")"; exit 1; }
token="smoke-$RANDOM$RANDOM"
mkdir -p "$tmp/rec" "$tmp/logs"
cat >"$tmp/nodes.json" <<'JSON'
{"kind": "NodeList", "apiVersion": "v1", "items": [
  {"metadata": {"name": "node-a", "labels": {"gpu": "h100", "zone": "z1"}},
   "spec": {},
   "status": {"capacity": {"cpu": "8", "memory": "32Gi", "nvidia.com/gpu": "2", "pods": "110"},
              "allocatable": {"cpu": "8", "memory": "32Gi", "nvidia.com/gpu": "2", "pods": "110"},
              "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
              "addresses": [{"type": "InternalIP", "address": "10.0.0.1"},
                            {"type": "Hostname", "address": "node-a"}]}},
  {"metadata": {"name": "node-b", "labels": {"gpu": "a100"}},
   "spec": {},
   "status": {"allocatable": {"cpu": "4", "memory": "16Gi", "pods": "110"},
              "conditions": [{"type": "Ready", "status": "True"}],
              "addresses": [{"type": "InternalIP", "address": "10.0.0.2"}]}}
]}
JSON

"$bin" --nodes "$tmp/nodes.json" --port-file "$tmp/port" \
  --cert "$tmp/cert.pem" --key "$tmp/key.pem" --token "$token" \
  --record-dir "$tmp/rec" --log-dir "$tmp/logs" --bookmark-ms 200 \
  2>"$tmp/server.err" &
server_pid=$!
wait_for 30 test -s "$tmp/port" || { echo "no port file: $(cat "$tmp/server.err")"; exit 1; }
url="https://127.0.0.1:$(cat "$tmp/port")"
ns="$url/api/v1/namespaces/default"

# k ARGS...: curl with the token; the body lands in $tmp/b, the status is
# printed.
k() {
  curl -sS --max-time 20 --cacert "$tmp/cert.pem" \
    -H "Authorization: Bearer $token" -o "$tmp/b" -w '%{http_code}' "$@"
}
kjson() {  # METHOD URL BODY
  k -X "$1" -H 'Content-Type: application/json' --data-binary "$3" "$2"
}
# watch_to FILE URL: a watch in the background.
watch_to() {
  curl -sSN --max-time 60 --cacert "$tmp/cert.pem" \
    -H "Authorization: Bearer $token" "$2" >"$1" 2>>"$tmp/curl.err" &
  watch_pids+=($!)
}
t() { curl -sS --max-time 20 --cacert "$tmp/cert.pem" -o "$tmp/t" -w '%{http_code}' "$@"; }

# Auth.
code=$(curl -sS --cacert "$tmp/cert.pem" -o "$tmp/b" -w '%{http_code}' "$url/api/v1/nodes")
[ "$code" = 401 ] && check "$tmp/b" 'd["reason"] == "Unauthorized" and d["kind"] == "Status"' ||
  fail "no token: want 401 Unauthorized, got $code $(cat "$tmp/b")"

# Nodes.
code=$(k "$url/api/v1/nodes")
[ "$code" = 200 ] && check "$tmp/b" \
  'd["kind"] == "NodeList" and len(d["items"]) == 2 and int(d["metadata"]["resourceVersion"]) >= 2 and "kind" not in d["items"][0] and d["items"][0]["metadata"]["uid"]' ||
  fail "list nodes: $code $(cat "$tmp/b")"
code=$(k "$url/api/v1/nodes/node-a")
[ "$code" = 200 ] && check "$tmp/b" 'd["kind"] == "Node" and d["metadata"]["labels"]["gpu"] == "h100"' ||
  fail "get node: $code $(cat "$tmp/b")"
code=$(k "$url/api/v1/nodes/nope")
[ "$code" = 404 ] && check "$tmp/b" 'd["reason"] == "NotFound" and d["details"]["kind"] == "nodes"' ||
  fail "get missing node: $code $(cat "$tmp/b")"

code=$(k "$ns/pods")
rv0=$(jget "$tmp/b" 'd["metadata"]["resourceVersion"]')
watch_to "$tmp/w1" "$ns/pods?watch=true&resourceVersion=$rv0&allowWatchBookmarks=true&timeoutSeconds=60"

# Create, bind, run.
pod='{"apiVersion":"v1","kind":"Pod","metadata":{"name":"demo","labels":{"app":"demo"}},
 "spec":{"terminationGracePeriodSeconds":30,"restartPolicy":"Never","containers":[{"name":"main","image":"busybox:1.36",
  "command":["sh","-c","echo $(GREETING)-$(POD_NAME)-$(NODE)-'"'"'$$(KEEP)'"'"'; exec sleep 1000"],
  "env":[{"name":"GREETING","value":"hi"},{"name":"POD_NAME","valueFrom":{"fieldRef":{"fieldPath":"metadata.name"}}},
         {"name":"NODE","valueFrom":{"fieldRef":{"fieldPath":"spec.nodeName"}}}]}]}}'
code=$(kjson POST "$ns/pods" "$pod")
[ "$code" = 201 ] && check "$tmp/b" \
  'd["status"]["phase"] == "Pending" and d["metadata"]["uid"] and d["metadata"]["namespace"] == "default" and d["metadata"]["creationTimestamp"].endswith("Z") and d["spec"]["containers"][0]["imagePullPolicy"] == "IfNotPresent"' ||
  fail "create pod: $code $(cat "$tmp/b")"
code=$(kjson POST "$ns/pods" "$pod")
[ "$code" = 409 ] && check "$tmp/b" 'd["reason"] == "AlreadyExists" and d["code"] == 409' ||
  fail "duplicate create: want 409 AlreadyExists, got $code $(cat "$tmp/b")"
code=$(kjson POST "$ns/pods" '{"apiVersion":"v1","kind":"Pod","metadata":{"name":"empty"},"spec":{}}')
[ "$code" = 422 ] && check "$tmp/b" \
  'd["reason"] == "Invalid" and d["details"]["causes"][0] == {"reason": "FieldValueRequired", "message": "Required value", "field": "spec.containers"}' ||
  fail "no containers: want 422 Invalid, got $code $(cat "$tmp/b")"
code=$(kjson POST "$url/api/v1/namespaces/other/pods" "$pod")
[ "$code" = 201 ] || fail "same name in another namespace: $code $(cat "$tmp/b")"
code=$(kjson POST "$url/api/v1/namespaces/x/pods" '{"metadata":{"name":"p","namespace":"y"},"spec":{"containers":[{"name":"c","image":"i"}]}}')
[ "$code" = 400 ] && check "$tmp/b" 'd["reason"] == "BadRequest"' ||
  fail "namespace mismatch: want 400, got $code $(cat "$tmp/b")"

binding='{"apiVersion":"v1","kind":"Binding","metadata":{"name":"demo"},"target":{"apiVersion":"v1","kind":"Node","name":"node-a"}}'
code=$(kjson POST "$ns/pods/demo/binding" "$binding")
[ "$code" = 201 ] && check "$tmp/b" 'd["kind"] == "Status" and d["status"] == "Success" and d["code"] == 201' ||
  fail "binding: $code $(cat "$tmp/b")"
code=$(kjson POST "$ns/pods/demo/binding" "$binding")
[ "$code" = 409 ] && check "$tmp/b" 'd["reason"] == "Conflict" and "already assigned to node" in d["message"]' ||
  fail "second binding: want 409 Conflict, got $code $(cat "$tmp/b")"
code=$(kjson POST "$url/api/v1/namespaces/other/pods/demo/binding" \
  '{"metadata":{"name":"demo"},"target":{"kind":"Node","name":"node-z"}}')
[ "$code" = 404 ] && check "$tmp/b" '"node-z" in d["message"]' ||
  fail "binding to a missing node: want 404, got $code $(cat "$tmp/b")"
code=$(kjson POST "$ns/pods/ghost/binding" '{"metadata":{"name":"ghost"},"target":{"name":"node-a"}}')
[ "$code" = 404 ] || fail "binding a missing pod: want 404, got $code"

running() {
  [ "$(k "$ns/pods/demo")" = 200 ] && check "$tmp/b" \
    'd["status"]["phase"] == "Running" and d["status"]["podIP"] == "127.0.1.1" and d["status"]["hostIP"] == "10.0.0.1" and [c["status"] for c in d["status"]["conditions"] if c["type"] == "Ready"] == ["True"] and d["status"]["containerStatuses"][0]["state"]["running"]["startedAt"]'
}
wait_for 30 running || fail "pod never Running with podIP 127.0.1.1: $(cat "$tmp/b")"
wait_for 30 events "$tmp/w1" 'e["type"] == "ADDED" and o["metadata"]["name"] == "demo"' ||
  fail "watch: no ADDED: $(cat "$tmp/w1")"
wait_for 30 events "$tmp/w1" 'e["type"] == "MODIFIED" and o["status"].get("phase") == "Running" and o["status"].get("podIP") == "127.0.1.1"' ||
  fail "watch: no MODIFIED Running: $(cat "$tmp/w1")"
wait_for 30 events "$tmp/w1" 'e["type"] == "BOOKMARK" and o["kind"] == "Pod" and int(o["metadata"]["resourceVersion"]) > 0' ||
  fail "watch: no BOOKMARK: $(cat "$tmp/w1")"
t "$url/testing/pods" >/dev/null
demo_pid=$(jget "$tmp/t" '[p["pid"] for p in d if p["name"] == "demo" and p["namespace"] == "default"][0]')
pod_pids+=("$demo_pid")
kill -0 "$demo_pid" 2>/dev/null || fail "the pod's process $demo_pid is not running"
wait_for 30 grep -qF 'hi-demo-node-a-$(KEEP)' "$tmp/logs/default_demo.log" ||
  fail "env expansion in the pod's log: $(cat "$tmp/logs/default_demo.log" 2>&1)"

# A readiness probe (httpGet on the pod IP, from the fieldRef env).
if python3 -c 'import http.server' 2>/dev/null; then
  code=$(kjson POST "$ns/pods" '{"metadata":{"name":"web","labels":{"app":"web"}},"spec":{"nodeName":"node-b","containers":[{"name":"web","image":"python:3",
    "command":["python3","-m","http.server","8080","--bind","$(POD_IP)"],
    "env":[{"name":"POD_IP","valueFrom":{"fieldRef":{"fieldPath":"status.podIP"}}}],
    "readinessProbe":{"httpGet":{"path":"/","port":8080},"periodSeconds":10}}]}}')
  [ "$code" = 201 ] || fail "create web: $code $(cat "$tmp/b")"
  web_ready() {
    [ "$(k "$ns/pods/web")" = 200 ] && check "$tmp/b" \
      'd["status"]["podIP"] == "127.0.2.1" and d["status"]["containerStatuses"][0]["ready"] is True and [c["status"] for c in d["status"]["conditions"] if c["type"] == "Ready"] == ["True"]'
  }
  wait_for 30 web_ready || fail "web never ready: $(cat "$tmp/b")"
  t "$url/testing/pods" >/dev/null
  pod_pids+=("$(jget "$tmp/t" '[p["pid"] for p in d if p["name"] == "web"][0]')")
fi

# StartError.
code=$(kjson POST "$ns/pods" '{"metadata":{"name":"bad"},"spec":{"nodeName":"node-b","containers":[{"name":"c","image":"x","command":["/nonexistent/cmd"]}]}}')
bad_failed() {
  [ "$(k "$ns/pods/bad")" = 200 ] && check "$tmp/b" \
    'd["status"]["phase"] == "Failed" and d["status"]["containerStatuses"][0]["state"]["terminated"]["reason"] == "StartError"'
}
wait_for 30 bad_failed || fail "exec failure: want Failed/StartError: $(cat "$tmp/b")"

# Selectors and paging.
for i in 1 2; do
  kjson POST "$ns/pods" '{"metadata":{"generateName":"gen-","labels":{"app":"gen"}},"spec":{"containers":[{"name":"c","image":"x","command":["true"]}]}}' >/dev/null
done
code=$(k -G "$ns/pods" --data-urlencode 'labelSelector=app=demo')
check "$tmp/b" 'len(d["items"]) == 1 and d["items"][0]["metadata"]["name"] == "demo"' || fail "labelSelector app=demo: $(cat "$tmp/b")"
code=$(k -G "$ns/pods" --data-urlencode 'labelSelector=app in (gen,web),app!=web')
check "$tmp/b" 'len(d["items"]) == 2 and all(i["metadata"]["name"].startswith("gen-") and len(i["metadata"]["name"]) == 9 for i in d["items"])' ||
  fail "labelSelector set-based: $(cat "$tmp/b")"
code=$(k -G "$url/api/v1/pods" --data-urlencode 'fieldSelector=spec.nodeName=node-a')
check "$tmp/b" 'sorted((i["metadata"]["namespace"], i["metadata"]["name"]) for i in d["items"]) == [("default", "demo")]' ||
  fail "fieldSelector spec.nodeName: $(cat "$tmp/b")"
code=$(k -G "$ns/pods" --data-urlencode 'labelSelector=!app')
check "$tmp/b" 'sorted(i["metadata"]["name"] for i in d["items"]) == ["bad"]' || fail "labelSelector !app: $(cat "$tmp/b")"
code=$(k -G "$ns/pods" --data-urlencode 'fieldSelector=spec.bogus=1')
[ "$code" = 400 ] || fail "unknown field label: want 400, got $code"
k "$ns/pods" >/dev/null
want=$(jget "$tmp/b" 'len(d["items"])')
names=""
cont=""
for page in 1 2 3 4 5 6 7; do
  if [ -z "$cont" ]; then k "$ns/pods?limit=2" >/dev/null; else k -G "$ns/pods" -d limit=2 --data-urlencode "continue=$cont" >/dev/null; fi
  names="$names $(jget "$tmp/b" '" ".join(i["metadata"]["name"] for i in d["items"])')"
  cont=$(jget "$tmp/b" 'd["metadata"].get("continue", "")')
  [ -n "$cont" ] || break
done
[ "$want" -ge 4 ] && [ "$(echo $names | wc -w)" = "$want" ] &&
  [ "$(echo $names | tr ' ' '\n' | sort -u | wc -l)" = "$want" ] ||
  fail "paging: want $want pods in pages of 2, got '$names'"

# 410 Expired after the history is cleared.
code=$(t -X POST "$url/testing/expire-watches")
[ "$code" = 200 ] || fail "expire-watches: $code"
wait_for 30 events "$tmp/w1" 'e["type"] == "ERROR" and o["code"] == 410 and o["reason"] == "Expired"' ||
  fail "open watch: no 410 ERROR: $(tail -c 600 "$tmp/w1")"
curl -sSN --max-time 20 --cacert "$tmp/cert.pem" -H "Authorization: Bearer $token" \
  -D "$tmp/w2.h" "$ns/pods?watch=true&resourceVersion=$rv0" >"$tmp/w2"
grep -q '^HTTP/[0-9.]* 200' "$tmp/w2.h" && [ "$(grep -c . "$tmp/w2")" = 1 ] &&
  events "$tmp/w2" 'e["type"] == "ERROR" and o["kind"] == "Status" and o["status"] == "Failure" and o["code"] == 410 and o["reason"] == "Expired" and o["message"].startswith("too old resource version: '"$rv0"' (")' ||
  fail "watch at an old version: want 200 and one 410 ERROR event: $(cat "$tmp/w2.h" "$tmp/w2")"

# Faults: 429 with Retry-After, then served again.
code=$(t -X POST -H 'Content-Type: application/json' -d '{"status":429,"count":1,"retryAfterSeconds":1}' "$url/testing/faults")
[ "$code" = 200 ] || fail "arm faults: $code $(cat "$tmp/t")"
code=$(k -D "$tmp/h" "$url/api/v1/nodes")
[ "$code" = 429 ] && grep -qi '^Retry-After: 1' "$tmp/h" && check "$tmp/b" 'd["reason"] == "TooManyRequests"' ||
  fail "fault: want 429 with Retry-After: $code $(cat "$tmp/h" "$tmp/b")"
code=$(k "$url/api/v1/nodes")
[ "$code" = 200 ] || fail "after the fault: want 200, got $code"

# Graceful delete: deletionTimestamp, SIGTERM, DELETED.
k "$ns/pods" >/dev/null
rv1=$(jget "$tmp/b" 'd["metadata"]["resourceVersion"]')
watch_to "$tmp/w3" "$ns/pods?watch=true&resourceVersion=$rv1&timeoutSeconds=60"
code=$(k -X DELETE "$ns/pods/demo?gracePeriodSeconds=1")
[ "$code" = 200 ] && check "$tmp/b" 'd["metadata"]["deletionTimestamp"] and d["metadata"]["deletionGracePeriodSeconds"] == 1' ||
  fail "delete: $code $(cat "$tmp/b")"
gone() { [ "$(k "$ns/pods/demo")" = 404 ]; }
wait_for 30 gone || fail "pod not removed after its grace period: $(cat "$tmp/b")"
dead() { ! kill -0 "$demo_pid" 2>/dev/null; }
wait_for 30 dead || fail "the pod's process $demo_pid outlived the delete"
wait_for 30 events "$tmp/w3" 'e["type"] == "MODIFIED" and o["metadata"]["name"] == "demo" and "deletionTimestamp" in o["metadata"]' ||
  fail "watch: no MODIFIED with deletionTimestamp: $(cat "$tmp/w3")"
wait_for 30 events "$tmp/w3" 'e["type"] == "DELETED" and o["metadata"]["name"] == "demo"' ||
  fail "watch: no DELETED: $(cat "$tmp/w3")"
code=$(k -X DELETE "$ns/pods/demo")
[ "$code" = 404 ] || fail "delete again: want 404, got $code"
code=$(k -X DELETE -H 'Content-Type: application/json' -d '{"kind":"DeleteOptions","apiVersion":"v1","gracePeriodSeconds":0}' "$ns/pods/bad")
[ "$code" = 200 ] || fail "delete with DeleteOptions: $code $(cat "$tmp/b")"

# Recorded bodies and stats.
ls "$tmp/rec" | grep -q -- '-pods-POST.json$' || fail "no recorded pods POST: $(ls "$tmp/rec")"
ls "$tmp/rec" | grep -q -- '-binding-POST.json$' || fail "no recorded binding POST: $(ls "$tmp/rec")"
first=$(ls "$tmp/rec" | grep -- '-pods-POST.json$' | head -1)
cmp -s <(printf '%s' "$pod") "$tmp/rec/$first" || fail "the recorded body differs from what was sent"
t "$url/testing/stats" >/dev/null
check "$tmp/t" 'd["requests"]["POST pods/binding"] == 4 and d["requests"]["WATCH pods"] >= 3 and d["requests"]["LIST nodes"] >= 2 and d["faults_served"] == 1 and d["watch_events_sent"] > 0 and d["unauthorized"] == 1' ||
  fail "stats: $(cat "$tmp/t")"

# SIGTERM: exits 0, and the processes it started are gone.
kill -TERM "$server_pid"
wait "$server_pid"
rc=$?
server_pid=""
[ "$rc" = 0 ] || fail "server exit status $rc: $(tail -5 "$tmp/server.err")"
for p in "${pod_pids[@]}"; do
  kill -0 "$p" 2>/dev/null && fail "pod process $p survived the server"
done

if [ "$failures" -ne 0 ]; then
  echo "$failures failure(s); server log:"
  tail -20 "$tmp/server.err"
  exit 1
fi
echo "kube_apiserver: all checks passed"
