// PlanPreemption against a brute-force oracle: on small random clusters
// with one queue (so only priority decides eligibility), every subset of
// eligible pods on every node is tried on a scratch cluster with the real
// filters; the cheapest by the documented order (highest victim priority,
// then GPU milli released, then victim count, then node index)
// must cost what the plan costs. "Released" is the victims' GPU milli: with
// free capacity already on a node, the least released is the least beyond
// what the pod needs.
#include <algorithm>
#include <climits>
#include <tuple>

#include "common/random.h"
#include "gtest/gtest.h"
#include "placement/preemption.h"
#include "placement/registry.h"
#include "placement/testing.h"

namespace gpusched::placement {
namespace {

using Cost = std::tuple<int, int64_t, int, int>;  // priority, released, n, node

struct Running {
  std::string id;
  inventory::PodRecord record;
};

bool FitsWithout(const std::vector<inventory::NodeSpec>& nodes,
                 const std::vector<Running>& running, uint32_t without_mask,
                 const std::vector<int>& candidates, const PodRequest& pod,
                 int node) {
  ClusterState scratch;
  for (const auto& n : nodes) CHECK(scratch.AddNode(n).ok());
  for (size_t i = 0; i < running.size(); ++i) {
    bool evicted = false;
    for (size_t k = 0; k < candidates.size(); ++k) {
      if ((without_mask >> k & 1) && candidates[k] == static_cast<int>(i)) {
        evicted = true;
      }
    }
    if (!evicted) {
      CHECK(scratch
                .Assume(running[i].id, running[i].record.allocation,
                        running[i].record.info)
                .ok());
    }
  }
  for (const auto& f : DefaultFilters()) {
    if (!f->Filter(pod, scratch, node).ok()) return false;
  }
  return true;
}

TEST(PreemptionOracleTest, PlansCostWhatBruteForceFinds) {
  const uint64_t seed = 4242;
  Rng rng(seed);
  const int priorities[] = {0, 100, 500, 1000};
  int with_victims = 0, without = 0, none = 0;
  for (int trial = 0; trial < 60; ++trial) {
    SCOPED_TRACE("seed " + std::to_string(seed) + " trial " +
                 std::to_string(trial));
    std::vector<inventory::NodeSpec> nodes;
    ClusterState cs;
    for (int i = 0; i < 3; ++i) {
      nodes.push_back(testing::Node("n" + std::to_string(i), 4, 64000));
      ASSERT_TRUE(cs.AddNode(nodes.back()).ok());
    }
    auto tree = QueueTree::Create({testing::GpuQueue("a", "", 1000000000)});
    ASSERT_TRUE(tree.ok());
    Scheduler filler(&cs, *NewPolicy("spread", {}), seed);
    std::vector<Running> running;
    for (int p = 0; p < 14; ++p) {
      inventory::ResourceRequest r =
          rng.Uniform(2) ? testing::Share(100 * (1 + rng.Uniform(9)), 2000)
                         : testing::Whole(1 + rng.Uniform(2), 4000);
      inventory::PodInfo info{"a", priorities[rng.Uniform(4)],
                              rng.Uniform(6) != 0};
      const std::string id = "p" + std::to_string(p);
      const Decision d = filler.Place(id, testing::Compile(r, cs));
      if (!d.placed) continue;
      // Place() assumed with default PodInfo; re-assume with ours.
      inventory::Allocation alloc = d.allocation;
      cs.Forget(id);
      ASSERT_TRUE(cs.Assume(id, alloc, info).ok());
      ASSERT_TRUE(tree->Charge(id, "a", AmountsOf(alloc), info.priority).ok());
      running.push_back({id, *cs.FindPod(id)});
    }
    inventory::ResourceRequest want =
        rng.Uniform(2) ? testing::Whole(1 + rng.Uniform(4), 4000)
                       : testing::Share(100 * (1 + rng.Uniform(9)), 2000);
    PodRequest pod = testing::Compile(want, cs);
    pod.info = {"a", rng.Uniform(2) ? 1000 : 500, true};

    // Oracle.
    bool found = false;
    Cost best{INT_MAX, 0, 0, 0};
    for (int n = 0; n < cs.num_nodes(); ++n) {
      std::vector<int> candidates;
      for (size_t i = 0; i < running.size(); ++i) {
        const auto& rec = running[i].record;
        if (rec.allocation.node == n && rec.info.preemptible &&
            rec.info.priority < pod.info.priority) {
          candidates.push_back(static_cast<int>(i));
        }
      }
      ASSERT_LE(candidates.size(), 12u);
      for (uint32_t mask = 0; mask < (1u << candidates.size()); ++mask) {
        if (!FitsWithout(nodes, running, mask, candidates, pod, n)) continue;
        int top = INT_MIN, count = 0;
        int64_t released = 0;
        for (size_t k = 0; k < candidates.size(); ++k) {
          if (!(mask >> k & 1)) continue;
          const auto& rec = running[candidates[k]].record;
          top = std::max(top, rec.info.priority);
          released += rec.allocation.GpuMilli();
          ++count;
        }
        const Cost c{top, released, count, n};
        if (!found || c < best) best = c;
        found = true;
      }
    }

    const PreemptionPlan plan =
        PlanPreemption(cs, *tree, pod, DefaultFilters());
    ASSERT_EQ(plan.found, found) << plan.reason;
    if (!found) {
      ++none;
      continue;
    }
    int top = INT_MIN;
    for (const auto& v : plan.victims) top = std::max(top, v.priority);
    const Cost got{top, plan.gpu_milli_released,
                   static_cast<int>(plan.victims.size()), plan.node};
    EXPECT_EQ(got, best) << plan.reason;
    ++(plan.victims.empty() ? without : with_victims);
  }
  EXPECT_GT(with_victims, 5);
  EXPECT_GT(without + none, 5);
}

}  // namespace
}  // namespace gpusched::placement
