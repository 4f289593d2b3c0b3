# The stand-in Kubernetes cluster of the tests and benches (sourced): the
# API server and simulated kubelet of tests/kube/apiserver.cc, serving HTTPS
# with a CA of its own and a bearer token, its nodes, and a kubeconfig for
# gpusched. Uses $tmp (tests/lib.sh).
#   kube_cluster_up APISERVER_BINARY NODE...   NODE: name:ip:managed(0|1):gpus
#     [:mig], mig: MIG devices of the mixed strategy, "1g.10gb=7,3g.40gb=1"
#     sets kpid, kurl, token; writes $tmp/kubeconfig, $tmp/ca.crt; records
#     every request body under $tmp/record and Pod output under $tmp/podlogs;
#     the array kube_extra, when set, adds flags (--autoscaler, --nodepools)
#   kube METHOD PATH [curl args]     the API as the test's admin
#   testing METHOD PATH [curl args]  the stand-in's /testing endpoints
#   kube_cluster_down
#   kube_cleanup_on_exit             traps EXIT: load, gpusched, the API
#                                    server and $tmp go with the script

kube_cluster_up() {  # apiserver node...
  local apiserver="$1"
  shift
  openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=test-ca \
    -keyout "$tmp/ca.key" -out "$tmp/ca.crt" 2>/dev/null
  openssl req -newkey rsa:2048 -nodes -subj /CN=kube-apiserver \
    -keyout "$tmp/server.key" -out "$tmp/server.csr" 2>/dev/null
  printf 'subjectAltName=IP:127.0.0.1\n' >"$tmp/san.ext"
  openssl x509 -req -in "$tmp/server.csr" -CA "$tmp/ca.crt" -CAkey "$tmp/ca.key" \
    -CAcreateserial -days 2 -extfile "$tmp/san.ext" -out "$tmp/server.crt" 2>/dev/null
  token="test-token-$RANDOM$RANDOM"
  python3 - "$tmp/nodes.json" "$@" <<'PY'
import json, sys
def node(name, ip, managed, gpus, mig=""):
    labels = {"kubernetes.io/hostname": name,
              "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
              "nvidia.com/gpu.memory": "81559",
              "nvidia.com/gpu.count": str(gpus)}
    if managed:
        labels["gpusched.io/managed"] = "true"
    res = {"cpu": "32", "memory": "256Gi", "pods": "110", "nvidia.com/gpu": str(gpus)}
    # MIG devices as the device plugin's mixed strategy advertises them, with
    # the labels GPU Feature Discovery sets.
    for part in filter(None, mig.split(",")):
        profile, count = part.split("=")
        res["nvidia.com/mig-" + profile] = count
        labels["nvidia.com/mig-%s.count" % profile] = count
        labels["nvidia.com/mig.strategy"] = "mixed"
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": labels},
            "spec": {"taints": [{"key": "gpusched.io/dedicated", "value": "true",
                                  "effect": "NoSchedule"}]},
            "status": {"capacity": res, "allocatable": res,
                       "addresses": [{"type": "InternalIP", "address": ip},
                                     {"type": "Hostname", "address": name}],
                       "conditions": [{"type": "Ready", "status": "True",
                                       "reason": "KubeletReady",
                                       "message": "kubelet is posting ready status"}]}}
items = []
for spec in sys.argv[2:]:
    name, ip, managed, gpus, *mig = spec.split(":")
    items.append(node(name, ip, managed == "1", int(gpus), *mig))
json.dump({"apiVersion": "v1", "kind": "NodeList", "items": items}, open(sys.argv[1], "w"))
PY
  mkdir -p "$tmp/record" "$tmp/podlogs"
  rm -f "$tmp/api.port"
  "$apiserver" --nodes "$tmp/nodes.json" --port-file "$tmp/api.port" \
    --cert "$tmp/server.crt" --key "$tmp/server.key" --token "$token" \
    --record-dir "$tmp/record" --log-dir "$tmp/podlogs" \
    ${kube_extra[@]+"${kube_extra[@]}"} >"$tmp/api.log" 2>&1 &
  kpid=$!
  for _ in $(seq 1 200); do
    [ -s "$tmp/api.port" ] && break
    kill -0 "$kpid" 2>/dev/null || break
    sleep 0.05
  done
  [ -s "$tmp/api.port" ] || { cat "$tmp/api.log"; return 1; }
  kurl="https://127.0.0.1:$(cat "$tmp/api.port")"
  cat >"$tmp/kubeconfig" <<YAML
apiVersion: v1
kind: Config
current-context: test
clusters:
- name: test
  cluster:
    server: $kurl
    certificate-authority-data: $(base64 -w0 "$tmp/ca.crt")
contexts:
- name: test
  context: {cluster: test, user: gpusched, namespace: gpusched}
users:
- name: gpusched
  user: {token: $token}
YAML
}

kube_cluster_down() {  # the API server ends the Pod processes it started
  [ -n "${kpid:-}" ] && kill -TERM "$kpid" 2>/dev/null && wait "$kpid" 2>/dev/null
  kpid=""
}

# On the script's exit (and through it on INT or TERM): ends the background
# load ($load_pid) and the gpusched ($pid, kill -9) the test started, when
# set, brings the API server down and removes $tmp.
kube_cleanup_on_exit() {
  trap '[ -n "${load_pid:-}" ] && kill "$load_pid" 2>/dev/null; [ -n "${pid:-}" ] && kill -9 "$pid" 2>/dev/null; kube_cluster_down; rm -rf "$tmp"' EXIT
  trap 'exit 1' INT TERM
}

kube() {  # method path [curl args]: the API server as the test's admin
  curl -s -m 10 --cacert "$tmp/ca.crt" -H "Authorization: Bearer $token" \
    -X "$1" "$kurl$2" "${@:3}"
}
testing() {  # method path [curl args]: the stand-in's test endpoints
  curl -s -m 10 --cacert "$tmp/ca.crt" -X "$1" "$kurl/testing$2" "${@:3}"
}

# Every object gpusched sent (under $tmp/record) against the official
# schemas with ajv (tests/kube/validate.mjs); each KIND must be among those
# validated. Counts failures through fail (tests/lib.sh).
kube_validate_record() {  # source-dir [kind...]
  local src="$1" kind
  shift
  if ! command -v node >/dev/null 2>&1 || [ ! -d "$src/tests/e2e/node_modules/ajv" ]; then
    fail "ajv is not installed (scripts/install-deps.sh runs npm ci in tests/e2e)"
    return
  fi
  node "$src/tests/kube/validate.mjs" "$tmp/record" >"$tmp/validate.out" 2>&1 ||
    fail "objects sent to the API server fail the schemas:
$(grep -v '^ok' "$tmp/validate.out" | head -20)"
  for kind in "$@"; do
    grep -q "^ok .*$kind" "$tmp/validate.out" ||
      fail "no $kind was validated: $(tail -3 "$tmp/validate.out")"
  done
  grep -c '^ok' "$tmp/validate.out" | sed 's/^/objects validated: /'
}

# The head of a serve config for `gpusched serve` on the stand-in: as
# live_config_head (tests/lib.sh), and a kubernetes: block with its
# kubeconfig, the managed nodes' selector and the engine binary.
kube_serve_config_head() {  # gpusched-binary
  live_config_head
  cat <<YAML
kubernetes:
  kubeconfig: $tmp/kubeconfig
  node_selector: {gpusched.io/managed: "true"}
  engine_path: $1
  image: gpusched-test:1
YAML
}
