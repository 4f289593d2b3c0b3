// TensorReplicaSim: Triton-style dynamic batching in the simulator.
#include <algorithm>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "common/random.h"
#include "gtest/gtest.h"
#include "sim/replica_sim.h"
#include "sim/replica_sim_testing.h"

namespace gpusched::sim {
namespace {

using simtest::MakeRequest;
using simtest::Recorder;

// ---------------------------------------------------------------------------
// TensorReplicaSim

std::unique_ptr<TensorReplicaSim> MakeTensor(const TensorReplicaConfig& c) {
  absl::StatusOr<std::unique_ptr<TensorReplicaSim>> sim =
      TensorReplicaSim::Create(c);
  EXPECT_TRUE(sim.ok()) << sim.status();
  return *std::move(sim);
}

TEST(TensorReplicaSimTest, ConfigValidation) {
  TensorReplicaConfig c;
  EXPECT_TRUE(ValidateTensorReplicaConfig(c).ok());
  c.instances = 0;
  EXPECT_NE(ValidateTensorReplicaConfig(c).message().find("instances"),
            std::string::npos);
  c.instances = 1;
  c.batcher.max_batch_size = 0;
  EXPECT_NE(ValidateTensorReplicaConfig(c).message().find("max_batch_size"),
            std::string::npos);
  EXPECT_FALSE(TensorReplicaSim::Create(c).ok());
}

TEST(TensorReplicaSimTest, HandTimeline) {
  // Batch latency = 2000 + 1000 * size us.
  TensorReplicaConfig config;
  config.batcher.max_batch_size = 4;
  config.batcher.max_queue_delay_microseconds = 1000;
  config.base_s = 0.002;
  config.per_item_s = 0.001;
  auto sim = MakeTensor(config);
  Recorder rec;
  std::vector<SimRequest> r(8);
  for (int i = 0; i < 3; ++i) {
    r[i] = MakeRequest(i + 1, 1, 1);
    ASSERT_TRUE(sim->Enqueue(&r[i], 100 * i));
  }
  ASSERT_EQ(sim->NextEventTime(), 1000);  // the oldest's delay
  sim->Advance(1000, rec);
  EXPECT_EQ(r[0].started, 1000);
  EXPECT_EQ(sim->Load().running, 3);
  for (int i = 3; i < 8; ++i) {
    r[i] = MakeRequest(i + 1, 1, 1);
    ASSERT_TRUE(sim->Enqueue(&r[i], 1500 + 100 * (i - 3)));
  }
  EXPECT_EQ(sim->Load().waiting, 5);
  ASSERT_EQ(sim->NextEventTime(), 6000);  // busy: the deadline waits
  sim->Advance(6000, rec);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(r[i].first_token, 6000);
    EXPECT_EQ(r[i].finished, 6000);
  }
  EXPECT_EQ(r[3].started, 6000);  // a full batch of 4 at once
  ASSERT_EQ(sim->NextEventTime(), 12000);
  sim->Advance(12000, rec);
  EXPECT_EQ(r[6].finished, 12000);
  EXPECT_EQ(r[7].started, 12000);  // overdue, goes alone
  ASSERT_EQ(sim->NextEventTime(), 15000);
  sim->Advance(15000, rec);
  EXPECT_EQ(r[7].finished, 15000);
  EXPECT_EQ(sim->NextEventTime(), kNever);
  EXPECT_EQ(rec.total_finished(), 8);
  EXPECT_EQ(sim->counters().batches, 3);
  EXPECT_EQ(sim->counters().max_batch, 4);
}

TEST(TensorReplicaSimTest, FullBatchStartsOnEnqueueAndQueueBounds) {
  TensorReplicaConfig config;
  config.batcher.max_batch_size = 2;
  config.batcher.max_queue_delay_microseconds = 1000;
  config.batcher.max_queue_size = 1;
  config.base_s = 0.002;
  config.per_item_s = 0.001;
  auto sim = MakeTensor(config);
  SimRequest a = MakeRequest(1, 1, 1), b = MakeRequest(2, 1, 1),
             c = MakeRequest(3, 1, 1);
  ASSERT_TRUE(sim->Enqueue(&a, 0));
  EXPECT_FALSE(sim->Enqueue(&b, 10));  // queue holds one
  EXPECT_TRUE(sim->Remove(&a));
  EXPECT_FALSE(sim->Remove(&a));
  EXPECT_EQ(sim->NextEventTime(), kNever);
  ASSERT_TRUE(sim->Enqueue(&b, 20));
  config.batcher.max_queue_size = 0;
  sim = MakeTensor(config);
  ASSERT_TRUE(sim->Enqueue(&b, 20));
  ASSERT_TRUE(sim->Enqueue(&c, 30));
  EXPECT_EQ(c.started, 30);
  EXPECT_EQ(sim->NextEventTime(), 30 + 4000);
}

TEST(TensorReplicaSimTest, RandomizedBatchAndDelayInvariants) {
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    SCOPED_TRACE(testing::Message() << "seed=" << seed);
    Rng rng(seed);
    TensorReplicaConfig config;
    config.batcher.max_batch_size = 1 + static_cast<int>(rng.Uniform(8));
    config.batcher.max_queue_delay_microseconds =
        static_cast<Micros>(rng.Uniform(3000));
    if (rng.Uniform(2) == 0) {
      config.batcher.preferred_batch_sizes = {
          (config.batcher.max_batch_size + 1) / 2};
    }
    config.instances = 1 + static_cast<int>(rng.Uniform(3));
    config.base_s = 1e-6 * static_cast<double>(1 + rng.Uniform(3000));
    config.per_item_s = 1e-6 * static_cast<double>(rng.Uniform(1000));
    auto sim = MakeTensor(config);
    std::vector<SimRequest> reqs(2000);
    const Micros gap = 1 + static_cast<Micros>(rng.Uniform(1500));
    Micros t = 0;
    for (size_t i = 0; i < reqs.size(); ++i) {
      t += static_cast<Micros>(rng.Uniform(2 * gap));
      reqs[i] = MakeRequest(i + 1, 1, 1, t);
    }
    // Free instances after each step, to judge waits past the delay.
    std::map<Micros, int> free_after;
    Recorder rec;
    size_t next = 0;
    while (true) {
      const Micros arrival =
          next < reqs.size() ? reqs[next].req.arrival : kNever;
      const Micros event = sim->NextEventTime();
      if (arrival == kNever && event == kNever) break;
      Micros now;
      if (event <= arrival) {
        now = event;
        sim->Advance(event, rec);
      } else {
        now = arrival;
        ASSERT_TRUE(sim->Enqueue(&reqs[next++], arrival));
      }
      free_after[now] = sim->free_instances();
    }
    EXPECT_LE(sim->counters().max_batch, config.batcher.max_batch_size);
    EXPECT_EQ(sim->counters().items, static_cast<int64_t>(reqs.size()));
    for (size_t i = 0; i < reqs.size(); ++i) {
      const SimRequest& r = reqs[i];
      ASSERT_EQ(rec.finished(&r), 1);
      if (i > 0) {
        ASSERT_LE(reqs[i - 1].started, r.started);  // FIFO
      }
      const Micros due =
          r.req.arrival + config.batcher.max_queue_delay_microseconds;
      if (r.started <= due) continue;
      // Waited past its delay: every instance must have been busy then.
      auto it = free_after.upper_bound(due);
      ASSERT_NE(it, free_after.begin());
      --it;
      ASSERT_EQ(it->second, 0) << "request " << r.req.id << " due at " << due
                               << " started " << r.started;
    }
  }
}

}  // namespace
}  // namespace gpusched::sim
