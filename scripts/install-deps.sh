#!/usr/bin/env bash
# Installs the Debian 12 packages gpusched builds and tests with, and the
# end-to-end tests' npm packages (tests/e2e, from its package-lock.json).
# Idempotent: packages already present are not touched, apt runs only when
# something is missing, npm only when node_modules is missing or older than
# the lock file. Called by `make build`, `make run` and `make test`.
set -euo pipefail
cd "$(dirname "$0")/.."

PACKAGES=(
  build-essential cmake ninja-build pkg-config clang-format python3
  libabsl-dev libyaml-cpp-dev libcli11-dev nlohmann-json3-dev
  libspdlog-dev libfmt-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  libboost-dev libsqlite3-dev libssl-dev openssl curl
  nodejs npm
  nginx  # bench/gateway_vs_nginx.sh: the peer proxy
)

# node and npm from elsewhere (NodeSource's nodejs bundles npm and conflicts
# with Debian's npm package) count as installed.
installed() {
  case "$1" in
    nodejs) command -v node >/dev/null 2>&1 && return 0 ;;
    npm) command -v npm >/dev/null 2>&1 && return 0 ;;
  esac
  dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"
}

# The end-to-end tests' packages, exactly as locked.
npm_ci() {
  local dir=tests/e2e stamp=tests/e2e/node_modules/.installed
  if [ -f "$stamp" ] && [ ! "$dir/package-lock.json" -nt "$stamp" ] &&
    [ ! "$dir/package.json" -nt "$stamp" ]; then
    return 0
  fi
  echo "install-deps: npm ci in $dir"
  if (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error >/dev/null); then
    touch "$stamp"
  else
    # Building and serving do not need these; the tests that do fail and say so.
    echo "install-deps: npm ci in $dir failed; the end-to-end client tests will fail" >&2
  fi
}

missing=()
for p in "${PACKAGES[@]}"; do
  installed "$p" || missing+=("$p")
done

if [ ${#missing[@]} -eq 0 ]; then
  npm_ci
  exit 0
fi

echo "install-deps: installing ${missing[*]}"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then
    SUDO="sudo"
  else
    echo "install-deps: need root (or sudo) to install: ${missing[*]}" >&2
    exit 1
  fi
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
npm_ci
