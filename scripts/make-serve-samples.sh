#!/usr/bin/env bash
# Regenerates the request-trace samples under testdata/ (used by
# src/sim/serve_trace_test.cc and by `gpusched sim serve` examples) from the
# full traces:
#   azure-llm-inference-2023/  first 600 requests of the coding trace
#   mooncake-fast25/           first 800 requests of the conversation trace
#   vtc-lmsys-multitenant/     requests.csv, whole (1,500 requests)
#   servegen/language/m-small/ the first day (144 windows) of clients 2, 13
#                              and 14, and client 13's length PMFs
# Each folder also gets the upstream licence; the READMEs are kept in git.
# Usage: scripts/make-serve-samples.sh [DATA_DIR]   (default ../shared/data)
set -euo pipefail
src=${1:-../shared/data}
dst=$(dirname "$0")/../testdata

d=$dst/azure-llm-inference-2023
mkdir -p "$d"
head -n 601 "$src/azure-llm-inference-2023/AzureLLMInferenceTrace_code.csv" > "$d/code_first600.csv"
cp "$src/azure-llm-inference-2023/LICENSE-CC-BY-4.0.txt" "$d/LICENSE"

d=$dst/mooncake-fast25
mkdir -p "$d"
head -n 800 "$src/mooncake-fast25/conversation_trace.jsonl" > "$d/conversation_first800.jsonl"
cp "$src/mooncake-fast25/LICENSE-APACHE-2.0.txt" "$d/LICENSE"

d=$dst/vtc-lmsys-multitenant
mkdir -p "$d"
cp "$src/vtc-lmsys-multitenant/requests.csv" "$d/requests.csv"
cp "$src/vtc-lmsys-multitenant/LICENSE-APACHE-2.0.txt" "$d/LICENSE"

d=$dst/servegen/language/m-small
mkdir -p "$d"
for i in 2 13 14; do
  head -n 144 "$src/servegen/language/m-small/chunk-$i-trace.csv" > "$d/chunk-$i-trace.csv"
done
cp "$src/servegen/language/m-small/chunk-13-dataset.json" "$d/chunk-13-dataset.json"
cp "$src/servegen/LICENSE-APACHE-2.0.txt" "$dst/servegen/LICENSE"

chmod u+w -R "$dst/azure-llm-inference-2023" "$dst/mooncake-fast25" \
  "$dst/vtc-lmsys-multitenant" "$dst/servegen"
wc -lc "$dst"/azure-llm-inference-2023/*.csv "$dst"/mooncake-fast25/*.jsonl \
  "$dst"/vtc-lmsys-multitenant/*.csv "$dst"/servegen/language/m-small/*
