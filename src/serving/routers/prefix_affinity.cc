// prefix-affinity: send a prompt where its leading KV blocks were sent
// before, unless that replica is over a load bound; then bounded-load
// consistent hashing (Mirrokni, Thorup, Zadimoghaddam, "Consistent Hashing
// with Bounded Loads", SODA 2018). Formulas in docs/routing.md.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "common/random.h"
#include "serving/router.h"
#include "serving/routers/lru_map.h"
#include "serving/routers/routers.h"

namespace gpusched::serving::internal {
namespace {

uint64_t Mix(uint64_t z) { return Mix64(z); }

// A prompt nobody holds goes to its home unless another candidate has less
// work by more than this many times the prompt (docs/routing.md).
constexpr int64_t kHomeSlack = 4;

class PrefixAffinityRouter : public Router {
 public:
  explicit PrefixAffinityRouter(const RouterConfig& config)
      : epsilon_(config.load_bound_epsilon),
        affinity_blocks_(config.affinity_blocks),
        virtual_nodes_(config.virtual_nodes),
        index_(config.prefix_index_capacity) {}

  const char* name() const override { return "prefix-affinity"; }

  int Pick(const Request& request, std::span<const ReplicaLoad> replicas,
           Micros now) override {
    const std::span<const uint64_t> blocks = request.prefix_blocks;
    if (blocks.empty()) return LeastOutstandingIndex(replicas);

    // Stamp this call's candidates (no per-call clear: the map only grows
    // when a replica is seen for the first time).
    ++generation_;
    int64_t total = 1;  // the new request counts toward the mean
    for (int i = 0; i < static_cast<int>(replicas.size()); ++i) {
      const ReplicaId id = replicas[i].id;
      Slot& slot = slots_[id];
      slot.generation = generation_;
      slot.index = i;
      if (!slot.on_ring) AddToRing(id, replicas[i].key, slot);
      if (seen_.size() < replicas.size()) seen_.resize(replicas.size(), 0);
      total += std::max(0, replicas[i].outstanding);
    }
    const int64_t bound =
        LoadBound(total, static_cast<int64_t>(replicas.size()));
    // The bound applies to the load before this request (so a replica ends
    // at most at bound + 1): at light load a second request for a prefix may
    // join the first instead of missing the cache.
    auto fits = [&](int i) {
      return int64_t{std::max(0, replicas[i].outstanding)} <= bound;
    };

    // Prefix credit per candidate: with chained hashes a recorded block at
    // position b means its replica was sent blocks 0..b, so each
    // candidate's deepest recorded block is its cached prefix. OnDispatched
    // writes a prompt's blocks back to front, so a chain's recorded blocks
    // are always a prefix of it: the walk stops at the first unknown block.
    matched_.assign(replicas.size(), 0);
    size_t deepest = 0;
    for (size_t b = 0; b < blocks.size(); ++b) {
      const std::optional<ReplicaId> owner = index_.Get(blocks[b]);
      if (!owner.has_value()) break;
      const int i = CandidateIndex(*owner);
      if (i < 0) continue;  // removed, not ready, or at its cap right now
      matched_[i] = static_cast<int64_t>(b + 1);
      deepest = b + 1;
    }
    // The prefix key: the first affinity_blocks blocks. A match shorter
    // than the key (a system prompt many conversations share) says nothing
    // about where this conversation went: the key's home decides.
    const size_t k = std::min<size_t>(blocks.size(), affinity_blocks_);
    const bool any_match = deepest >= k;
    // Work ahead of the request's first token on each candidate, in prompt
    // tokens: what the replica still has to prefill plus the part of this
    // prompt it does not hold. When some candidate holds part of the prompt,
    // the one with the least work within the load bound wins (equal work
    // goes to the first in ring order). A prompt nobody holds here goes to
    // the first candidate within the bound in ring order of its prefix key:
    // its home (bounded-load consistent hashing, Mirrokni, Thorup,
    // Zadimoghaddam, SODA 2018), the same from every gateway, so that a
    // gateway that has not seen a conversation sends it where another one
    // did.
    const int64_t input = std::max<int32_t>(1, request.input_tokens);
    const int64_t per_block =
        (input + static_cast<int64_t>(blocks.size()) - 1) /
        static_cast<int64_t>(blocks.size());
    const uint64_t key = Mix(blocks[k - 1]);
    const size_t start =
        std::lower_bound(ring_.begin(), ring_.end(), RingPoint{key, 0}) -
        ring_.begin();
    int best = -1, home = -1;
    int64_t best_work = 0, home_work = 0;
    for (size_t step = 0; step < ring_.size(); ++step) {
      const RingPoint& point = ring_[(start + step) % ring_.size()];
      const int i = CandidateIndex(point.replica);
      if (i < 0 || !fits(i) || seen_[i] == generation_) continue;
      seen_[i] = generation_;
      const int64_t uncached =
          std::max<int64_t>(0, input - matched_[i] * per_block);
      const int64_t work =
          std::max<int64_t>(0, replicas[i].pending_prefill_tokens) +
          (any_match ? uncached : 0);
      if (home < 0) {
        home = i;
        home_work = work;
      }
      if (best < 0 || work < best_work) {
        best = i;
        best_work = work;
      }
    }
    // A prompt nobody holds goes home unless another candidate has less
    // work by more than kHomeSlack prompts: under light load every gateway
    // sends a conversation to the same replica; under load it spreads.
    if (!any_match && home >= 0 &&
        home_work <= best_work + kHomeSlack * input) {
      return home;
    }
    // The least loaded candidate always fits, so best is set.
    return best >= 0 ? best : LeastOutstandingIndex(replicas);
  }

  void OnDispatched(const Request& request, ReplicaId replica) override {
    if (removed_.contains(replica)) return;
    // Back to front, so the leading blocks (shared by the most prompts) are
    // the most recent and the last to be evicted.
    const std::span<const uint64_t> blocks = request.prefix_blocks;
    for (auto it = blocks.rbegin(); it != blocks.rend(); ++it) {
      index_.Put(*it, replica);
    }
  }

  // The ring points go now. The index entries go lazily: they match no
  // candidate any more, and no dispatch refreshes them, so they are the
  // first the LRU evicts.
  void OnReplicaRemoved(ReplicaId replica) override {
    removed_.insert(replica);
    slots_.erase(replica);
    std::erase_if(ring_,
                  [&](const RingPoint& p) { return p.replica == replica; });
  }

 private:
  struct RingPoint {
    uint64_t point;
    ReplicaId replica;
    bool operator<(const RingPoint& o) const {
      return point != o.point ? point < o.point : replica < o.replica;
    }
  };
  struct Slot {
    uint64_t generation = 0;
    int index = -1;
    bool on_ring = false;
  };

  // ceil((1 + epsilon) * total / n), tolerant of rounding (1.1 * 10 is
  // 11.000000000000002 in doubles and must stay 11).
  int64_t LoadBound(int64_t total, int64_t n) const {
    const double x =
        (1 + epsilon_) * static_cast<double>(total) / static_cast<double>(n);
    return static_cast<int64_t>(std::ceil(x - 1e-9 * std::max(1.0, x)));
  }

  // Index of `replica` among this Pick's candidates, or -1.
  int CandidateIndex(ReplicaId replica) const {
    auto it = slots_.find(replica);
    if (it == slots_.end() || it->second.generation != generation_) return -1;
    return it->second.index;
  }

  // Points from the replica's stable key (ReplicaLoad::key), so that every
  // gateway draws the same ring.
  void AddToRing(ReplicaId id, uint64_t key, Slot& slot) {
    removed_.erase(id);  // ids are never reused; tolerate a caller that does
    const uint64_t seed = Mix(key != 0 ? key : id);
    for (int v = 0; v < virtual_nodes_; ++v) {
      ring_.push_back({Mix(seed ^ static_cast<uint64_t>(v)), id});
    }
    std::sort(ring_.begin(), ring_.end());
    slot.on_ring = true;
  }

  const double epsilon_;
  const int affinity_blocks_;
  const int virtual_nodes_;
  LruMap index_;  // block hash -> replica it was last dispatched to
  std::vector<RingPoint> ring_;  // sorted by (point, replica)
  absl::flat_hash_map<ReplicaId, Slot> slots_;
  absl::flat_hash_set<ReplicaId> removed_;
  uint64_t generation_ = 0;
  std::vector<int64_t> matched_;  // scratch: prefix blocks per candidate
  std::vector<uint64_t> seen_;    // scratch: candidate visited this Pick
};

}  // namespace

std::unique_ptr<Router> NewPrefixAffinityRouter(const RouterConfig& config) {
  return std::make_unique<PrefixAffinityRouter>(config);
}

}  // namespace gpusched::serving::internal
