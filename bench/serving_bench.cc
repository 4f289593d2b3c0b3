// Request-layer core speed: admission + enqueue + dispatch (+ completion, so
// the replicas' slots free up) through serving::Dispatcher, single-threaded,
// with 1,000 tenants, 4 priority classes and 100 models, queues kept
// backlogged so fair queuing does real work.
//
// Target (issue 3): >= 2,000,000 requests/s. The peer in the same run is a
// plain per-model FIFO with a least-outstanding pick and no admission: the
// ratio shows what admission, classes and fair queuing cost.
//
//   build/bench/serving_bench --benchmark_repetitions=5
//       --benchmark_report_aggregates_only=true
#include <deque>
#include <string>
#include <vector>

#include "benchmark/benchmark.h"
#include "common/check.h"
#include "common/random.h"
#include "serving/dispatcher.h"

namespace gpusched::serving {
namespace {

constexpr int kTenants = 1000;
constexpr int kClasses = 4;
constexpr int kModels = 100;
constexpr int kReplicasPerModel = 4;
constexpr int kCap = 8;
constexpr int kBacklogPerModel = 64;
constexpr int kBatch = 256;

// Requests are drawn as they are submitted (a pre-built array of a million
// would stream ~90 MB through the caches and measure that instead); the
// draw is part of the measured time.
class RequestSource {
 public:
  explicit RequestSource(uint64_t seed) : rng_(seed) {}
  Request Next(Micros now) {
    Request r;
    r.id = next_id_++;
    const uint64_t a = rng_.Next();
    const uint64_t b = rng_.Next();
    r.tenant = static_cast<TenantId>((a & 0xffffffff) % kTenants);
    r.model = static_cast<ModelId>((a >> 32) % kModels);
    r.priority = static_cast<ClassId>(b & 3);
    r.input_tokens = 1 + static_cast<int32_t>((b >> 8) % 4096);
    r.max_output_tokens = 1 + static_cast<int32_t>((b >> 24) % 512);
    // Half the requests carry a deadline 10 to 60 s out (EDF within a
    // tenant, and deadline-feasibility checks at admission).
    if ((b >> 40) & 1) r.deadline = now + 10'000'000 + (b >> 41) % 50'000'000;
    return r;
  }

 private:
  Rng rng_;
  RequestId next_id_ = 0;
};

void BM_Dispatcher(benchmark::State& state, const char* router) {
  Dispatcher d(42);
  for (int m = 0; m < kModels; ++m) {
    DeploymentSpec spec;
    spec.name = "m" + std::to_string(m);
    spec.router.policy = router;
    for (const char* c : {"critical", "standard", "batch", "sheddable"}) {
      spec.queue.classes.push_back({c, QueueOrder::kFair, kNever});
    }
    CHECK(d.AddDeployment(spec).ok());
    for (int r = 0; r < kReplicasPerModel; ++r) {
      d.AddReplica(m, m * kReplicasPerModel + r, kCap);
    }
  }
  for (int t = 0; t < kTenants; ++t) {
    TenantSpec spec;
    spec.name = "t" + std::to_string(t);
    spec.weight = 1 + t % 3;
    // Limits high enough never to bind, so every check runs and passes.
    spec.limits.requests_per_minute = 1e12;
    spec.limits.tokens_per_minute = 1e15;
    CHECK(d.AddTenant(spec).ok());
  }
  RequestSource source(7);
  Micros now = 0;
  std::vector<Assignment> out;
  out.reserve(kBatch * 4);
  std::deque<Assignment> running;
  auto submit = [&](int n) {
    for (int i = 0; i < n; ++i) {
      CHECK(d.Submit(source.Next(now), now).admitted());
    }
  };
  // Fill every replica and leave a backlog in every queue.
  submit(kModels * (kReplicasPerModel * kCap + kBacklogPerModel));
  d.Dispatch(now, &out);
  for (const Assignment& a : out) running.push_back(a);
  int64_t items = 0;
  for (auto _ : state) {
    now += 1000;
    submit(kBatch);
    // Complete the oldest kBatch in flight, then dispatch into the freed
    // slots.
    for (int i = 0; i < kBatch && !running.empty(); ++i) {
      const Assignment& a = running.front();
      d.OnFinished(a.request, a.replica, a.request.max_output_tokens / 2, now);
      running.pop_front();
    }
    out.clear();
    d.Dispatch(now, &out);
    for (const Assignment& a : out) running.push_back(a);
    items += kBatch;
  }
  state.SetItemsProcessed(items);
}
BENCHMARK_CAPTURE(BM_Dispatcher, least_outstanding, "least-outstanding");
BENCHMARK_CAPTURE(BM_Dispatcher, power_of_two, "power-of-two");
BENCHMARK_CAPTURE(BM_Dispatcher, round_robin, "round-robin");

// The peer: per-model FIFO, least-outstanding by linear scan, no admission,
// no classes, no fairness.
void BM_FifoPeer(benchmark::State& state) {
  struct Model {
    std::deque<Request> q;
    int outstanding[kReplicasPerModel] = {};
  };
  std::vector<Model> models(kModels);
  RequestSource source(7);
  std::deque<std::pair<ModelId, int>> running;
  auto dispatch = [&](Model& m, ModelId id) {
    while (!m.q.empty()) {
      int best = 0;
      for (int r = 1; r < kReplicasPerModel; ++r) {
        if (m.outstanding[r] < m.outstanding[best]) best = r;
      }
      if (m.outstanding[best] >= kCap) return;
      ++m.outstanding[best];
      m.q.pop_front();
      running.emplace_back(id, best);
    }
  };
  for (int i = 0; i < kModels * (kReplicasPerModel * kCap + kBacklogPerModel);
       ++i) {
    const Request r = source.Next(0);
    models[r.model].q.push_back(r);
  }
  for (int m = 0; m < kModels; ++m) dispatch(models[m], m);
  int64_t items = 0;
  for (auto _ : state) {
    for (int i = 0; i < kBatch; ++i) {
      const Request r = source.Next(0);
      models[r.model].q.push_back(r);
    }
    for (int i = 0; i < kBatch && !running.empty(); ++i) {
      auto [m, rep] = running.front();
      running.pop_front();
      --models[m].outstanding[rep];
      dispatch(models[m], m);
    }
    items += kBatch;
  }
  state.SetItemsProcessed(items);
}
BENCHMARK(BM_FifoPeer);

}  // namespace
}  // namespace gpusched::serving

BENCHMARK_MAIN();
