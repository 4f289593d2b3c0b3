#!/usr/bin/env bash
# Integration test of `gpusched sim placement` (the real binary):
#   * the shipped trace sample runs for two policies and seeds and writes a
#     JSON report with the fields the issue asks for, and an HTML page;
#   * bad files, lines, policies and flags fail with a message naming them.
# Usage: sim_cli_test.sh GPUSCHED_BINARY SOURCE_DIR
set -u
bin="$1"
src="$2"
source "$(dirname "$0")/lib.sh"
sample="$src/testdata/alibaba-gpu-v2023"

# 1. A real run.
"$bin" sim placement --nodes "$sample/nodes.csv" --pods "$sample/pods.csv" \
  --policy fgd,fillfrag --seeds 42-43 --out "$tmp/r.json" \
  --html "$tmp/r.html" 2>"$tmp/err"
rc=$?
[ "$rc" -eq 0 ] || fail "sample run: exit status $rc: $(cat "$tmp/err")"
python3 - "$tmp/r.json" <<'PY' || fail "report JSON is missing fields"
import json, sys
r = json.load(open(sys.argv[1]))
assert r["gpus_total"] == 626, r["gpus_total"]
assert len(r["results"]) == 4
for x in r["results"]:
    for k in ("policy", "seed", "pods_total", "pods_failed", "wall_seconds"):
        assert k in x, k
    assert set(x["unallocated_pct"]) == {"100", "130"}, x["unallocated_pct"]
s = {x["policy"]: x for x in r["summary"]}
assert s["fillfrag"]["unallocated_pct_100"]["mean"] < s["fgd"]["unallocated_pct_100"]["mean"]
assert "sd" in s["fgd"]["unallocated_pct_130"]
PY
expect_contains "$tmp/r.html" "<svg"
expect_contains "$tmp/err" "fillfrag"

# 2. Errors name what is wrong.
printf 'name,cpu_milli,memory_mib,num_gpu,gpu_milli\np,1,1,1,5000\n' >"$tmp/bad.csv"
"$bin" sim placement --nodes "$sample/nodes.csv" --pods "$tmp/bad.csv" 2>"$tmp/err" >/dev/null
[ $? -ne 0 ] || fail "bad pod line accepted"
expect_contains "$tmp/err" "$tmp/bad.csv:2: gpu_milli must be 0..1000, got 5000"
"$bin" sim placement --nodes "$sample/nodes.csv" --pods "$sample/pods.csv" --policy fgd,nope 2>"$tmp/err" >/dev/null
[ $? -ne 0 ] || fail "unknown policy accepted"
expect_contains "$tmp/err" "unknown placement policy 'nope'"
"$bin" sim placement --nodes "$tmp/none.csv" --pods "$sample/pods.csv" 2>"$tmp/err" >/dev/null
[ $? -ne 0 ] || fail "missing node file accepted"
expect_contains "$tmp/err" "none.csv"
"$bin" sim placement --nodes "$sample/nodes.csv" --pods "$sample/pods.csv" --seeds 9-1 2>"$tmp/err" >/dev/null
[ $? -ne 0 ] || fail "bad seeds accepted"
expect_contains "$tmp/err" "--seeds: bad item '9-1'"
"$bin" sim placement --bogus >/dev/null 2>&1 && fail "--bogus accepted"

finish "sim CLI"
