#!/usr/bin/env bash
# One fuzz target's run (ctest fuzz_NAME; `make fuzz`): replays every kept
# crasher (fuzz/regressions/NAME/) and seed (fuzz/corpus/NAME/) once, then
# fuzzes for $FUZZ_SECONDS (default 20) from the seeds, in a scratch corpus
# (the repo's seeds are not modified). Any crash, sanitizer report, leak,
# timeout (> 10 s for one input) or property violation fails the run and
# leaves the input under fuzz-artifacts/NAME/ in the current directory.
# Usage: run_fuzz.sh BINARY FUZZ_DIR NAME
set -euo pipefail
bin=${1:?usage: run_fuzz.sh BINARY FUZZ_DIR NAME}
dir=${2:?usage: run_fuzz.sh BINARY FUZZ_DIR NAME}
name=${3:?usage: run_fuzz.sh BINARY FUZZ_DIR NAME}
seconds=${FUZZ_SECONDS:-20}
seeds=$dir/corpus/$name
regressions=$dir/regressions/$name
artifacts=$PWD/fuzz-artifacts/$name
mkdir -p "$artifacts"
work=$(mktemp -d "${TMPDIR:-/tmp}/gpusched-fuzz-$name.XXXXXX")
trap 'rm -rf "$work"' EXIT
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
common=(-timeout=10 -rss_limit_mb=2048 -max_len=65536
  "-artifact_prefix=$artifacts/")

[ -d "$seeds" ] || { echo "fuzz_$name: no seed corpus at $seeds"; exit 1; }
inputs=("$seeds"/*)
[ -d "$regressions" ] && inputs+=("$regressions"/*)
echo "fuzz_$name: replaying ${#inputs[@]} seeds and regressions"
"$bin" "${common[@]}" "${inputs[@]}" >"$work/replay.log" 2>&1 || {
  tail -n 60 "$work/replay.log"
  echo "fuzz_$name: FAILED on a kept input (see above)"
  exit 1
}
echo "fuzz_$name: fuzzing for ${seconds}s"
mkdir "$work/corpus"
if ! "$bin" "${common[@]}" -max_total_time="$seconds" -print_final_stats=1 \
  "$work/corpus" "$seeds" >"$work/fuzz.log" 2>&1; then
  grep -vE "^#[0-9]+[[:space:]]+(NEW|REDUCE|pulse|INITED|RELOAD)" "$work/fuzz.log" | tail -n 60
  echo "fuzz_$name: FAILED; the input is in $artifacts/ — fix the bug and"
  echo "keep the input in fuzz/regressions/$name/ (fuzz/README.md)"
  exit 1
fi
grep -E "^stat::number_of_executed_units|^stat::peak_rss_mb" "$work/fuzz.log" |
  sed "s/^/fuzz_$name: /"
echo "fuzz_$name: ok, $(ls "$work/corpus" | wc -l) new inputs"
