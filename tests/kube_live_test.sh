#!/usr/bin/env bash
# gpusched on Kubernetes, against the stand-in API server and simulated
# kubelet of tests/kube/apiserver.cc (HTTPS with a CA of the test's own, a
# bearer token, a kubeconfig): the API contract, not a real cluster.
#   1. apply whole, multi-GPU and fractional deployments -> one Pod per
#      replica, bound (pods/binding) to the node placement chose, with
#      NVIDIA_VISIBLE_DEVICES equal to gpusched's GPUs; another user's Pod
#      holding nvidia.com/gpu is never double-booked; chat requests reach the
#      engines at their Pod IPs.
#   2. a Pod deleted by someone else under steady load -> replaced, 0 failed
#      requests, the event says it was deleted outside gpusched; a Pod
#      evicted by its kubelet -> replaced, the event says Evicted.
#   3. a node NotReady -> its replicas move, the event says why.
#   3b. the kubelet's readiness probe of one Pod fails (its Ready condition
#      turns False) -> the replica leaves the rotation (replica.manager_unready)
#      with 0 failed requests and is not restarted; back in when Ready again.
#   4. every watch expired (410 Gone) -> relisted: no replica exits or
#      starts, no Pod is created twice.
#   5. the API server answers 429, then 500, for a while -> gpusched backs
#      off (manager.unreachable), recovers (manager.reachable), and a Pod
#      deleted meanwhile is still replaced.
#   6. kill -9 gpusched and restart -> the same Pods are adopted by label (no
#      new Pod, none twice), a Pod of its labels it no longer wants is
#      deleted.
#   7. MIG (the mixed strategy): kube-m advertises 7 nvidia.com/mig-1g.10gb
#      and another user's Pod holds 2 -> a MIG deployment of 6 replicas gets
#      5 Pods, each asking the device plugin for one nvidia.com/mig-1g.10gb
#      (the kubelet admits every one), the sixth waits for a free instance;
#      /api/v1/gpus shows 2 instances foreign and 5 held; after kill -9 and a
#      restart the same Pods are adopted; a delete ends them.
#   8. SIGTERM leaves the Pods running (replicas outlive gpusched) and a
#      restart adopts them; a gpusched started with --stop-replicas-on-exit
#      deletes its Pods when it stops.
# Every object gpusched sent (Pods, Bindings; deletes carry no body) is validated
# against the official Kubernetes JSON Schemas with ajv (tests/kube).
# Figures: apply-to-ready, API requests per replica started.
# Usage: kube_live_test.sh GPUSCHED_BINARY APISERVER_BINARY SOURCE_DIR
set -u
bin="$1"
apiserver="$2"
src="$3"
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/kube/cluster.sh"
test_name=kube_live
pid=""
kpid=""
kube_cleanup_on_exit

# --- The stand-in cluster: three GPU nodes labelled for gpusched and one
# that is not.
kube_cluster_up "$apiserver" kube-a:10.0.0.11:1:4 kube-b:10.0.0.12:1:4 \
  kube-c:10.0.0.13:1:4 other:10.0.0.14:0:4 kube-m:10.0.0.15:1:0:1g.10gb=7 >"$tmp/api.err" 2>&1 ||
  { fail "the test API server did not start: $(cat "$tmp/api.err")"; finish kube_live; }

# Another user's Pod on a node, holding `count` of a device plugin resource.
other_users_pod() {  # name node resource count
  kube POST /api/v1/namespaces/research/pods -H 'Content-Type: application/json' -d '{
    "apiVersion": "v1", "kind": "Pod",
    "metadata": {"name": "'"$1"'", "namespace": "research"},
    "spec": {"nodeName": "'"$2"'", "restartPolicy": "Never",
             "containers": [{"name": "main", "image": "work:1", "command": ["sleep", "3600"],
                             "resources": {"limits": {"'"$3"'": "'"$4"'"}}}]}}' >"$tmp/$1.json"
  grep -q '"uid"' "$tmp/$1.json" || fail "the other user's Pod $1 was refused: $(cat "$tmp/$1.json")"
}
# Another user's Pod holds three of kube-a's four GPUs (the device plugin
# gave them; gpusched sees a count).
other_users_pod training kube-a nvidia.com/gpu 3

cat >"$tmp/serve.yaml" <<YAML
$(kube_serve_config_head "$bin")
$(drill_deployments)
tenants:
  - name: demo
YAML

serve() { serve_live "$tmp/serve.yaml" "$@"; }
# One line per replica of gpusched's view: name node gpus endpoint-host, sorted.
replicas_view() {
  api GET /api/v1/deployments | python3 -c '
import json, sys
for d in json.load(sys.stdin)["items"]:
    for r in d["status"]["replicaStatus"]:
        if r["state"] == "ready":
            print(r["name"], r["node"], ",".join(map(str, sorted(r["gpus"]))), r["endpoint"].rsplit(":", 1)[0])
' | sort
}
# The same from the API server: gpusched's running Pods (replica node
# NVIDIA_VISIBLE_DEVICES podIP), and their names in $tmp/podnames.
manager_view() {
  kube GET "/api/v1/namespaces/gpusched/pods?labelSelector=app.kubernetes.io%2Fmanaged-by%3Dgpusched" |
    python3 -c '
import json, sys
names = open(sys.argv[1], "w")
for p in json.load(sys.stdin)["items"]:
    if p["status"].get("phase") != "Running" or p["metadata"].get("deletionTimestamp"):
        continue
    env = {e["name"]: e.get("value") for e in p["spec"]["containers"][0]["env"]}
    print(p["metadata"]["annotations"]["gpusched.io/replica"], p["spec"]["nodeName"],
          env.get("NVIDIA_VISIBLE_DEVICES", "(device plugin)"), p["status"]["podIP"])
    print(p["metadata"]["name"], file=names)
' "$tmp/podnames" | sort
}
stat_of() {  # key of /testing/stats .requests
  testing GET /stats | python3 -c "import json,sys; print(json.load(sys.stdin)['requests'].get(sys.argv[1], 0))" "$1"
}

# --- 1. Replicas as Pods -------------------------------------------------------
t0=$(date +%s.%N)
serve
wait_ready solo 2 60 || fail "solo: not 2 ready replicas"
wait_ready tp 1 60 || fail "tp: not 1 ready replica"
wait_ready share 1 60 || fail "share: not 1 ready replica"
t1=$(date +%s.%N)
wait_views_agree 30 4 ||
  fail "gpusched and the API server disagree:
gpusched (replica node gpus host):
$(cat "$tmp/ours")
API server (replica node NVIDIA_VISIBLE_DEVICES podIP):
$(cat "$tmp/theirs")"
echo "figure: serve start to 4 Pods ready: $(python3 -c "print(round($t1 - $t0, 2))") s"
# Endpoints are Pod IPs (127.0.N.M in the stand-in), not node addresses.
awk '{print $4}' "$tmp/ours" | grep -qv '^127\.0\.[1-9]' &&
  fail "an endpoint is not a Pod IP: $(cat "$tmp/ours")"
# spread (default node): solo's two replicas on two nodes.
[ "$(awk '$1 ~ /^solo/ {print $2}' "$tmp/ours" | sort -u | wc -l)" = 2 ] ||
  fail "solo's replicas share a node: $(cat "$tmp/ours")"
awk '{print $2}' "$tmp/ours" | grep -q '^other$' && fail "a replica on the unlabelled node"
# kube-a holds one free GPU: at most one whole GPU of ours there.
[ "$(awk '$2 == "kube-a" && $3 !~ /,/' "$tmp/ours" | grep -v '^share' | wc -l)" -le 1 ] ||
  fail "kube-a is double-booked: $(cat "$tmp/ours")"
awk '$2 == "kube-a" && $3 ~ /,/' "$tmp/ours" | grep -q . &&
  fail "two GPUs on kube-a, where another Pod holds three: $(cat "$tmp/ours")"
api GET /api/v1/nodes >"$tmp/nodes.out"
python3 - "$tmp/nodes.out" <<'PY' || fail "the nodes view is wrong: $(cat "$tmp/nodes.out")"
import json, sys
n = {x["name"]: x for x in json.load(open(sys.argv[1]))["items"]}
ok = (set(n) == {"kube-a", "kube-b", "kube-c", "kube-m"} and len(n["kube-a"]["foreignGpus"]) == 3
      and all(x["usable"] and x["address"].startswith("10.0.0.") for x in n.values()))
sys.exit(0 if ok else 1)
PY
for d in solo solo solo tp tp share share; do
  [ "$(chat $d)" = 200 ] || fail "chat $d through the gateway failed"
done
posts=$(stat_of "POST pods")
binds=$(stat_of "POST pods/binding")
lists=$(stat_of "LIST pods")
echo "figure: API requests for 4 replicas: $posts Pod creates, $binds bindings, $lists Pod lists"
[ "$posts" = 5 ] || fail "expected 4 Pod creates by gpusched (and the test's 1), got $posts"
[ "$binds" = 4 ] || fail "expected 4 bindings, got $binds"
sleep 2
[ "$(stat_of "LIST pods")" = "$lists" ] || fail "gpusched lists Pods while nothing changes"

# --- 2. A Pod deleted by someone else, under load ----------------------------
victim=$(kube GET "/api/v1/namespaces/gpusched/pods?labelSelector=gpusched.io%2Fdeployment%3Dsolo" |
  jq_py "[p['metadata']['name'] for p in j['items'] if p['status'].get('phase') == 'Running'][0]")
( ok=0; bad=0
  for _ in $(seq 1 120); do
    if [ "$(chat solo)" = 200 ]; then ok=$((ok + 1)); else bad=$((bad + 1)); fi
  done
  echo "$ok $bad" >"$tmp/load" ) &
load=$!
sleep 1
kube DELETE "/api/v1/namespaces/gpusched/pods/$victim" >/dev/null
wait "$load"
read -r ok bad <"$tmp/load"
[ "$bad" = 0 ] || fail "$bad of $((ok + bad)) requests failed while Pod $victim was deleted"
wait_ready solo 2 60 || fail "solo was not back to 2 ready replicas"
wait_views_agree 30 4 || fail "after the delete: $(cat "$tmp/ours") vs $(cat "$tmp/theirs")"
grep -qx "$victim" "$tmp/podnames" && fail "Pod $victim still runs"
wait_event replica.exited 10 "deleted outside gpusched" ||
  fail "no event says $victim was deleted outside gpusched: $(api GET '/api/v1/events?kind=replica.exited&limit=5')"

# An eviction under node pressure: the Pod ends Failed, reason Evicted.
victim=$(awk 'NR==1' "$tmp/podnames")
testing POST "/pods/gpusched/$victim/evict" | grep -q evicted || fail "could not evict $victim"
wait_event replica.exited 30 "Evicted" ||
  fail "no event says $victim was evicted: $(api GET '/api/v1/events?kind=replica.exited&limit=5')"
wait_ready solo 2 60 && wait_ready tp 1 60 && wait_ready share 1 60 ||
  fail "not every deployment ready after the eviction"
wait_views_agree 30 4 || fail "after the eviction: $(cat "$tmp/ours") vs $(cat "$tmp/theirs")"
grep -qx "$victim" "$tmp/podnames" && fail "the evicted Pod $victim still counts"

# --- 3. A node NotReady --------------------------------------------------------
down=$(awk '$1 ~ /^tp/ {print $2; exit}' "$tmp/ours")
testing POST "/nodes/$down/ready?status=False" >/dev/null
for _ in $(seq 1 300); do
  replicas_view >"$tmp/ours"
  grep -q "^tp.* $down " "$tmp/ours" || break
  sleep 0.2
done
wait_ready tp 1 60 || fail "tp was not ready again after $down went NotReady"
wait_ready solo 2 60 || fail "solo was not ready again after $down went NotReady"
wait_ready share 1 60 || fail "share was not ready again after $down went NotReady"
wait_views_agree 60 4 || fail "after $down went NotReady: $(cat "$tmp/ours") vs $(cat "$tmp/theirs")"
awk -v n="$down" '$2 == n' "$tmp/ours" | grep -q . && fail "replicas still on $down: $(cat "$tmp/ours")"
wait_event node.unusable 10 "$down" || fail "no node.unusable event for $down"
api GET "/api/v1/events?kind=node.unusable&limit=10" >"$tmp/node.json"
expect_contains "$tmp/node.json" "NotReady"
[ "$(chat tp)" = 200 ] || fail "chat tp after the move failed"
testing POST "/nodes/$down/ready?status=True" >/dev/null

# --- 3b. The kubelet's readiness probe of a Pod fails --------------------------
wait_views_agree 30 4 || fail "before the probe fault: $(cat "$tmp/ours") vs $(cat "$tmp/theirs")"
victim=$(kube GET "/api/v1/namespaces/gpusched/pods?labelSelector=gpusched.io%2Fdeployment%3Dsolo" |
  jq_py "[p['metadata']['name'] for p in j['items'] if p['status'].get('phase') == 'Running'][0]")
kept=$(api GET /api/v1/deployments/solo | jq_py "sorted(r['pid'] for r in j['status']['replicaStatus'])")
testing POST "/pods/gpusched/$victim/probes?fail=true" | grep -q probesFail ||
  fail "could not fail the probes of $victim"
wait_event replica.manager_unready 30 "$victim" ||
  fail "no replica.manager_unready event for $victim: $(api GET '/api/v1/events?kind=replica.manager_unready&limit=5')"
wait_ready solo 1 30 || fail "solo still counts 2 ready replicas while $victim is not Ready"
( ok=0; bad=0
  for _ in $(seq 1 40); do
    if [ "$(chat solo)" = 200 ]; then ok=$((ok + 1)); else bad=$((bad + 1)); fi
  done
  echo "$ok $bad" >"$tmp/load" )
read -r ok bad <"$tmp/load"
[ "$bad" = 0 ] || fail "$bad of $((ok + bad)) requests failed while $victim was not Ready"
testing POST "/pods/gpusched/$victim/probes?fail=false" >/dev/null
wait_ready solo 2 30 || fail "solo did not count $victim again once Ready"
wait_event replica.manager_ready 30 || fail "no replica.manager_ready event"
[ "$(api GET /api/v1/deployments/solo | jq_py "sorted(r['pid'] for r in j['status']['replicaStatus'])")" = "$kept" ] ||
  fail "a replica was restarted for a Pod that was only not Ready"

# --- 4. Watches expire (410 Gone) -----------------------------------------------
wait_views_agree 30 4 || fail "before the expiry: $(cat "$tmp/ours") vs $(cat "$tmp/theirs")"
cp "$tmp/theirs" "$tmp/before410"
started=$(api GET "/api/v1/events?kind=replica.started&limit=200" | grep -o '"kind":"replica.started"' | wc -l)
posts=$(stat_of "POST pods")
lists=$(stat_of "LIST pods")
testing POST /expire-watches >/dev/null
for _ in $(seq 1 100); do
  [ "$(stat_of "LIST pods")" -gt "$lists" ] && break
  sleep 0.1
done
[ "$(stat_of "LIST pods")" -gt "$lists" ] || fail "no relist after the watches expired"
sleep 2
wait_views_agree 30 4 || fail "after the relist: $(cat "$tmp/ours") vs $(cat "$tmp/theirs")"
cmp -s "$tmp/before410" "$tmp/theirs" || fail "Pods changed across the relist: $(cat "$tmp/before410") vs $(cat "$tmp/theirs")"
[ "$(stat_of "POST pods")" = "$posts" ] || fail "a Pod was created after the relist"
[ "$(api GET "/api/v1/events?kind=replica.started&limit=200" | grep -o '"kind":"replica.started"' | wc -l)" = "$started" ] ||
  fail "a replica started after the relist"

# --- 5. The API server answers 429, then 500, for a while ------------------------
# Open watches see nothing of it: they are expired, so that the relists hit
# the faults.
testing POST /faults -d '{"status":429,"count":6,"retryAfterSeconds":1}' >/dev/null
testing POST /expire-watches >/dev/null
wait_event manager.unreachable 30 || fail "no manager.unreachable event while the API server refused"
for _ in $(seq 1 150); do
  [ "$(testing GET /stats | jq_py "j['faults_served']")" -ge 6 ] && break
  sleep 0.2
done
testing POST /faults -d '{"status":500,"count":6}' >/dev/null
testing POST /expire-watches >/dev/null
victim=$(awk 'NR==1' "$tmp/podnames")
for _ in $(seq 1 150); do
  [ "$(testing GET /stats | jq_py "j['faults_served']")" -ge 12 ] && break
  sleep 0.2
done
kube DELETE "/api/v1/namespaces/gpusched/pods/$victim" >/dev/null
wait_event manager.reachable 60 || fail "no manager.reachable event after the faults"
for d in solo tp share; do
  [ "$(chat $d)" = 200 ] || fail "chat $d failed after the faults"
done
wait_ready solo 2 60 && wait_ready tp 1 60 && wait_ready share 1 60 ||
  fail "not every deployment ready after the faults"
wait_views_agree 60 4 || fail "after the faults: $(cat "$tmp/ours") vs $(cat "$tmp/theirs")"
grep -qx "$victim" "$tmp/podnames" && fail "Pod $victim (deleted during the faults) was not replaced"

# --- 6. kill -9 and restart ------------------------------------------------------
manager_view >"$tmp/before"
cp "$tmp/podnames" "$tmp/names.before"
# A Pod with gpusched's labels for a deployment that does not exist.
kube POST /api/v1/namespaces/gpusched/pods -H 'Content-Type: application/json' -d '{
  "apiVersion": "v1", "kind": "Pod",
  "metadata": {"name": "gpusched-ghost-0-99", "namespace": "gpusched",
    "labels": {"app.kubernetes.io/managed-by": "gpusched", "gpusched.io/instance": "gpusched",
               "gpusched.io/deployment": "ghost", "gpusched.io/replica": "ghost-0"},
    "annotations": {"gpusched.io/deployment": "ghost", "gpusched.io/replica": "ghost-0",
                    "gpusched.io/tag": "1.0.0", "gpusched.io/gpus": "3"}},
  "spec": {"nodeName": "kube-c", "restartPolicy": "Never",
           "containers": [{"name": "engine", "image": "x", "command": ["sleep", "3600"]}]}}' >/dev/null
posts=$(stat_of "POST pods")
kill -9 "$pid"
wait "$pid" 2>/dev/null
pid=""
serve
wait_ready solo 2 60 || fail "after restart: solo not ready"
wait_ready tp 1 60 || fail "after restart: tp not ready"
wait_ready share 1 60 || fail "after restart: share not ready"
wait_views_agree 30 4 || fail "after restart: $(cat "$tmp/ours") vs $(cat "$tmp/theirs")"
cmp -s <(sort "$tmp/names.before") <(sort "$tmp/podnames") ||
  fail "Pods were not adopted: before $(cat "$tmp/names.before") after $(cat "$tmp/podnames")"
[ "$(stat_of "POST pods")" = "$posts" ] || fail "Pods were created after the restart"
wait_event replica.adopted 10 || fail "no replica.adopted event"
[ "$(api GET "/api/v1/events?kind=replica.adopted&limit=10" | grep -o '"kind":"replica.adopted"' | wc -l)" = 4 ] ||
  fail "expected 4 replica.adopted events"
wait_event replica.orphan_killed 30 "gpusched/gpusched-ghost-0-99" ||
  fail "the ghost Pod was not ended: $(api GET '/api/v1/events?kind=replica.orphan_killed&limit=5')"
for _ in $(seq 1 100); do
  kube GET /api/v1/namespaces/gpusched/pods/gpusched-ghost-0-99 | grep -q '"code":404' && break
  sleep 0.2
done
kube GET /api/v1/namespaces/gpusched/pods/gpusched-ghost-0-99 | grep -q '"code":404' ||
  fail "the ghost Pod is still there"
[ "$(chat solo)" = 200 ] || fail "the demo key no longer works after restart"

# --- 7. MIG devices of the mixed strategy ---------------------------------------
other_users_pod mig-user kube-m nvidia.com/mig-1g.10gb 2
wait_event node.mig_foreign 30 || fail "no node.mig_foreign event for the other user's MIG Pod"
[ "$(apply_mig slim 1g.10gb 6)" = 200 ] || fail "apply slim: $(cat "$tmp/apply.out")"
wait_ready slim 5 60 || fail "slim: not 5 ready MIG replicas: $(api GET /api/v1/deployments/slim)"
# The Pods: one nvidia.com/mig-1g.10gb each, all admitted by the kubelet,
# five different instances; and gpusched's view of kube-m.
slim_pods() {
  kube GET "/api/v1/namespaces/gpusched/pods?labelSelector=gpusched.io%2Fdeployment%3Dslim" >"$tmp/slim.pods"
  python3 - "$tmp/slim.pods" <<'PY'
import json, sys
items = json.load(open(sys.argv[1]))["items"]
for p in sorted(items, key=lambda p: p["metadata"]["name"]):
    c = p["spec"]["containers"][0]
    env = [e["name"] for e in c["env"]]
    print(p["metadata"]["name"], p["spec"].get("nodeName"), p["status"].get("phase"),
          c["resources"].get("limits", {}).get("nvidia.com/mig-1g.10gb"),
          p["metadata"]["annotations"].get("gpusched.io/mig"),
          "pinned" if "NVIDIA_VISIBLE_DEVICES" in env else "plugin")
PY
}
slim_pods >"$tmp/slim.view"
[ "$(grep -c ' kube-m Running 1 1g.10gb@[0-9]* plugin$' "$tmp/slim.view")" = 5 ] ||
  fail "slim's Pods are not 5 running MIG Pods on kube-m: $(cat "$tmp/slim.view")"
[ "$(awk '{print $5}' "$tmp/slim.view" | sort -u | wc -l)" = 5 ] ||
  fail "slim's Pods share an instance: $(cat "$tmp/slim.view")"
api GET /api/v1/deployments/slim | jq_py "j['status']['message']" >"$tmp/slim.msg"
expect_contains "$tmp/slim.msg" "no free MIG slot"
api GET /api/v1/gpus >"$tmp/gpus.json"
python3 - "$tmp/gpus.json" <<'PY' || fail "kube-m's MIG instances are not 2 foreign and 5 held: $(cat "$tmp/gpus.json")"
import json, sys
gpus = json.load(open(sys.argv[1]))
gpus = gpus.get("items", gpus) if isinstance(gpus, dict) else gpus
inst = [m for g in gpus if g["node"] == "kube-m" for m in g.get("migInstances", [])]
foreign = sum(m["foreign"] for m in inst)
held = sum(bool(m["replica"]) for m in inst)
both = sum(m["foreign"] and bool(m["replica"]) for m in inst)
sys.exit(0 if (len(inst), foreign, held, both) == (7, 2, 5, 0) else 1)
PY
[ "$(chat slim)" = 200 ] || fail "chat slim through the gateway failed"
# Five, so that a restarted gpusched has every replica ready; the same Pods.
[ "$(apply_mig slim 1g.10gb 5)" = 200 ] || fail "apply slim 5: $(cat "$tmp/apply.out")"
wait_status slim "s['replicas'] == 5 and s['readyReplicas'] == 5" 30 ||
  fail "slim is not 5 of 5: $(api GET /api/v1/deployments/slim)"
slim_pods >"$tmp/slim.before"
kill -9 "$pid"
wait "$pid" 2>/dev/null
pid=""
serve
wait_ready slim 5 60 || fail "after restart: slim not 5 ready"
slim_pods >"$tmp/slim.view"
cmp -s "$tmp/slim.before" "$tmp/slim.view" ||
  fail "slim's Pods were not adopted as they were: before $(cat "$tmp/slim.before") after $(cat "$tmp/slim.view")"
[ "$(chat slim)" = 200 ] || fail "chat slim after the restart failed"
api DELETE /api/v1/deployments/slim >/dev/null
for _ in $(seq 1 150); do
  [ "$(kube GET "/api/v1/namespaces/gpusched/pods?labelSelector=gpusched.io%2Fdeployment%3Dslim" | jq_py "len(j['items'])")" = 0 ] && break
  sleep 0.2
done
[ "$(kube GET "/api/v1/namespaces/gpusched/pods?labelSelector=gpusched.io%2Fdeployment%3Dslim" | jq_py "len(j['items'])")" = 0 ] ||
  fail "slim's Pods outlived its delete"
kube DELETE /api/v1/namespaces/research/pods/mig-user?gracePeriodSeconds=0 >/dev/null

# --- 8. A clean stop leaves the Pods; --stop-replicas-on-exit deletes them --
wait_views_agree 30 4 || fail "before the clean stop: $(cat "$tmp/ours") vs $(cat "$tmp/theirs")"
cp "$tmp/ours" "$tmp/before_stop"
kill -TERM "$pid"
wait "$pid" 2>/dev/null
pid=""
manager_view >"$tmp/after_stop"
cmp -s "$tmp/before_stop" "$tmp/after_stop" ||
  fail "a clean stop (SIGTERM) changed the Pods: before $(cat "$tmp/before_stop") after $(cat "$tmp/after_stop")"
serve --stop-replicas-on-exit
wait_views_agree 30 4 || fail "after the clean restart: $(cat "$tmp/ours") vs $(cat "$tmp/theirs")"
cmp -s "$tmp/before_stop" "$tmp/ours" ||
  fail "Pods were not adopted after a clean stop: before $(cat "$tmp/before_stop") after $(cat "$tmp/ours")"
kill -TERM "$pid"
wait "$pid" 2>/dev/null
pid=""
for _ in $(seq 1 100); do
  [ "$(kube GET "/api/v1/namespaces/gpusched/pods" | jq_py "len(j['items'])")" = 0 ] && break
  sleep 0.2
done
left=$(kube GET "/api/v1/namespaces/gpusched/pods" | jq_py "len(j['items'])")
[ "$left" = 0 ] || fail "$left Pods left after a stop with --stop-replicas-on-exit"

# --- Every object gpusched sent, against the official schemas -------------------
ls "$tmp/record" | grep -q . || fail "nothing was recorded"
# The test's own objects (the other user's Pod, the ghost) are validated too.
kube_validate_record "$src"
finish kube_live
