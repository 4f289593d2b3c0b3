// Pick allocates nothing on the hot path (the admission + enqueue + dispatch
// benchmark needs millions per second). This binary replaces the global
// operator new to count allocations; it counts only inside the loops below.
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "serving/latency_model.h"
#include "serving/request.h"
#include "serving/router.h"

namespace {
std::atomic<int64_t> g_allocations{0};
}  // namespace

void* operator new(std::size_t size) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  void* p = std::malloc(size == 0 ? 1 : size);
  if (p == nullptr) std::abort();
  return p;
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }

namespace gpusched::serving {
namespace {

TEST(RouterAllocationTest, PickDoesNotAllocate) {
  LatencyModel model;
  model.p1 = 1e-4;
  model.d0 = 0.005;
  model.kv_capacity_tokens = 100000;
  std::vector<ReplicaLoad> loads;
  for (ReplicaId id = 0; id < 16; ++id) {
    loads.push_back({.id = id,
                     .outstanding = static_cast<int>(id % 5),
                     .max_outstanding = 8,
                     .waiting = static_cast<int>(id % 3),
                     .running = 4,
                     .kv_used_fraction = 0.1 * (id % 10),
                     .kv_tokens = 1000 * id,
                     .pending_prefill_tokens = 100 * id});
  }
  const std::vector<uint64_t> blocks = {1, 2, 3, 4, 5, 6};
  Request request;
  request.input_tokens = 512;
  request.max_output_tokens = 128;
  request.session = 42;
  request.prefix_blocks = blocks;
  for (const std::string& name : RouterNames()) {
    RouterConfig config;
    config.policy = name;
    absl::StatusOr<std::unique_ptr<Router>> router =
        MakeRouter(config, &model, 1);
    ASSERT_TRUE(router.ok()) << router.status();
    // Warm up: prefix-affinity builds its ring and slots for new replicas,
    // the session and prefix maps take their first entries.
    (*router)->OnDispatched(request, 3);
    (*router)->Pick(request, loads, 0);
    const int64_t before = g_allocations.load();
    int sum = 0;
    for (int i = 0; i < 1000; ++i) sum += (*router)->Pick(request, loads, 0);
    EXPECT_EQ(g_allocations.load() - before, 0) << name;
    EXPECT_GE(sum, 0);
  }
}

}  // namespace
}  // namespace gpusched::serving
