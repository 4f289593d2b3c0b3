#include "serving/router.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "common/random.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "serving/latency_model.h"
#include "serving/prompt_blocks.h"
#include "serving/request.h"
#include "serving/routers/lru_map.h"

namespace gpusched::serving {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr uint64_t kSeed = 20240611;

std::unique_ptr<Router> MustMake(const RouterConfig& config,
                                 const LatencyModel* latency = nullptr,
                                 uint64_t seed = kSeed) {
  absl::StatusOr<std::unique_ptr<Router>> router =
      MakeRouter(config, latency, seed);
  EXPECT_TRUE(router.ok()) << router.status();
  return router.ok() ? std::move(router).value() : nullptr;
}

std::unique_ptr<Router> MustMake(const std::string& policy,
                                 const LatencyModel* latency = nullptr,
                                 uint64_t seed = kSeed) {
  RouterConfig config;
  config.policy = policy;
  return MustMake(config, latency, seed);
}

// A small model with round numbers: prefill 10 ms + 0.1 ms/token, decode
// 5 ms + 0.1 ms/sequence + 0.1 us/context token, 100k KV tokens.
LatencyModel TestModel() {
  LatencyModel m;
  m.model = "test";
  m.gpu = "test-gpu";
  m.p0 = 0.010;
  m.p1 = 1e-4;
  m.d0 = 0.005;
  m.d1 = 1e-4;
  m.d2 = 1e-7;
  m.kv_capacity_tokens = 100000;
  return m;
}

ReplicaLoad Idle(ReplicaId id, int outstanding = 0) {
  return {.id = id, .outstanding = outstanding, .max_outstanding = 1000};
}

// ---------------------------------------------------------------- MakeRouter

TEST(MakeRouterTest, NamesListEveryPolicy) {
  EXPECT_THAT(RouterNames(),
              ElementsAre("round-robin", "least-outstanding", "power-of-two",
                          "prefix-affinity", "kv-aware", "latency-predictive",
                          "session-affinity"));
  const LatencyModel model = TestModel();
  for (const std::string& name : RouterNames()) {
    std::unique_ptr<Router> router = MustMake(name, &model);
    ASSERT_NE(router, nullptr) << name;
    EXPECT_EQ(router->name(), name);
  }
}

TEST(MakeRouterTest, RejectsBadConfig) {
  struct Case {
    std::string name;
    std::function<void(RouterConfig&)> mutate;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"unknown policy", [](RouterConfig& c) { c.policy = "fastest"; },
       "unknown policy 'fastest'; known: round-robin, least-outstanding, "
       "power-of-two, prefix-affinity, kv-aware, latency-predictive, "
       "session-affinity"},
      {"epsilon zero", [](RouterConfig& c) { c.load_bound_epsilon = 0; },
       "load_bound_epsilon must be > 0"},
      {"epsilon negative", [](RouterConfig& c) { c.load_bound_epsilon = -1; },
       "load_bound_epsilon"},
      {"epsilon nan", [](RouterConfig& c) { c.load_bound_epsilon = NAN; },
       "load_bound_epsilon"},
      {"affinity blocks", [](RouterConfig& c) { c.affinity_blocks = 0; },
       "affinity_blocks must be > 0"},
      {"prefix capacity", [](RouterConfig& c) { c.prefix_index_capacity = 0; },
       "prefix_index_capacity must be > 0"},
      {"virtual nodes", [](RouterConfig& c) { c.virtual_nodes = 0; },
       "virtual_nodes"},
      {"block size", [](RouterConfig& c) { c.prefix_block_chars = 4; },
       "prefix_block_chars must be in 8..65536, got 4"},
      {"session capacity", [](RouterConfig& c) { c.session_capacity = -5; },
       "session_capacity must be > 0"},
      {"unknown fallback", [](RouterConfig& c) { c.session_fallback = "x"; },
       "session_fallback: unknown policy 'x'; known: round-robin"},
      {"recursive fallback",
       [](RouterConfig& c) { c.session_fallback = "session-affinity"; },
       "cannot be session-affinity"},
      {"kv weights zero",
       [](RouterConfig& c) { c.kv_weight = c.queue_weight = 0; }, "not both 0"},
      {"kv weight negative", [](RouterConfig& c) { c.kv_weight = -1; },
       "kv_weight"},
      {"chunk", [](RouterConfig& c) { c.ttft.prefill_chunk_tokens = 0; },
       "prefill_chunk_tokens"},
      {"kv full", [](RouterConfig& c) { c.ttft.kv_full_fraction = 1.5; },
       "kv_full_fraction"},
      {"output", [](RouterConfig& c) { c.ttft.default_output_tokens = 0; },
       "default_output_tokens"},
  };
  for (const Case& tc : cases) {
    RouterConfig config;
    tc.mutate(config);
    absl::StatusOr<std::unique_ptr<Router>> router =
        MakeRouter(config, nullptr, kSeed);
    ASSERT_FALSE(router.ok()) << tc.name;
    EXPECT_EQ(router.status().code(), absl::StatusCode::kInvalidArgument)
        << tc.name;
    EXPECT_THAT(router.status().message(), HasSubstr(tc.message)) << tc.name;
  }
}

TEST(MakeRouterTest, LatencyPredictiveNeedsAModel) {
  RouterConfig config;
  config.policy = "latency-predictive";
  absl::StatusOr<std::unique_ptr<Router>> router =
      MakeRouter(config, nullptr, kSeed);
  EXPECT_EQ(router.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(router.status().message(), HasSubstr("latency model"));

  config.policy = "session-affinity";
  config.session_fallback = "latency-predictive";
  router = MakeRouter(config, nullptr, kSeed);
  EXPECT_EQ(router.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(router.status().message(), HasSubstr("session_fallback"));

  const LatencyModel model = TestModel();
  EXPECT_TRUE(MakeRouter(config, &model, kSeed).ok());
}

// --------------------------------------------------- table: one Pick each

struct PickCase {
  std::string name;
  std::string policy;
  std::vector<ReplicaLoad> replicas;
  int expected;
};

TEST(RouterTableTest, FreshRouterPicks) {
  const std::vector<PickCase> cases = {
      // least-outstanding: outstanding / max_outstanding, then outstanding.
      {"lo fewest",
       "least-outstanding",
       {{.id = 1, .outstanding = 3, .max_outstanding = 8},
        {.id = 2, .outstanding = 1, .max_outstanding = 8},
        {.id = 3, .outstanding = 2, .max_outstanding = 8}},
       1},
      {"lo utilisation beats count",
       "least-outstanding",
       {{.id = 1, .outstanding = 4, .max_outstanding = 16},
        {.id = 2, .outstanding = 2, .max_outstanding = 4}},
       0},
      {"lo equal utilisation then fewer",
       "least-outstanding",
       {{.id = 1, .outstanding = 2, .max_outstanding = 4},
        {.id = 2, .outstanding = 1, .max_outstanding = 2}},
       1},
      {"lo full tie lowest index",
       "least-outstanding",
       {{.id = 9, .outstanding = 1, .max_outstanding = 4},
        {.id = 3, .outstanding = 1, .max_outstanding = 4}},
       0},
      {"lo no cap counts as 1",
       "least-outstanding",
       {{.id = 1, .outstanding = 1, .max_outstanding = 0},
        {.id = 2, .outstanding = 3, .max_outstanding = 8}},
       1},
      // round-robin starts at the lowest replica id.
      {"rr lowest id first", "round-robin", {Idle(7), Idle(3), Idle(5)}, 1},
      // power-of-two with a single candidate.
      {"p2c single", "power-of-two", {Idle(4, 9)}, 0},
      {"p2c two", "power-of-two", {Idle(4, 9), Idle(5, 2)}, 1},
      // kv-aware: kv + normalised queue.
      {"kv lower fraction",
       "kv-aware",
       {{.id = 1, .waiting = 0, .kv_used_fraction = 0.8},
        {.id = 2, .waiting = 0, .kv_used_fraction = 0.2}},
       1},
      {"kv queue breaks equal kv",
       "kv-aware",
       {{.id = 1, .waiting = 4, .kv_used_fraction = 0.5},
        {.id = 2, .waiting = 0, .kv_used_fraction = 0.5}},
       1},
      // costs: 0.1 + 1, 0.6 + 0, 0.3 + 0.5.
      {"kv weighted sum",
       "kv-aware",
       {{.id = 1, .waiting = 10, .kv_used_fraction = 0.1},
        {.id = 2, .waiting = 0, .kv_used_fraction = 0.6},
        {.id = 3, .waiting = 5, .kv_used_fraction = 0.3}},
       1},
      {"kv tokens relative",
       "kv-aware",
       {{.id = 1, .waiting = 0, .kv_tokens = 9000},
        {.id = 2, .waiting = 0, .kv_tokens = 3000}},
       1},
      {"kv unknown falls back to outstanding",
       "kv-aware",
       {{.id = 1, .outstanding = 6, .max_outstanding = 8},
        {.id = 2, .outstanding = 2, .max_outstanding = 8}},
       1},
      {"kv tie fewer outstanding",
       "kv-aware",
       {{.id = 1, .outstanding = 3, .waiting = 0, .kv_used_fraction = 0.5},
        {.id = 2, .outstanding = 1, .waiting = 0, .kv_used_fraction = 0.5}},
       1},
      // latency-predictive.
      {"lp less pending prefill",
       "latency-predictive",
       {{.id = 1,
         .running = 8,
         .kv_tokens = 8000,
         .pending_prefill_tokens = 8000},
        {.id = 2,
         .running = 8,
         .kv_tokens = 8000,
         .pending_prefill_tokens = 500}},
       1},
      {"lp avoids kv-full replica",
       "latency-predictive",
       {{.id = 1,
         .waiting = 4,
         .running = 32,
         .kv_used_fraction = 0.97,
         .pending_prefill_tokens = 0},
        {.id = 2,
         .waiting = 0,
         .running = 32,
         .kv_used_fraction = 0.5,
         .pending_prefill_tokens = 1500}},
       1},
      {"lp unknown running uses outstanding",
       "latency-predictive",
       {{.id = 1, .outstanding = 30}, {.id = 2, .outstanding = 2}},
       1},
      {"lp tie lowest index",
       "latency-predictive",
       {{.id = 5, .outstanding = 2}, {.id = 4, .outstanding = 2}},
       0},
      // Requests without blocks / session fall back to least-outstanding.
      {"prefix no blocks", "prefix-affinity", {Idle(1, 3), Idle(2, 1)}, 1},
      {"session no key", "session-affinity", {Idle(1, 3), Idle(2, 1)}, 1},
  };
  const LatencyModel model = TestModel();
  for (const PickCase& tc : cases) {
    std::unique_ptr<Router> router = MustMake(tc.policy, &model);
    ASSERT_NE(router, nullptr);
    Request request;
    request.input_tokens = 500;
    request.max_output_tokens = 256;
    EXPECT_EQ(router->Pick(request, tc.replicas, 0), tc.expected) << tc.name;
  }
}

// ---------------------------------------------------------------- round-robin

std::vector<ReplicaId> PickIds(Router& router, std::vector<ReplicaLoad> loads,
                               int n) {
  std::vector<ReplicaId> ids;
  for (int i = 0; i < n; ++i) {
    ids.push_back(loads[router.Pick(Request{}, loads, 0)].id);
  }
  return ids;
}

TEST(RoundRobinTest, RotatesOverIdsAndSurvivesMembershipChanges) {
  std::unique_ptr<Router> rr = MustMake("round-robin");
  EXPECT_THAT(PickIds(*rr, {Idle(20), Idle(10), Idle(30)}, 4),
              ElementsAre(10, 20, 30, 10));
  // 20 disappears (stopped, or at its cap): the rotation goes on from 10.
  EXPECT_THAT(PickIds(*rr, {Idle(30), Idle(10)}, 3), ElementsAre(30, 10, 30));
  // 25 joins between 10 and 30; the span order does not matter.
  EXPECT_THAT(PickIds(*rr, {Idle(30), Idle(25), Idle(10)}, 4),
              ElementsAre(10, 25, 30, 10));
  rr->OnReplicaRemoved(10);
  EXPECT_THAT(PickIds(*rr, {Idle(30), Idle(25)}, 3), ElementsAre(25, 30, 25));
}

// -------------------------------------------------------------------- LruMap

// The LRU map against a trivial model: a vector ordered most recent first.
TEST(LruMapTest, MatchesATrivialModel) {
  for (int64_t capacity : {1, 2, 7}) {
    internal::LruMap lru(capacity);
    std::vector<std::pair<uint64_t, ReplicaId>> model;
    Rng rng(kSeed + capacity);
    for (int step = 0; step < 20000; ++step) {
      const uint64_t key = rng.Uniform(12);
      auto it = std::find_if(model.begin(), model.end(),
                             [&](const auto& e) { return e.first == key; });
      switch (rng.Uniform(2)) {
        case 0: {  // Put
          const ReplicaId value = static_cast<ReplicaId>(rng.Uniform(100));
          if (it != model.end()) model.erase(it);
          model.insert(model.begin(), {key, value});
          if (static_cast<int64_t>(model.size()) > capacity) model.pop_back();
          lru.Put(key, value);
          break;
        }
        default: {  // Get
          const std::optional<ReplicaId> got = lru.Get(key);
          ASSERT_EQ(got.has_value(), it != model.end())
              << "step " << step << " capacity " << capacity;
          if (got.has_value()) {
            ASSERT_EQ(*got, it->second);
          }
        }
      }
      ASSERT_EQ(lru.size(), static_cast<int64_t>(model.size()));
    }
  }
}

// --------------------------------------------------------------- power-of-two

TEST(PowerOfTwoTest, NeverPicksTheWorseOfTwo) {
  std::unique_ptr<Router> p2c = MustMake("power-of-two");
  const std::vector<ReplicaLoad> two = {Idle(1, 7), Idle(2, 3)};
  for (int i = 0; i < 1000; ++i) ASSERT_EQ(p2c->Pick(Request{}, two, 0), 1);

  // Five distinct loads: the k-th best is picked iff it is drawn with a worse
  // one, probability (4 - k) / 10; the worst is never picked.
  const std::vector<ReplicaLoad> five = {Idle(1, 4), Idle(2, 0), Idle(3, 3),
                                         Idle(4, 1), Idle(5, 2)};
  std::vector<int> by_rank(5, 0);
  constexpr int kPicks = 20000;
  for (int i = 0; i < kPicks; ++i) {
    ++by_rank[five[p2c->Pick(Request{}, five, 0)].outstanding];
  }
  EXPECT_EQ(by_rank[4], 0);
  for (int rank = 0; rank < 4; ++rank) {
    EXPECT_NEAR(static_cast<double>(by_rank[rank]) / kPicks, (4 - rank) / 10.0,
                0.02)
        << "rank " << rank << " seed " << kSeed;
  }
}

TEST(PowerOfTwoTest, SeedReproducible) {
  std::vector<ReplicaLoad> loads;
  for (ReplicaId id = 0; id < 8; ++id) loads.push_back(Idle(id));
  auto sequence = [&](uint64_t seed) {
    std::unique_ptr<Router> p2c = MustMake("power-of-two", nullptr, seed);
    std::vector<int> picks;
    for (int i = 0; i < 200; ++i) picks.push_back(p2c->Pick({}, loads, 0));
    return picks;
  };
  EXPECT_EQ(sequence(7), sequence(7));
  EXPECT_NE(sequence(7), sequence(8));
  // Equal loads go to the lower index of the two drawn: never the last.
  const std::vector<int> picks = sequence(7);
  EXPECT_EQ(std::count(picks.begin(), picks.end(), 7), 0);
}

// ------------------------------------------------------------ prefix-affinity

// The request views `blocks`, which must outlive it.
Request WithBlocks(const std::vector<uint64_t>& blocks) {
  Request r;
  r.input_tokens = 16 * static_cast<int32_t>(blocks.size());
  r.prefix_blocks = blocks;
  return r;
}

// Picks and dispatches, bumping the chosen replica's outstanding count.
int Dispatch(Router& router, const Request& request,
             std::vector<ReplicaLoad>& loads) {
  const int i = router.Pick(request, loads, 0);
  router.OnDispatched(request, loads[i].id);
  ++loads[i].outstanding;
  return i;
}

TEST(PrefixAffinityTest, SamePrefixSameReplica) {
  std::unique_ptr<Router> router = MustMake("prefix-affinity");
  std::vector<ReplicaLoad> loads = {Idle(1), Idle(2), Idle(3), Idle(4)};
  const std::vector<uint64_t> a = {11, 12, 13};
  const std::vector<uint64_t> b = {21, 22, 23, 24, 25};
  const int ia = Dispatch(*router, WithBlocks(a), loads);
  const int ib = Dispatch(*router, WithBlocks(b), loads);
  // The replicas are back to equal loads; each prefix returns home, also
  // when the prompt continues past the shared prefix.
  for (ReplicaLoad& l : loads) l.outstanding = 5;
  EXPECT_EQ(router->Pick(WithBlocks(a), loads, 0), ia);
  EXPECT_EQ(router->Pick(WithBlocks({11, 12, 13, 99}), loads, 0), ia);
  EXPECT_EQ(router->Pick(WithBlocks(b), loads, 0), ib);
  // A new prefix with the same first affinity_blocks blocks hashes to the
  // same ring position as `b` did on a fresh router.
  std::unique_ptr<Router> fresh = MustMake("prefix-affinity");
  EXPECT_EQ(fresh->Pick(WithBlocks({21, 22, 23, 24, 77}), loads, 0),
            fresh->Pick(WithBlocks({21, 22, 23, 24, 88}), loads, 0));
}

TEST(PrefixAffinityTest, LongestMatchWins) {
  std::unique_ptr<Router> router = MustMake("prefix-affinity");
  const std::vector<ReplicaLoad> loads = {Idle(1), Idle(2), Idle(3)};
  router->OnDispatched(WithBlocks({1, 2, 3, 4, 5, 6}), 1);
  router->OnDispatched(WithBlocks({1, 2, 3, 4}), 2);  // 1..4 last went to 2
  EXPECT_EQ(router->Pick(WithBlocks({1, 2, 3, 4, 5, 6, 7}), loads, 0), 0);
  EXPECT_EQ(router->Pick(WithBlocks({1, 2, 3, 4, 50}), loads, 0), 1);
  // The best match not among the candidates (at its cap): the next longest.
  const std::vector<ReplicaLoad> without_1 = {Idle(2), Idle(3)};
  EXPECT_EQ(router->Pick(WithBlocks({1, 2, 3, 4, 5, 6, 7}), without_1, 0), 0);
}

// A match shorter than the prefix key (affinity_blocks blocks: a system
// prompt that many conversations share) does not count: the key's home
// decides, the same on a gateway that never saw the prefix.
TEST(PrefixAffinityTest, MatchShorterThanTheKeyGoesHome) {
  const std::vector<ReplicaLoad> loads = {Idle(1), Idle(2), Idle(3)};
  for (uint64_t tail = 100; tail < 120; ++tail) {
    const std::vector<uint64_t> blocks = {1, 2, tail, tail + 1000};
    const Request r = WithBlocks(blocks);  // points into `blocks`
    std::unique_ptr<Router> fresh = MustMake("prefix-affinity");
    const int home = fresh->Pick(r, loads, 0);
    for (ReplicaId other = 1; other <= 3; ++other) {
      std::unique_ptr<Router> router = MustMake("prefix-affinity");
      router->OnDispatched(WithBlocks({1, 2, 77}), other);
      EXPECT_EQ(router->Pick(r, loads, 0), home) << tail << " " << other;
    }
  }
}

TEST(PrefixAffinityTest, HotPrefixSpreadsWithinTheBound) {
  RouterConfig config;
  config.policy = "prefix-affinity";
  const double eps = config.load_bound_epsilon;
  std::unique_ptr<Router> router = MustMake(config);
  std::vector<ReplicaLoad> loads = {Idle(1), Idle(2), Idle(3), Idle(4)};
  const std::vector<uint64_t> hot = {7, 8, 9, 10, 11, 12};
  const int first = Dispatch(*router, WithBlocks(hot), loads);
  // The second request sticks: load 1 is within ceil(1.25 * 2 / 4) = 1.
  EXPECT_EQ(Dispatch(*router, WithBlocks(hot), loads), first);
  // The third does not: load 2 is over ceil(1.25 * 3 / 4) = 1.
  EXPECT_NE(Dispatch(*router, WithBlocks(hot), loads), first);
  int64_t total = 3;
  for (int k = 3; k < 1000; ++k) {
    Dispatch(*router, WithBlocks(hot), loads);
    ++total;
    const double mean = static_cast<double>(total) / loads.size();
    const int64_t limit = static_cast<int64_t>(std::ceil((1 + eps) * mean)) + 1;
    for (const ReplicaLoad& l : loads) {
      ASSERT_LE(l.outstanding, limit) << "request " << k << " replica " << l.id;
    }
  }
  // Bounded loads caps the busiest, not the idlest: the overflow fills the
  // replicas in ring order, so every replica took part.
  for (const ReplicaLoad& l : loads) EXPECT_GT(l.outstanding, 0) << l.id;
}

TEST(PrefixAffinityTest, EveryPickWithinBoundUnderChurn) {
  RouterConfig config;
  config.policy = "prefix-affinity";
  config.load_bound_epsilon = 0.1;
  std::unique_ptr<Router> router = MustMake(config);
  Rng rng(kSeed);
  std::vector<ReplicaLoad> loads;
  for (ReplicaId id = 1; id <= 6; ++id) loads.push_back(Idle(id));
  std::vector<std::vector<uint64_t>> prefixes;
  for (uint64_t p = 0; p < 5; ++p) {
    prefixes.push_back({p * 100 + 1, p * 100 + 2, p * 100 + 3});
  }
  for (int k = 0; k < 5000; ++k) {
    // Prefix 0 is hot (half the traffic).
    const auto& blocks = prefixes[rng.Uniform(2) == 0 ? 0 : rng.Uniform(5)];
    int64_t total = 1;
    for (const ReplicaLoad& l : loads) total += l.outstanding;
    const int64_t bound = static_cast<int64_t>(
        std::ceil(1.1 * static_cast<double>(total) / loads.size() - 1e-9));
    const int i = Dispatch(*router, WithBlocks(blocks), loads);
    ASSERT_LE(loads[i].outstanding - 1, bound)
        << "step " << k << " seed " << kSeed;
    // Complete about as many as arrive.
    ReplicaLoad& done = loads[rng.Uniform(loads.size())];
    if (done.outstanding > 0 && rng.Uniform(10) < 9) --done.outstanding;
  }
}

TEST(PrefixAffinityTest, IndexCapacityIsRespected) {
  RouterConfig config;
  config.policy = "prefix-affinity";
  config.prefix_index_capacity = 2;
  const std::vector<ReplicaLoad> loads = {Idle(1), Idle(2), Idle(3)};
  const std::vector<uint64_t> x_blocks = {1000};
  const Request x = WithBlocks(x_blocks);
  const int ring = MustMake(config)->Pick(x, loads, 0);
  const ReplicaId elsewhere = loads[(ring + 1) % 3].id;

  std::unique_ptr<Router> router = MustMake(config);
  router->OnDispatched(x, elsewhere);
  EXPECT_EQ(loads[router->Pick(x, loads, 0)].id, elsewhere);
  router->OnDispatched(WithBlocks({2000}), 1);
  EXPECT_EQ(loads[router->Pick(x, loads, 0)].id, elsewhere);
  router->OnDispatched(WithBlocks({3000}), 1);  // evicts 1000
  EXPECT_EQ(router->Pick(x, loads, 0), ring);

  // A long prompt keeps its leading blocks (written last, so most recent).
  router->OnDispatched(WithBlocks({1000, 4000, 5000}), elsewhere);
  EXPECT_EQ(loads[router->Pick(x, loads, 0)].id, elsewhere);
}

TEST(PrefixAffinityTest, RemovedReplicaMovesOnlyItsKeys) {
  std::unique_ptr<Router> router = MustMake("prefix-affinity");
  const std::vector<ReplicaLoad> four = {Idle(1), Idle(2), Idle(3), Idle(4)};
  const std::vector<ReplicaLoad> three = {Idle(1), Idle(2), Idle(3)};
  std::vector<ReplicaId> before;
  std::vector<std::vector<uint64_t>> keys;
  for (uint64_t k = 0; k < 400; ++k) keys.push_back({k * 7919 + 1});
  for (const auto& key : keys) {
    before.push_back(four[router->Pick(WithBlocks(key), four, 0)].id);
  }
  // Every replica owns a fair share of the ring (100 points each).
  for (ReplicaId id = 1; id <= 4; ++id) {
    EXPECT_GT(std::count(before.begin(), before.end(), id), 50) << id;
  }
  router->OnDispatched(WithBlocks(keys[0]), 4);  // an index entry on 4
  router->OnReplicaRemoved(4);
  std::unique_ptr<Router> fresh = MustMake("prefix-affinity");
  for (size_t k = 0; k < keys.size(); ++k) {
    const ReplicaId after =
        three[router->Pick(WithBlocks(keys[k]), three, 0)].id;
    if (before[k] != 4) {
      EXPECT_EQ(after, before[k]) << "key " << k;
    }
    EXPECT_EQ(after, three[fresh->Pick(WithBlocks(keys[k]), three, 0)].id);
  }
}

// --------------------------------------------------------- latency-predictive

TEST(PredictTtftTest, MatchesTheDocumentedFormula) {
  const LatencyModel m = TestModel();
  Request request;
  request.input_tokens = 1000;
  request.max_output_tokens = 200;
  ReplicaLoad r = {.id = 1,
                   .waiting = 0,
                   .running = 10,
                   .kv_tokens = 20000,
                   .pending_prefill_tokens = 3000};
  // ahead 4000 = 2 chunks of 2048; prefill 0.01 + 0.4; decode step
  // 0.005 + 10e-4 + 20000e-7 = 0.008.
  const double base = 0.410 + 2 * 0.008;
  EXPECT_NEAR(PredictTtftSeconds(m, request, r), base, 1e-12);

  // KV full: wait for waiting + 1 = 4 of 10 running to finish, L = 200:
  // 4 * 200 / 11 decode steps.
  r.kv_used_fraction = 0.96;
  r.waiting = 3;
  EXPECT_NEAR(PredictTtftSeconds(m, request, r), base + 4.0 * 200 / 11 * 0.008,
              1e-12);

  // Full because the queued prompts do not fit in the free KV tokens.
  r.kv_used_fraction = -1;
  r.kv_tokens = 97000;
  r.waiting = 0;
  const double step = 0.005 + 10e-4 + 97000e-7;
  EXPECT_NEAR(PredictTtftSeconds(m, request, r),
              0.410 + 2 * step + 1.0 * 200 / 11 * step, 1e-12);

  // Unknown engine state: running = outstanding, KV 0, never full.
  const ReplicaLoad unknown = {.id = 2, .outstanding = 4};
  EXPECT_NEAR(PredictTtftSeconds(m, request, unknown),
              0.01 + 0.1 + (0.005 + 4e-4), 1e-12);

  // A larger chunk means fewer decode steps interleaved.
  TtftPredictorOptions one_chunk;
  one_chunk.prefill_chunk_tokens = 8192;
  r = {.id = 1,
       .waiting = 0,
       .running = 10,
       .kv_tokens = 20000,
       .pending_prefill_tokens = 3000};
  EXPECT_NEAR(PredictTtftSeconds(m, request, r, one_chunk), 0.410 + 0.008,
              1e-12);
}

TEST(LatencyPredictiveTest, PrefersLessQueuedPrefillUntilKvIsFull) {
  const LatencyModel model = TestModel();
  std::unique_ptr<Router> router = MustMake("latency-predictive", &model);
  Request request;
  request.input_tokens = 2000;
  request.max_output_tokens = 256;
  std::vector<ReplicaLoad> loads = {
      {.id = 1,
       .waiting = 0,
       .running = 16,
       .kv_used_fraction = 0.5,
       .kv_tokens = 50000,
       .pending_prefill_tokens = 6000},
      {.id = 2,
       .waiting = 0,
       .running = 16,
       .kv_used_fraction = 0.5,
       .kv_tokens = 50000,
       .pending_prefill_tokens = 1000},
  };
  EXPECT_EQ(router->Pick(request, loads, 0), 1);
  // Replica 2 fills its KV cache and queues: replica 1 is now faster.
  loads[1].kv_used_fraction = 0.98;
  loads[1].kv_tokens = 98000;
  loads[1].waiting = 6;
  EXPECT_EQ(router->Pick(request, loads, 0), 0);
}

// ----------------------------------------------------------- session-affinity

Request InSession(uint64_t session) {
  Request r;
  r.session = session;
  return r;
}

// Replicas with stable keys (as the gateway gives them: a hash of the
// endpoint) and ids of one gateway's own.
std::vector<ReplicaLoad> Keyed(ReplicaId first_id) {
  std::vector<ReplicaLoad> loads;
  for (uint64_t k = 0; k < 4; ++k) {
    ReplicaLoad l = Idle(first_id + static_cast<ReplicaId>(k));
    l.key = Mix64(1000 + k);
    loads.push_back(l);
  }
  return loads;
}

TEST(SessionAffinityTest, NewSessionsGoHomeOnEveryGateway) {
  // Two gateways number the same replicas differently; a new session goes
  // to the same replica (by key) on both, and sessions spread.
  std::unique_ptr<Router> one = MustMake("session-affinity");
  std::unique_ptr<Router> two = MustMake("session-affinity");
  const std::vector<ReplicaLoad> a = Keyed(1), b = Keyed(50);
  std::vector<int> used(4, 0);
  for (uint64_t session = 1; session <= 200; ++session) {
    const int i = one->Pick(InSession(Mix64(session)), a, 0);
    EXPECT_EQ(a[i].key, b[two->Pick(InSession(Mix64(session)), b, 0)].key);
    ++used[i];
  }
  for (int n : used) EXPECT_GT(n, 20) << "rendezvous hashing spreads sessions";
}

TEST(SessionAffinityTest, StickyThenRepinnedWhenAbsent) {
  std::unique_ptr<Router> router = MustMake("session-affinity");
  std::vector<ReplicaLoad> loads = Keyed(1);
  const int home = Dispatch(*router, InSession(77), loads);
  // Sticky, also once its replica is the busiest (within its cap).
  for (int k = 0; k < 5; ++k) {
    EXPECT_EQ(Dispatch(*router, InSession(77), loads), home);
  }
  // The home of a new session is skipped while it is over the load bound
  // ceil(1.25 x mean): the session goes elsewhere.
  loads = Keyed(1);
  const int fresh_home = router->Pick(InSession(99), loads, 0);
  loads[fresh_home].outstanding = 10;
  const int i = router->Pick(InSession(99), loads, 0);
  EXPECT_NE(i, fresh_home);

  // The pinned replica absent (stopped or at its cap): re-pinned, and it
  // stays on its new replica when the old one is back.
  loads = Keyed(1);
  std::vector<ReplicaLoad> without;
  for (int k = 0; k < 4; ++k) {
    if (k != home) without.push_back(loads[k]);
  }
  const ReplicaId moved = without[router->Pick(InSession(77), without, 0)].id;
  router->OnDispatched(InSession(77), moved);
  EXPECT_EQ(loads[router->Pick(InSession(77), loads, 0)].id, moved);

  // No session: plain least-outstanding, no stickiness.
  loads = {Idle(1, 5), Idle(2, 1), Idle(3, 3)};
  EXPECT_EQ(Dispatch(*router, Request{}, loads), 1);
  loads[1].outstanding = 9;
  EXPECT_EQ(Dispatch(*router, Request{}, loads), 2);
}

TEST(SessionAffinityTest, CapacityAndFallbackPolicy) {
  RouterConfig config;
  config.policy = "session-affinity";
  config.session_capacity = 1;
  config.session_fallback = "round-robin";
  std::unique_ptr<Router> router = MustMake(config);
  std::vector<ReplicaLoad> loads = Keyed(1);
  auto dispatch = [&](const Request& r) {
    const int i = router->Pick(r, loads, 0);
    router->OnDispatched(r, loads[i].id);
    return i;
  };
  const int home5 = dispatch(InSession(5));
  ++loads[home5].outstanding;
  // Pinned: stays although another replica is now less loaded.
  EXPECT_EQ(dispatch(InSession(5)), home5);
  dispatch(InSession(6));  // evicts session 5's pin (capacity 1)
  // Forgotten: 5 goes to its home again, wherever the load is least.
  for (ReplicaLoad& l : loads) l.outstanding = 0;
  loads[home5].outstanding = 1;
  EXPECT_EQ(dispatch(InSession(5)), home5);
  // Without a session: the fallback, round-robin from the lowest id.
  loads = Keyed(1);
  EXPECT_EQ(dispatch(Request{}), 0);
  EXPECT_EQ(dispatch(Request{}), 1);
}

TEST(PrefixAffinityTest, EveryGatewayPlacesAPrefixOnTheSameReplica) {
  // Fresh routers of two gateways (own ids, the same keys): every prefix
  // has the same home.
  std::unique_ptr<Router> one = MustMake("prefix-affinity");
  std::unique_ptr<Router> two = MustMake("prefix-affinity");
  const std::vector<ReplicaLoad> a = Keyed(1), b = Keyed(77);
  for (uint64_t p = 1; p <= 100; ++p) {
    const std::vector<uint64_t> blocks = {Mix64(p), Mix64(p + 1000)};
    EXPECT_EQ(a[one->Pick(WithBlocks(blocks), a, 0)].key,
              b[two->Pick(WithBlocks(blocks), b, 0)].key);
  }
}

TEST(PromptBlocksTest, SharedTextSharesLeadingHashes) {
  std::vector<uint64_t> x, y, z;
  const std::string system(256, 's');
  PromptBlockHashes(system + "first question, long enough for a block ...", 64,
                    &x);
  PromptBlockHashes(system + "second question, long enough for a block ..", 64,
                    &y);
  PromptBlockHashes(system, 64, &z);
  ASSERT_EQ(x.size(), 4u);  // full blocks only (300 bytes)
  ASSERT_EQ(y.size(), 4u);
  EXPECT_EQ(z, x) << "the shared 256 bytes: the same 4 hashes";
  std::vector<uint64_t> longer;
  PromptBlockHashes(system + std::string(64, 'q'), 64, &longer);
  ASSERT_EQ(longer.size(), 5u);
  EXPECT_TRUE(std::equal(x.begin(), x.end(), longer.begin()));
  // Chained: the same block after a different prefix hashes differently.
  std::vector<uint64_t> other;
  PromptBlockHashes(std::string(64, 't') + std::string(64, 's'), 64, &other);
  EXPECT_NE(other[1], x[1]);
  // Bounded.
  std::vector<uint64_t> huge;
  PromptBlockHashes(std::string(64 * (kMaxPromptBlocks + 10), 'h'), 64, &huge);
  EXPECT_EQ(huge.size(), static_cast<size_t>(kMaxPromptBlocks));
  PromptBlockHashes("short", 64, &huge);
  EXPECT_TRUE(huge.empty());
}

}  // namespace
}  // namespace gpusched::serving
