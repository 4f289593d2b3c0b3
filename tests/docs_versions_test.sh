#!/usr/bin/env bash
# docs/versions.md's "Try it" block, run verbatim (the lines after the
# `<!-- docs-test: versions -->` marker, as one bash script with -e) against
# `gpusched serve` on examples/quickstart.yaml as shipped but for its
# listener (127.0.0.1 port 0) and its files (under a temporary folder).
# Every command must succeed, the tenant the docs apply must get an answer
# for the route, and what the block shows must be there.
# Usage: docs_versions_test.sh GPUSCHED_BINARY SOURCE_DIR
set -u
bin="$1"
src="$2"
source "$(dirname "$0")/lib.sh"

# The quickstart, with its own listener and files.
sed -e "s|^listen: .*|listen: 127.0.0.1:0|" \
  -e "s|^state: .*|state: $tmp/qs/gpusched-state.db|" \
  -e "s|^log_dir: .*|log_dir: $tmp/qs/logs|" \
  -e "s|^key_dir: .*|key_dir: $tmp/qs/keys|" \
  -e "s|^inventory: .*|inventory: $src/examples/quickstart-inventory.yaml|" \
  "$src/examples/quickstart.yaml" >"$tmp/quickstart.yaml"
grep -q "^listen: 127.0.0.1:0" "$tmp/quickstart.yaml" || fail "the quickstart has no listen line"
serve_until_ready "$tmp/quickstart.yaml"
served_or_finish docs_versions

# The block, verbatim.
awk '/<!-- docs-test: versions -->/{armed=1; next}
     armed && /^```sh$/{on=1; next}
     on && /^```$/{exit}
     on{print}' "$src/docs/versions.md" >"$tmp/block.sh"
[ "$(grep -c '^gpusched ' "$tmp/block.sh")" -ge 10 ] ||
  fail "no runnable block found in docs/versions.md: $(cat "$tmp/block.sh")"
(
  cd "$src" &&
    PATH="$(dirname "$bin"):$PATH" GPUSCHED_SERVER="$url" \
      GPUSCHED_KEY="$(cat "$tmp/qs/keys/admin.key")" \
      DEMO_KEY="$(cat "$tmp/qs/keys/demo.key")" \
      bash -e -o pipefail -x "$tmp/block.sh"
) >"$tmp/block.out" 2>&1
rc=$?
[ "$rc" -eq 0 ] || fail "docs/versions.md's block failed (exit $rc):
$(cat "$tmp/block.out")"
for text in "modelroute/assistant created" "tenant/demo configured" \
  '"object":"chat.completion"' "Canary:    chat-v2 (stable chat-v1)" \
  "Reason:    checking the dashboard first" "Reason:    step 2 without waiting" \
  "try it again later" "route/assistant deleted"; do
  expect_contains "$tmp/block.out" "$text"
done

kill -TERM "$pid"
wait "$pid"
rc=$?
[ "$rc" -eq 0 ] || fail "SIGTERM: exit status $rc: $(cat "$tmp/err")"
finish docs_versions
