#!/usr/bin/env bash
# Capacity on demand on Kubernetes, by the autoscalers' contract, against the
# stand-in API server (tests/kube/apiserver.cc) and its minimal cluster
# autoscaler (--autoscaler): kube_capacity_drill (tests/kube/capacity_drill.cc)
# drives the Kubernetes launcher as the controller does. An unschedulable Pod
# -> a node is added -> bound -> it runs; a gang through a
# ProvisioningRequest; scale-down taints -> kPoweringDown, not usable; an
# empty node is tainted and removed; a ProvisioningRequest that fails;
# safe-to-evict and do-not-disrupt follow SetEvictable. Then every object
# gpusched sent (Pods, Bindings, PodTemplates, ProvisioningRequests, and the
# Pods its patches made) is validated against the official schemas.
# Usage: kube_capacity_test.sh DRILL_BINARY APISERVER_BINARY SOURCE_DIR
set -u
drill="$1"
apiserver="$2"
src="$3"
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/kube/cluster.sh"
kube_cleanup_on_exit

# Two node pools the autoscaler can grow (h100-pool to 3 nodes, tiny-pool to
# 1), and a Karpenter NodePool the API serves.
cat >"$tmp/autoscaler.json" <<'JSON'
{"pools": [
  {"name": "h100-pool", "labels": {"cloud.google.com/gke-nodepool": "h100-pool"},
   "taints": [{"key": "gpusched.io/dedicated", "value": "true", "effect": "NoSchedule"}],
   "gpuProduct": "NVIDIA-H100-80GB-HBM3", "gpusPerNode": 4, "maxNodes": 3,
   "provisionDelayMs": 500, "scaleDownAfterMs": 1500, "deleteAfterMs": 500},
  {"name": "tiny-pool", "labels": {"cloud.google.com/gke-nodepool": "tiny-pool"},
   "gpuProduct": "NVIDIA-H100-80GB-HBM3", "gpusPerNode": 4, "maxNodes": 1}
]}
JSON
cat >"$tmp/nodepools.json" <<'JSON'
{"apiVersion": "karpenter.sh/v1", "kind": "NodePoolList", "metadata": {}, "items": [
  {"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "l4-spot"},
   "spec": {"template": {"spec": {
              "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "gpu"},
              "requirements": [
                {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot"]},
                {"key": "karpenter.k8s.aws/instance-gpu-count", "operator": "In", "values": ["1"]},
                {"key": "nvidia.com/gpu.product", "operator": "In", "values": ["NVIDIA-L4"]}]}},
            "limits": {"nvidia.com/gpu": "4"}}}]}
JSON
kube_extra=(--autoscaler "$tmp/autoscaler.json" --nodepools "$tmp/nodepools.json")
# One static GPU node; the drill places replicas on the pools only.
kube_cluster_up "$apiserver" static-a:10.0.0.11:1:4 >"$tmp/api.err" 2>&1 ||
  { fail "the test API server did not start: $(cat "$tmp/api.err")"; finish kube_capacity; }

"$drill" --kubeconfig "$tmp/kubeconfig" >"$tmp/drill.out" 2>&1
rc=$?
cat "$tmp/drill.out"
if [ "$rc" -ne 0 ]; then
  fail "the drill failed (exit $rc); the autoscaler's decisions:
$(testing GET /autoscaler)"
fi

# --- Every object gpusched sent, against the official schemas --------------
ls "$tmp/record" | grep -q 'provisioningrequests-POST' ||
  fail "no ProvisioningRequest was recorded"
ls "$tmp/record" | grep -q 'pods-status-PATCHED' ||
  fail "no pods/status patch was recorded"
kube_validate_record "$src" ProvisioningRequest PodTemplate
finish kube_capacity
