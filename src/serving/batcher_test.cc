#include "serving/batcher.h"

#include <algorithm>
#include <string>
#include <vector>

#include "common/random.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gpusched::serving {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

Batcher MakeBatcher(BatcherConfig config) {
  absl::StatusOr<Batcher> b = Batcher::Create(std::move(config));
  EXPECT_TRUE(b.ok()) << b.status();
  return *std::move(b);
}

TEST(BatcherConfigTest, RejectsBadKnobsByName) {
  struct Case {
    std::string name;
    BatcherConfig config;
    std::string error;  // empty: valid
  };
  const std::vector<Case> cases = {
      {"defaults", {}, ""},
      {"full", {8, 100, {2, 4, 8}, 16}, ""},
      {"zero max", {0, 0, {}, 0}, "max_batch_size"},
      {"negative delay", {4, -1, {}, 0}, "max_queue_delay_microseconds"},
      {"preferred above max", {4, 0, {2, 5}, 0}, "preferred_batch_size 5"},
      {"preferred zero", {4, 0, {0}, 0}, "preferred_batch_size 0"},
      {"preferred unsorted", {8, 0, {4, 2}, 0}, "strictly ascending"},
      {"preferred duplicate", {8, 0, {4, 4}, 0}, "strictly ascending"},
      {"negative queue", {4, 0, {}, -1}, "max_queue_size"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    absl::Status s = ValidateBatcherConfig(c.config);
    if (c.error.empty()) {
      EXPECT_TRUE(s.ok()) << s;
      EXPECT_TRUE(Batcher::Create(c.config).ok());
    } else {
      EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
      EXPECT_THAT(std::string(s.message()), HasSubstr(c.error));
      EXPECT_FALSE(Batcher::Create(c.config).ok());
    }
  }
}

// One rule case: requests arrive at `arrivals` (ids 1, 2, ...), then
// NextDeadline is read and TakeBatch runs at `take_at`.
TEST(BatcherTest, RuleTable) {
  struct Case {
    std::string name;
    BatcherConfig config;
    std::vector<Micros> arrivals;
    Micros take_at;
    Micros deadline;
    int batch;
  };
  const std::vector<Case> cases = {
      {"empty", {4, 100, {}, 0}, {}, 50, kNever, 0},
      {"no delay batches all pending", {4, 0, {}, 0}, {0, 1, 2}, 2, 0, 3},
      {"no delay caps at max", {4, 0, {}, 0}, {0, 0, 0, 0, 0, 0}, 0, 0, 4},
      {"waits for delay", {4, 100, {}, 0}, {0, 10}, 50, 100, 0},
      {"delay reached sends largest", {4, 100, {}, 0}, {0, 10}, 100, 100, 2},
      {"delay long past", {4, 100, {}, 0}, {0, 10, 20}, 1000, 100, 3},
      {"full batch before delay", {4, 100, {}, 0}, {0, 10, 20, 30}, 30, 30, 4},
      {"more than full", {4, 100, {}, 0}, {0, 1, 2, 3, 4, 5}, 5, 3, 4},
      {"preferred formed early", {8, 100, {2, 4}, 0}, {0, 10, 20}, 20, 10, 2},
      {"largest preferred that fits",
       {8, 100, {2, 4}, 0},
       {0, 1, 2, 3, 4},
       4,
       1,
       4},
      {"below smallest preferred waits",
       {8, 100, {3, 6}, 0},
       {0, 5},
       50,
       100,
       0},
      {"below preferred after delay sends all",
       {8, 100, {3, 6}, 0},
       {0, 5},
       100,
       100,
       2},
      {"preferred beats delay rule",
       {8, 100, {3, 6}, 0},
       {0, 1, 2, 3, 4},
       500,
       2,
       3},
      {"max wins over preferred",
       {4, 100, {3}, 0},
       {0, 1, 2, 3, 4, 5, 6},
       6,
       2,
       4},
      {"preferred equal to max", {4, 100, {2, 4}, 0}, {0, 1, 2, 3}, 3, 1, 4},
      {"max 1", {1, 100, {}, 0}, {7, 8}, 7, 7, 1},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    Batcher b = MakeBatcher(c.config);
    RequestId id = 1;
    for (Micros t : c.arrivals) ASSERT_TRUE(b.Add(id++, t));
    EXPECT_EQ(b.NextDeadline(), c.deadline);
    std::vector<RequestId> batch = b.TakeBatch(c.take_at);
    ASSERT_EQ(static_cast<int>(batch.size()), c.batch);
    for (int i = 0; i < c.batch; ++i) EXPECT_EQ(batch[i], RequestId(i + 1));
    EXPECT_EQ(b.pending(), static_cast<int>(c.arrivals.size()) - c.batch);
  }
}

TEST(BatcherTest, QueueBoundRejectsAndFrees) {
  Batcher b = MakeBatcher({4, 1000, {}, 2});
  EXPECT_TRUE(b.Add(1, 0));
  EXPECT_TRUE(b.Add(2, 0));
  EXPECT_FALSE(b.Add(3, 0));
  EXPECT_EQ(b.pending(), 2);
  EXPECT_THAT(b.TakeBatch(1000), ElementsAre(1, 2));
  EXPECT_TRUE(b.Add(4, 1000));
}

TEST(BatcherTest, RemoveKeepsOrderAndMovesDeadline) {
  Batcher b = MakeBatcher({4, 100, {}, 0});
  b.Add(1, 0);
  b.Add(2, 30);
  b.Add(3, 60);
  EXPECT_EQ(b.NextDeadline(), 100);
  EXPECT_TRUE(b.Remove(1));
  EXPECT_FALSE(b.Remove(1));
  EXPECT_EQ(b.NextDeadline(), 130);
  EXPECT_THAT(b.TakeBatch(129), IsEmpty());
  EXPECT_THAT(b.TakeBatch(130), ElementsAre(2, 3));
  EXPECT_EQ(b.NextDeadline(), kNever);
}

// A trivial model of the rules over a plain vector, to check TakeBatch.
int ExpectedSize(const BatcherConfig& c, const std::vector<Micros>& arrivals,
                 Micros now) {
  const int n = static_cast<int>(arrivals.size());
  if (n == 0) return 0;
  if (n >= c.max_batch_size) return c.max_batch_size;
  int best = 0;
  for (int p : c.preferred_batch_sizes) {
    if (p <= n) best = std::max(best, p);
  }
  if (best > 0) return best;
  if (now - arrivals.front() >= c.max_queue_delay_microseconds) return n;
  return 0;
}

// Seeded random workloads: arrivals, cancellations and instances that free
// up at random times, driven exactly as a replica drives its batcher.
TEST(BatcherTest, RandomizedInvariants) {
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    SCOPED_TRACE(testing::Message() << "seed=" << seed);
    Rng rng(seed);
    BatcherConfig config;
    config.max_batch_size = 1 + static_cast<int>(rng.Uniform(8));
    config.max_queue_delay_microseconds =
        rng.Uniform(4) == 0 ? 0 : static_cast<Micros>(rng.Uniform(500));
    for (int s = 1; s <= config.max_batch_size; ++s) {
      if (rng.Uniform(3) == 0) config.preferred_batch_sizes.push_back(s);
    }
    config.max_queue_size =
        rng.Uniform(3) == 0 ? 1 + static_cast<int>(rng.Uniform(20)) : 0;
    const int instances = 1 + static_cast<int>(rng.Uniform(3));
    const Micros mean_gap = 1 + static_cast<Micros>(rng.Uniform(200));
    const Micros mean_service = 1 + static_cast<Micros>(rng.Uniform(1500));
    Batcher b = MakeBatcher(config);

    // Model state.
    std::vector<RequestId> model_ids;
    std::vector<Micros> model_arrivals;
    std::vector<RequestId> accepted;  // in arrival order, minus removed
    std::vector<RequestId> removed;
    std::vector<RequestId> dispatched;
    std::vector<Micros> instance_free_at(instances, 0);

    Micros now = 0;
    Micros next_arrival = 0;
    RequestId next_id = 1;
    int operations = 0;
    while (operations < 12000) {
      // Event time: next arrival, next instance release, or the batcher's
      // deadline when an instance is free.
      Micros t = next_arrival;
      bool any_free = false;
      for (Micros f : instance_free_at) {
        if (f > now) t = std::min(t, f);
        if (f <= now) any_free = true;
      }
      if (any_free) t = std::min(t, std::max(now, b.NextDeadline()));
      ASSERT_GE(t, now);
      now = t;
      if (now == next_arrival) {
        ++operations;
        const RequestId id = next_id++;
        const bool ok = b.Add(id, now);
        const bool model_ok =
            config.max_queue_size == 0 ||
            static_cast<int>(model_ids.size()) < config.max_queue_size;
        ASSERT_EQ(ok, model_ok);
        if (ok) {
          model_ids.push_back(id);
          model_arrivals.push_back(now);
          accepted.push_back(id);
        }
        next_arrival = now + static_cast<Micros>(rng.Uniform(2 * mean_gap));
        // Occasionally a pending request times out or is cancelled.
        if (!model_ids.empty() && rng.Uniform(10) == 0) {
          const size_t k = rng.Uniform(model_ids.size());
          ASSERT_TRUE(b.Remove(model_ids[k]));
          removed.push_back(model_ids[k]);
          accepted.erase(
              std::find(accepted.begin(), accepted.end(), model_ids[k]));
          model_ids.erase(model_ids.begin() + k);
          model_arrivals.erase(model_arrivals.begin() + k);
        }
      }
      // Every free instance asks for a batch; sometimes an extra, early ask.
      for (Micros& free_at : instance_free_at) {
        if (free_at > now) continue;
        ++operations;
        const Micros deadline = b.NextDeadline();
        // The deadline never lets the oldest request overstay its delay.
        if (!model_arrivals.empty()) {
          ASSERT_LE(deadline, model_arrivals.front() +
                                  config.max_queue_delay_microseconds);
        }
        const int expected = ExpectedSize(config, model_arrivals, now);
        std::vector<RequestId> batch = b.TakeBatch(now);
        ASSERT_EQ(static_cast<int>(batch.size()), expected);
        ASSERT_LE(static_cast<int>(batch.size()), config.max_batch_size);
        // Non-empty exactly when the deadline has come.
        ASSERT_EQ(!batch.empty(), !model_ids.empty() && now >= deadline)
            << "now=" << now << " deadline=" << deadline;
        for (size_t i = 0; i < batch.size(); ++i) {
          ASSERT_EQ(batch[i], model_ids[i]);
          dispatched.push_back(batch[i]);
        }
        if (!batch.empty()) {
          model_ids.erase(model_ids.begin(), model_ids.begin() + batch.size());
          model_arrivals.erase(model_arrivals.begin(),
                               model_arrivals.begin() + batch.size());
          free_at =
              now + 1 + static_cast<Micros>(rng.Uniform(2 * mean_service));
        }
      }
      // An instance that stays free never leaves an overdue request behind.
      bool still_free = false;
      for (Micros f : instance_free_at) still_free |= f <= now;
      if (still_free && !model_arrivals.empty()) {
        ASSERT_GT(model_arrivals.front() + config.max_queue_delay_microseconds,
                  now);
        ASSERT_GT(b.NextDeadline(), now);
      }
    }
    // Drain: with the delay passed, everything leaves.
    now += config.max_queue_delay_microseconds;
    while (!b.empty()) {
      std::vector<RequestId> batch = b.TakeBatch(now);
      ASSERT_FALSE(batch.empty());
      ASSERT_LE(static_cast<int>(batch.size()), config.max_batch_size);
      dispatched.insert(dispatched.end(), batch.begin(), batch.end());
    }
    // FIFO within and across batches; every accepted request exactly once.
    ASSERT_EQ(dispatched, accepted);
    EXPECT_EQ(b.NextDeadline(), kNever);
  }
}

}  // namespace
}  // namespace gpusched::serving
