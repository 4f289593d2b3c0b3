#!/usr/bin/env bash
# Checks the module rules of docs/architecture.md on the source tree:
#  1. The policy core (control, placement, serving, autoscale, inventory,
#     config) owns no thread, lock or sleep and reads no clock: time comes in
#     as `now`, concurrency belongs to the drivers (runtime, gateway, net).
#  2. The reference engine (src/engine) builds on net/, serving/ and common/
#     only: not api/, runtime/, gateway/ or SQLite.
#  3. net/ sits on common/ only; store/ on common/, config/ and net/ (the
#     etcd client rides net::HttpClient); auth/ (roles, tokens, the audit
#     recorder) on store/, config/, net/ and common/; backends/
#     (one folder per cluster manager) on inventory/, net/, config/ and
#     common/.
#  4. The live driver (runtime/) reaches the data plane and the metrics
#     through its own interfaces (runtime/data_plane.h, driver_metrics.h):
#     it includes nothing from gateway/, api/, cli/ or main/; the data
#     plane (gateway/) never includes the driver (runtime/controller*.h)
#     nor api/.
#  5. No source file in src/ is over 900 lines (a known_long list below
#     holds exceptions being split; it is empty, and a listed file that is
#     short enough must leave it, so the list stays true).
# Usage: layering_test.sh SOURCE_DIR
set -u
src="${1:?usage: layering_test.sh SOURCE_DIR}/src"
failures=0
bad() {
  echo "layering: $*"
  failures=$((failures + 1))
}

# 1. The policy core.
core="control placement serving autoscale inventory config"
forbidden='std::thread|std::jthread|std::mutex|std::shared_mutex|std::condition_variable|absl::Mutex|absl::CondVar|std::async|pthread_|sleep_for|sleep_until|usleep\(|nanosleep|[^_a-zA-Z]sleep\(|steady_clock::now|system_clock::now|high_resolution_clock::now|absl::Now\(|clock_gettime|gettimeofday|time\(nullptr\)|time\(NULL\)|#include <(thread|mutex|shared_mutex|condition_variable|future)>|absl/synchronization/|boost/asio|sqlite3|common/real_clock'
for m in $core; do
  [ -d "$src/$m" ] || continue
  hits=$(grep -rnE "$forbidden" "$src/$m" --include='*.h' --include='*.cc' |
    grep -v '_test\.cc:' || true)
  [ -z "$hits" ] || bad "the policy core ($m/) must own no thread, lock or sleep and read no clock:
$hits"
done

# 2 and 3. Includes of the engine and of net/.
includes_outside() {  # folder allowed-modules...
  local dir="$1"
  shift
  local allowed="$*"
  grep -rhoE '#include "[a-z_]+/' "$src/$dir" --include='*.h' --include='*.cc' |
    sed -E 's/#include "([a-z_]+)\//\1/' | sort -u |
    while read -r m; do
      [ -d "$src/$m" ] || continue # a library (absl/, nlohmann/, ...)
      case " $allowed " in *" $m "*) ;; *) echo "$m" ;; esac
    done
}
out=$(includes_outside engine engine net serving common)
[ -z "$out" ] || bad "src/engine includes modules it must not: $out"
out=$(includes_outside net net common)
[ -z "$out" ] || bad "src/net includes modules above common/: $out"
out=$(includes_outside store store config net common)
[ -z "$out" ] || bad "src/store includes modules it must not: $out"
out=$(includes_outside auth auth store config net common)
[ -z "$out" ] || bad "src/auth includes modules it must not: $out"
out=$(includes_outside backends backends inventory net config common)
[ -z "$out" ] || bad "src/backends includes modules it must not: $out"
grep -qE 'gpusched_(api|runtime|gateway)|SQLite' "$src/engine/CMakeLists.txt" &&
  bad "src/engine/CMakeLists.txt links api, runtime, gateway or SQLite"

# 4. The driver and the data plane.
out=$(includes_outside runtime runtime control placement serving autoscale \
  inventory config net common store backends)
[ -z "$out" ] || bad "src/runtime (the live driver) includes modules it must not: $out"
hits=$(grep -rnE '#include "(runtime/controller|api/)' "$src/gateway" \
  --include='*.h' --include='*.cc' || true)
[ -z "$hits" ] || bad "src/gateway (the data plane) must not include the driver or api/:
$hits"

# 5. File sizes.
# Files known to be over the limit and being split (none today; a listed
# file that is short enough must leave the list).
known_long=""
for f in $(cd "$src" && find . -name '*.h' -o -name '*.cc' | sed 's|^\./||' | sort); do
  n=$(wc -l <"$src/$f")
  listed=no
  case " $known_long " in *" $f "*) listed=yes ;; esac
  if [ "$n" -gt 900 ] && [ "$listed" = no ]; then
    bad "$f has $n lines (over 900): split it"
  elif [ "$n" -le 900 ] && [ "$listed" = yes ]; then
    bad "$f has $n lines now: take it off known_long in this script"
  fi
done
for f in $known_long; do
  [ -f "$src/$f" ] || bad "$f is listed in known_long but does not exist"
done

if [ "$failures" -gt 0 ]; then
  echo "layering: $failures problem(s)"
  exit 1
fi
echo "layering: ok (core: $core; engine on net, serving, common; net on common; store on config, net, common; auth on store, config, net, common; backends on inventory, net, config, common; runtime not on gateway or api)"
