// round-robin, least-outstanding and power-of-two: the load-only routers.
// None of them allocates in Pick.
#include <cstdint>
#include <memory>
#include <span>

#include "common/random.h"
#include "serving/router.h"
#include "serving/routers/routers.h"

namespace gpusched::serving::internal {
namespace {

// Rotates over replica ids in increasing order: picks the smallest id above
// the last pick, wrapping to the smallest id. Keyed on ids rather than span
// positions, so a replica joining or leaving (or sitting out at its cap)
// neither skips nor repeats the others. The cursor moves in Pick.
class RoundRobinRouter : public Router {
 public:
  const char* name() const override { return "round-robin"; }

  int Pick(const Request& request, std::span<const ReplicaLoad> replicas,
           Micros now) override {
    int next = -1;   // smallest id > last_
    int lowest = 0;  // smallest id overall
    for (int i = 0; i < static_cast<int>(replicas.size()); ++i) {
      const ReplicaId id = replicas[i].id;
      if (id < replicas[lowest].id) lowest = i;
      if (started_ && id > last_ && (next < 0 || id < replicas[next].id)) {
        next = i;
      }
    }
    const int pick = next >= 0 ? next : lowest;
    last_ = replicas[pick].id;
    started_ = true;
    return pick;
  }

 private:
  bool started_ = false;
  ReplicaId last_ = 0;
};

class LeastOutstandingRouter : public Router {
 public:
  const char* name() const override { return "least-outstanding"; }
  int Pick(const Request& request, std::span<const ReplicaLoad> replicas,
           Micros now) override {
    return LeastOutstandingIndex(replicas);
  }
};

// Power of two choices (Mitzenmacher): two distinct replicas drawn uniformly
// from the seeded Rng (two draws per Pick, also when they tie); the one with
// fewer outstanding requests wins, the lower index on a tie so the choice
// does not depend on draw order.
class PowerOfTwoRouter : public Router {
 public:
  explicit PowerOfTwoRouter(uint64_t seed) : rng_(seed) {}
  const char* name() const override { return "power-of-two"; }

  int Pick(const Request& request, std::span<const ReplicaLoad> replicas,
           Micros now) override {
    const uint64_t n = replicas.size();
    if (n == 1) return 0;
    const int a = static_cast<int>(rng_.Uniform(n));
    int b = static_cast<int>(rng_.Uniform(n - 1));
    if (b >= a) ++b;
    const int lo = a < b ? a : b;
    const int hi = a < b ? b : a;
    return replicas[hi].outstanding < replicas[lo].outstanding ? hi : lo;
  }

 private:
  Rng rng_;
};

}  // namespace

int LeastOutstandingIndex(std::span<const ReplicaLoad> replicas) {
  int best = 0;
  for (int i = 1; i < static_cast<int>(replicas.size()); ++i) {
    const ReplicaLoad& r = replicas[i];
    const ReplicaLoad& b = replicas[best];
    const int64_t r_cap = r.max_outstanding > 0 ? r.max_outstanding : 1;
    const int64_t b_cap = b.max_outstanding > 0 ? b.max_outstanding : 1;
    // r.outstanding / r_cap < b.outstanding / b_cap, without division.
    const int64_t lhs = int64_t{r.outstanding} * b_cap;
    const int64_t rhs = int64_t{b.outstanding} * r_cap;
    if (lhs < rhs || (lhs == rhs && r.outstanding < b.outstanding)) best = i;
  }
  return best;
}

std::unique_ptr<Router> NewRoundRobinRouter() {
  return std::make_unique<RoundRobinRouter>();
}
std::unique_ptr<Router> NewLeastOutstandingRouter() {
  return std::make_unique<LeastOutstandingRouter>();
}
std::unique_ptr<Router> NewPowerOfTwoRouter(uint64_t seed) {
  return std::make_unique<PowerOfTwoRouter>(seed);
}

}  // namespace gpusched::serving::internal
