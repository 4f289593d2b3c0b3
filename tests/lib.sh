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
