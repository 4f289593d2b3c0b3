#!/usr/bin/env bash
# Installs the Debian 12 packages gpusched builds and tests with, the
# dashboard's npm packages (web/: uPlot, embedded into the binary at build
# time) and the end-to-end tests' (tests/e2e: the OpenAI client,
# playwright-core), each from its package-lock.json.
# Idempotent: packages already present are not touched, apt runs only when
# something is missing, npm only when node_modules is missing or older than
# the lock file. Called by `make build`, `make run` and `make test`.
set -euo pipefail
cd "$(dirname "$0")/.."

PACKAGES=(
  build-essential cmake ninja-build pkg-config clang-format python3
  clang  # tests/thread_safety_test.sh: -Wthread-safety; the sanitizer builds
  libclang-rt-14-dev  # ASan, UBSan, TSan and libFuzzer runtimes (only recommended by clang)
  libabsl-dev libyaml-cpp-dev libcli11-dev nlohmann-json3-dev
  libspdlog-dev libfmt-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  libboost-dev libsqlite3-dev libssl-dev openssl curl
  nodejs npm
  nginx  # bench/gateway_vs_nginx.sh: the peer proxy
  chromium  # tests/dashboard_test.sh: the headless browser playwright drives
  stress-ng  # scripts/stress-test.sh: CPU hogs beside make test
  slurm-wlm munge iproute2 util-linux  # tests/slurm_live_test.sh: a real Slurm cluster in network namespaces
  etcd-server etcd-client  # the HA store (tests/etcd/: a 3-member cluster on loopback ports)
  haproxy  # deploy/haproxy/: the load balancer in front of several instances
  nftables  # tests/ha_live_test.sh: cut an instance off from etcd
  prometheus  # deploy/prometheus/: promtool check/test rules; the alerts end-to-end test's Prometheus
  prometheus-alertmanager  # tests/alerts_live_test.sh: routes the fired alerts to the test's webhook
  ccache  # repeated builds on one machine (picked up by CMake when present)
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

# The npm packages of DIR, exactly as locked.
npm_ci() {  # dir, what fails without them
  local dir=$1 stamp=$1/node_modules/.installed
  if [ -f "$stamp" ] && [ ! "$dir/package-lock.json" -nt "$stamp" ] &&
    [ ! "$dir/package.json" -nt "$stamp" ]; then
    return 0
  fi
  echo "install-deps: npm ci in $dir"
  if (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error >/dev/null); then
    touch "$stamp"
  else
    echo "install-deps: npm ci in $dir failed; $2" >&2
  fi
}
npm_all() {
  # The build embeds uPlot from web/node_modules and fails without it.
  npm_ci web "the build will fail (it embeds web/node_modules/uplot)"
  # Building and serving do not need these; the tests that do fail and say so.
  npm_ci tests/e2e "the end-to-end client and dashboard tests will fail"
}

missing=()
for p in "${PACKAGES[@]}"; do
  installed "$p" || missing+=("$p")
done

if [ ${#missing[@]} -eq 0 ]; then
  npm_all
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
npm_all
