#!/usr/bin/env bash
# Integration test of `gpusched inventory` (the real binary, no GPU needed):
#   * a manifest with bad lines fails with exit 1 and names file:line;
#   * the shipped examples/inventory.yaml prints as JSON;
#   * bad flags fail.
# Usage: inventory_cli_test.sh GPUSCHED_BINARY SOURCE_DIR
set -u
bin="$1"
src="$2"
source "$(dirname "$0")/lib.sh"

# 1. Bad manifest: every problem, with file and line, exit status 1.
cat >"$tmp/bad.yaml" <<'YAML'
apiVersion: gpusched.io/v1
kind: Inventory
spec:
  nodes:
    - name: a
      cpu: "8"
      memory: 64Gi
      gpus: {model: H100-SXM-80GB, count: 2, nvlinks: all}
    - name: b
      cpu: many
      memory: 64Gi
YAML
"$bin" inventory --source declared --config "$tmp/bad.yaml" >"$tmp/out" 2>"$tmp/err"
rc=$?
[ "$rc" -eq 1 ] || fail "bad manifest: exit status $rc, want 1"
expect_contains "$tmp/err" "error: $tmp/bad.yaml:8: unknown field 'nvlinks' in gpus"
expect_contains "$tmp/err" "$tmp/bad.yaml:10: cpu: 'many' is not a quantity"
[ -s "$tmp/out" ] && fail "bad manifest: unexpected stdout: $(cat "$tmp/out")"

# 2. Unknown GPU model: the known models are listed.
cat >"$tmp/model.yaml" <<'YAML'
apiVersion: gpusched.io/v1
kind: Inventory
spec:
  nodes:
    - {name: a, cpu: 8, memory: 64Gi, gpus: {model: Z100, count: 1}}
YAML
"$bin" inventory --source declared --config "$tmp/model.yaml" >"$tmp/out" 2>"$tmp/err"
rc=$?
[ "$rc" -eq 1 ] || fail "unknown model: exit status $rc, want 1"
expect_contains "$tmp/err" "$tmp/model.yaml:5: unknown GPU model 'Z100'; known models: A100-40GB"

# 3. The shipped example as JSON (run from the source tree, as a user would).
(cd "$src" && "$bin" inventory --source declared --json) >"$tmp/out" 2>"$tmp/err"
rc=$?
[ "$rc" -eq 0 ] || fail "example: exit status $rc: $(cat "$tmp/err")"
expect_contains "$tmp/out" '"source": "declared"'
expect_contains "$tmp/out" '"name": "sim-node-0"'
expect_contains "$tmp/out" '"gpu_model": "H100-SXM-80GB"'
expect_contains "$tmp/out" '"gpu_count": 4'
expect_contains "$tmp/out" '"simulated": true'
if command -v python3 >/dev/null 2>&1; then
  python3 - "$tmp/out" <<'PY' || fail "example: JSON does not describe 4 NVLinked H100s"
import json, sys
doc = json.load(open(sys.argv[1]))
node = doc["nodes"][0]
assert node["nvlink_domains"] == [[0, 1, 2, 3]], node["nvlink_domains"]
assert node["mig_slots"] == 8 and "3g.40gb" in node["mig_profiles"]
PY
fi

# 4. The same file as a table, through --config.
"$bin" inventory --source declared --config "$src/examples/inventory.yaml" >"$tmp/out" 2>"$tmp/err"
rc=$?
[ "$rc" -eq 0 ] || fail "table: exit status $rc: $(cat "$tmp/err")"
expect_contains "$tmp/out" "sim-node-0"
expect_contains "$tmp/out" "[0-3]"
expect_contains "$tmp/out" "simulated"

# 5. Missing file and bad flags fail.
"$bin" inventory --source declared --config "$tmp/none.yaml" >/dev/null 2>"$tmp/err"
rc=$?
[ "$rc" -eq 1 ] || fail "missing file: exit status $rc, want 1"
expect_contains "$tmp/err" "error: $tmp/none.yaml: cannot open file"
"$bin" inventory --source bogus >/dev/null 2>&1 && fail "--source bogus accepted"
"$bin" inventory --no-such-flag >/dev/null 2>&1 && fail "--no-such-flag accepted"

# 6. An Alibaba-format node list is a declared inventory too.
"$bin" inventory --source declared --config "$src/testdata/alibaba-gpu-v2023/nodes.csv" --json >"$tmp/out" 2>"$tmp/err"
[ $? -eq 0 ] || fail "node CSV: $(cat "$tmp/err")"
expect_contains "$tmp/out" '"name": "openb-node-0000"'
expect_contains "$tmp/out" '"gpu_model": "P100"'

finish "inventory CLI"
