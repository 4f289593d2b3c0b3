# Shared helpers for the shell integration tests (sourced, not run).
# Each test sets up `tmp`, calls fail/expect_contains, and ends with finish.
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
failures=0

fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}

expect_contains() {  # file, text
  grep -qF -- "$2" "$1" || fail "expected '$2' in $(basename "$1"):
$(cat "$1")"
}

finish() {  # name
  if [ "$failures" -ne 0 ]; then
    echo "$failures failure(s)"
    exit 1
  fi
  echo "$1: all checks passed"
}

# Starts `$bin serve --config FILE` in the background and waits until its
# replicas are ready and it has printed the tenants' keys: sets pid, url
# (http://127.0.0.1:PORT, empty when serve did not start; its stderr is in
# $tmp/err) and key (the first tenant's API key).
start_serve() {  # config file
  "$bin" serve --config "$1" >"$tmp/out" 2>"$tmp/err" &
  pid=$!
  url=""
  key=""
  for _ in $(seq 1 600); do
    key=$(grep -o 'key: gs-[A-Za-z0-9_-]*' "$tmp/out" 2>/dev/null | head -1 || true)
    [ -n "$key" ] && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.05
  done
  key=${key#key: }
  url=$(grep -o 'http://127.0.0.1:[0-9]*' "$tmp/out" 2>/dev/null | head -1 || true)
}
