#!/usr/bin/env bash
# Integration test of `gpusched profiles` (the real binary):
#   * `profiles list` shows the built-in table, as text and as JSON;
#   * `profiles fit` on a small profiles directory writes a table that
#     `profiles list --models` reads back;
#   * a bad table or a missing directory fails with exit 1 and says where.
# Usage: profiles_cli_test.sh GPUSCHED_BINARY SOURCE_DIR
set -u
bin="$1"
src="$2"
source "$(dirname "$0")/lib.sh"

# 1. The built-in table.
"$bin" profiles list >"$tmp/list" 2>&1 || fail "profiles list: exit $?"
expect_contains "$tmp/list" "Latency models: built in (data/latency_models.csv)"
expect_contains "$tmp/list" "PREFILL 1K"
expect_contains "$tmp/list" "llama-2-7b"
"$bin" profiles list --json >"$tmp/json" 2>&1 || fail "profiles list --json: exit $?"
expect_contains "$tmp/json" '"decode_kv_tokens": 32768'
expect_contains "$tmp/json" '"gpu": "A100-80GB"'

# 2. Fit a one-model Aegaeon-format directory and read the result back.
mkdir -p "$tmp/profiles/aegaeon"
{
  echo "source,model,gpu,tp,input_len,batch_size,prefill_avg_s,prefill_p50_s,prefill_p90_s,decode_iter_avg_s,decode_iter_p50_s,decode_iter_p90_s,n_samples"
  for len in 16 64 256 1024; do
    for b in 1 2 4 8; do
      awk -v l="$len" -v b="$b" 'BEGIN {
        t = l * b; kv = b * (l + 5);
        printf "profiles,llama2_7b,A100,1,%d,%d,0,%.9f,0,0,%.9f,0,12\n", l, b,
          0.01 + 5e-5 * t, 0.012 + 1e-4 * b + 2e-7 * kv }'
    done
  done
} >"$tmp/profiles/aegaeon/vllm_prefill_decode_latency.csv"
"$bin" profiles fit --profiles "$tmp/profiles" --out "$tmp/fit.csv" 2>"$tmp/fit.err" ||
  fail "profiles fit: exit $?: $(cat "$tmp/fit.err")"
expect_contains "$tmp/fit.err" "wrote 1 latency models to $tmp/fit.csv"
expect_contains "$tmp/fit.csv" "model,gpu,tensor_parallel,p0,p1,p2,d0,d1,d2,kv_capacity_tokens,source,prefill_mape,decode_mape,points"
expect_contains "$tmp/fit.csv" "llama-2-7b,A100-80GB,1,"
"$bin" profiles list --models "$tmp/fit.csv" >"$tmp/list2" 2>&1 || fail "list --models: exit $?"
expect_contains "$tmp/list2" "Latency models: $tmp/fit.csv"
expect_contains "$tmp/list2" "aegaeon"

# 3. Errors name the file and line.
printf 'model,gpu,tensor_parallel,p0,p1,p2,d0,d1,d2,kv_capacity_tokens\nm,A100-80GB,1,0.01,x,0,0.01,0,1e-7,1\n' >"$tmp/bad.csv"
"$bin" profiles list --models "$tmp/bad.csv" >"$tmp/out" 2>"$tmp/err"
rc=$?
[ "$rc" -eq 1 ] || fail "bad table: exit status $rc, want 1"
expect_contains "$tmp/err" "$tmp/bad.csv:2: column 'p1': expected a number, got 'x'"
"$bin" profiles fit --profiles "$tmp/nowhere" >"$tmp/out" 2>"$tmp/err"
rc=$?
[ "$rc" -eq 1 ] || fail "missing directory: exit status $rc, want 1"
expect_contains "$tmp/err" "$tmp/nowhere: no profiles found"

finish profiles_cli
