#include "control/capacity.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gpusched::control {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;
using Phase = PoolNodeView::Phase;

constexpr Micros kS = kMicrosPerSecond;

NodePool Pool(std::string name, std::string gpu, double price, bool spot,
              int max_nodes = 4, int gpus = 8) {
  NodePool p;
  p.name = std::move(name);
  p.gpu = std::move(gpu);
  p.price_per_node_hour = price;
  p.spot = spot;
  p.max_nodes = max_nodes;
  p.gpus_per_node = gpus;
  return p;
}

WaitingReplica Waiting(std::string replica, std::string deployment,
                       std::map<std::string, double> cost, int gpus = 1,
                       Micros since = 0) {
  WaitingReplica w;
  w.replica = std::move(replica);
  w.deployment = std::move(deployment);
  w.usd_per_mtok = std::move(cost);
  w.gpus = gpus;
  w.since = since;
  return w;
}

std::vector<std::string> Summary(const CapacityPlan& plan) {
  std::vector<std::string> out;
  for (const CapacityAction& a : plan.actions) {
    switch (a.kind) {
      case CapacityAction::Kind::kAdd:
        out.push_back(absl::StrCat("add ", a.pool, " x", a.count));
        break;
      case CapacityAction::Kind::kMove:
        out.push_back(absl::StrCat("move ", a.node));
        break;
      case CapacityAction::Kind::kRelease:
        out.push_back(absl::StrCat("release ", a.node));
        break;
    }
  }
  return out;
}

TEST(ValidatePool, NamesTheField) {
  struct Case {
    NodePool pool;
    std::string error;  // "" = valid
  } cases[] = {
      {Pool("a", "A100-80GB", 10, false), ""},
      {Pool("", "A100-80GB", 10, false), "pools[0].name: required"},
      {Pool("a b", "A100-80GB", 10, false), "pools[0].name"},
      {Pool("a", "", 10, false), "pools[0].gpu: required"},
      {Pool("a", "A100-80GB", -1, false), "pools[0].price_per_node_hour"},
      {Pool("a", "A100-80GB", 10, false, 0), "pools[0].max_nodes: must be"},
      {Pool("a", "A100-80GB", 10, false, 4, 17), "pools[0].gpus_per_node"},
  };
  for (const Case& c : cases) {
    absl::Status s = ValidatePool(c.pool, "pools[0]");
    if (c.error.empty()) {
      EXPECT_TRUE(s.ok()) << s;
    } else {
      EXPECT_THAT(std::string(s.message()), HasSubstr(c.error));
    }
  }
  NodePool p = Pool("a", "A100-80GB", 10, false, 2);
  p.min_nodes = 3;
  EXPECT_THAT(std::string(ValidatePool(p, "pools[1]").message()),
              HasSubstr("pools[1].min_nodes: must be 0..max_nodes (2)"));
}

serving::LatencyModel Model() {
  serving::LatencyModel m;
  m.model = "m";
  m.gpu = "G";
  m.p0 = 0.01;
  m.p1 = 0.0001;  // 512 tokens: 0.0612 s
  m.d0 = 0.01;
  m.d1 = 0.0002;  // batch 256: 0.0612 s per step (+ KV term 0)
  m.kv_capacity_tokens = 1 << 20;
  return m;
}

TEST(CostPerToken, FromTheLatencyModel) {
  SloTarget slo;
  slo.ttft_s = 1;
  TokenCost c = CostPerToken(Model(), 3.6, slo);
  ASSERT_TRUE(c.feasible) << c.why;
  // Every batch meets TPOT 0.1 s (step <= 0.0612 s); throughput grows with
  // the batch: b*128 / (b*0.0612 + 128*(0.01 + 0.0002 b)) is largest at the
  // largest batch, 256.
  EXPECT_EQ(c.batch, 256);
  const double tps = 256.0 * 128 / (256 * 0.0612 + 128 * (0.01 + 0.0002 * 256));
  EXPECT_NEAR(c.tokens_per_s, tps, 1e-6);
  // $3.6 per GPU-hour = $0.001 per second.
  EXPECT_NEAR(c.usd_per_mtok, 0.001 / tps * 1e6, 1e-9);

  // A tighter TPOT caps the batch: 0.01 + 0.0002 b <= 0.02 -> b <= 50.
  slo.tpot_s = 0.02;
  EXPECT_EQ(CostPerToken(Model(), 3.6, slo).batch, 50);
  // KV capacity caps it too: b * 640 <= 6400 -> b <= 10.
  serving::LatencyModel small = Model();
  small.kv_capacity_tokens = 6400;
  EXPECT_EQ(CostPerToken(small, 3.6, slo).batch, 10);
  // A prompt that prefills over the TTFT target: infeasible, with figures.
  slo.ttft_s = 0.05;
  TokenCost no = CostPerToken(Model(), 3.6, slo);
  EXPECT_FALSE(no.feasible);
  EXPECT_THAT(no.why, HasSubstr("prefills in 0.061 s, over the TTFT target"));
  // Twice the price, twice the cost per token; tensor parallel multiplies.
  slo = SloTarget{};
  serving::LatencyModel tp2 = Model();
  tp2.tensor_parallel = 2;
  EXPECT_NEAR(CostPerToken(tp2, 3.6, slo).usd_per_mtok,
              2 * CostPerToken(Model(), 3.6, slo).usd_per_mtok, 1e-9);
}

TEST(CostPerToken, AtTheDemandPerReplica) {
  SloTarget slo;
  slo.ttft_s = 1;
  slo.max_batch = 8;
  const TokenCost full = CostPerToken(Model(), 3.6, slo);
  ASSERT_TRUE(full.feasible) << full.why;
  ASSERT_EQ(full.batch, 8);
  EXPECT_EQ(full.served_concurrency, 8);
  EXPECT_EQ(full.served_tokens_per_s, full.tokens_per_s);
  auto tps = [](int b) {
    return b * 128.0 / (b * 0.0612 + 128 * (0.01 + 0.0002 * b));
  };
  struct Case {
    double demand;
    double concurrency;
    double tokens_per_s;
  };
  for (const Case& k : std::vector<Case>{
           {0.5, 0.5, 0.5 * tps(1)},  // busy half the time
           {0, SloTarget::kMinDemand, SloTarget::kMinDemand * tps(1)},
           {1, 1, tps(1)},
           {2.25, 2.25, 0.75 * tps(2) + 0.25 * tps(3)},
           {8, 8, tps(8)},      // at capacity
           {30, 8, tps(8)}}) {  // over it: judged full
    slo.demand = k.demand;
    const TokenCost c = CostPerToken(Model(), 3.6, slo);
    ASSERT_TRUE(c.feasible) << k.demand;
    EXPECT_EQ(c.batch, 8) << "the capacity does not depend on the demand";
    EXPECT_NEAR(c.served_concurrency, k.concurrency, 1e-12) << k.demand;
    EXPECT_NEAR(c.served_tokens_per_s, k.tokens_per_s, 1e-9) << k.demand;
    // It pays for its GPU-hour whatever it serves: $0.001 per second.
    EXPECT_NEAR(c.usd_per_mtok, 0.001 / k.tokens_per_s * 1e6, 1e-6) << k.demand;
  }
}

// The bench's case (bench/capacity_sim.sh): Llama-2-7B with 768-token
// prompts and 192-token answers, TTFT <= 1 s, at most 12 per replica, on
// an A100-80GB at $5.12 per GPU-hour or an H100 at $12.29. A lightly
// loaded replica costs least on the A100 (the cheaper GPU-hour); a full
// one on the H100 (more tokens per dollar at its capacity).
TEST(CostPerToken, LightlyLoadedGoesToTheCheaperGpuHour) {
  auto a100 = serving::FindLatencyModel(serving::BuiltinLatencyModels(),
                                        "llama-2-7b", "A100-80GB", 1);
  auto h100 = serving::FindLatencyModel(serving::BuiltinLatencyModels(),
                                        "llama-2-7b", "H100-SXM-80GB", 1);
  ASSERT_TRUE(a100.ok()) << a100.status();
  ASSERT_TRUE(h100.ok()) << h100.status();
  SloTarget slo;
  slo.ttft_s = 1;
  slo.input_tokens = 768;
  slo.output_tokens = 192;
  slo.max_batch = 12;
  auto cheaper = [&](double demand) {
    slo.demand = demand;
    const TokenCost a = CostPerToken(*a100, 5.12, slo);
    const TokenCost h = CostPerToken(*h100, 12.29, slo);
    EXPECT_TRUE(a.feasible && h.feasible) << a.why << h.why;
    return a.usd_per_mtok < h.usd_per_mtok ? "A100" : "H100";
  };
  EXPECT_STREQ(cheaper(-1), "H100") << "judged full";
  EXPECT_STREQ(cheaper(12), "H100");
  EXPECT_STREQ(cheaper(0.2), "A100");
  EXPECT_STREQ(cheaper(1), "A100");
}

// The demand measured on the GPU the deployment runs on: the same requests
// finish sooner on a faster GPU, so it is credited only with the tokens
// that arrive. One busy A100 replica stays on the A100 (an H100 would serve
// the same tokens at 2.4x the GPU-hour); ten of them are cheaper as H100
// replicas at their capacity (fewer of them).
TEST(CostPerToken, DemandMeasuredWhereItRuns) {
  auto a100 = serving::FindLatencyModel(serving::BuiltinLatencyModels(),
                                        "llama-2-7b", "A100-80GB", 1);
  auto h100 = serving::FindLatencyModel(serving::BuiltinLatencyModels(),
                                        "llama-2-7b", "H100-SXM-80GB", 1);
  ASSERT_TRUE(a100.ok() && h100.ok());
  SloTarget slo;
  slo.ttft_s = 1;
  slo.input_tokens = 768;
  slo.output_tokens = 192;
  slo.max_batch = 12;
  slo.demand = 12;
  slo.demand_on = &*a100;
  const TokenCost a_full = CostPerToken(*a100, 5.12, slo);
  ASSERT_TRUE(a_full.feasible);
  struct Case {
    int replicas;
    const char* cheaper;
  };
  for (const Case& k :
       std::vector<Case>{{1, "A100"}, {2, "A100"}, {10, "H100"}}) {
    slo.replicas = k.replicas;
    const TokenCost a = CostPerToken(*a100, 5.12, slo);
    const TokenCost h = CostPerToken(*h100, 12.29, slo);
    ASSERT_TRUE(a.feasible && h.feasible) << a.why << h.why;
    // The A100 replica is full at 12 either way.
    EXPECT_NEAR(a.served_tokens_per_s, a_full.tokens_per_s, 1e-9);
    EXPECT_EQ(a.served_concurrency, 12);
    // An H100 replica serves the deployment's whole rate, up to its
    // capacity, at a lower concurrency than the A100 needs.
    EXPECT_NEAR(h.served_tokens_per_s,
                std::min(h.tokens_per_s, k.replicas * a_full.tokens_per_s),
                1e-6)
        << k.replicas;
    if (k.replicas == 1) EXPECT_LT(h.served_concurrency, 12);
    EXPECT_STREQ(a.usd_per_mtok < h.usd_per_mtok ? "A100" : "H100", k.cheaper)
        << k.replicas << " replicas";
  }
  // Requests over the A100's capacity wait: they tell no rate, and one
  // replica at 40 ongoing is judged as one at its capacity of 12.
  slo.replicas = 1;
  slo.demand = 40;
  const TokenCost queued = CostPerToken(*h100, 12.29, slo);
  EXPECT_NEAR(queued.served_tokens_per_s, a_full.tokens_per_s, 1e-6);
  EXPECT_GT(queued.usd_per_mtok, CostPerToken(*a100, 5.12, slo).usd_per_mtok);
  slo.demand = 12;
  // Judged on its own GPU (no demand_on, one replica), the H100 is credited
  // with 12 requests' tokens at its speed and wins: the old judgement.
  slo.demand_on = nullptr;
  slo.replicas = 1;
  EXPECT_LT(CostPerToken(*h100, 12.29, slo).usd_per_mtok,
            CostPerToken(*a100, 5.12, slo).usd_per_mtok);
}

TEST(CapacityPlanner, AddsTheCheapestPoolPerTokenAfterTheDelay) {
  CapacityOptions o;
  o.scale_up_delay = 30 * kS;
  CapacityPlanner planner(o);
  CapacityInput in;
  in.pools = {Pool("h100", "H100", 98, false), Pool("a100", "A100", 41, false)};
  // Per GPU-hour the A100 is cheaper, but per token at the SLO the H100 is.
  in.waiting = {Waiting("m-0", "m", {{"h100", 0.8}, {"a100", 1.1}}, 1, 0)};
  EXPECT_TRUE(planner.Plan(in, 10 * kS).actions.empty()) << "before delay";
  CapacityPlan plan = planner.Plan(in, 30 * kS);
  EXPECT_THAT(Summary(plan), ElementsAre("add h100 x1"));
  ASSERT_EQ(plan.events.size(), 1u);
  EXPECT_EQ(plan.events[0].kind, "capacity.requested");
  EXPECT_THAT(plan.events[0].message,
              HasSubstr("1 node of pool h100 (8 x H100, on-demand, $98.00 "
                        "per node-hour, $0.800 per million tokens"));

  // Priced per GPU-hour (live, a model the latency models do not know):
  // the event names that unit.
  CapacityPlanner hourly(o);
  in.waiting = {Waiting("m-0", "m", {{"h100", 24.5}, {"a100", 10.2}}, 2, 0)};
  in.waiting[0].per_hour = true;
  plan = hourly.Plan(in, 30 * kS);
  EXPECT_THAT(Summary(plan), ElementsAre("add a100 x1"));
  ASSERT_EQ(plan.events.size(), 1u);
  EXPECT_THAT(plan.events[0].message,
              HasSubstr("$41.00 per node-hour, $10.200 per hour for its 2 "
                        "GPUs (no latency model on every pool: priced per "
                        "GPU-hour)"));
  EXPECT_THAT(plan.events[0].message, Not(HasSubstr("million tokens")));
  in.waiting = {Waiting("m-0", "m", {{"h100", 0.8}, {"a100", 1.1}}, 1, 0)};

  // Reactive: the first pool in the configured order that fits.
  o.cost_aware = false;
  CapacityPlanner reactive(o);
  in.pools = {Pool("a100", "A100", 41, false), Pool("h100", "H100", 98, false)};
  EXPECT_THAT(Summary(reactive.Plan(in, 30 * kS)), ElementsAre("add a100 x1"));
}

TEST(CapacityPlanner, PacksReplicasAndCountsNodesAlreadyComing) {
  CapacityOptions o;
  o.scale_up_delay = 0;
  CapacityPlanner planner(o);
  CapacityInput in;
  in.pools = {Pool("p", "G", 10, false, 3, 8)};
  std::map<std::string, double> cost{{"p", 1}};
  // 4+4+4+2+2 GPUs: 16 on two nodes and 2 left for a third... first fit,
  // largest first: [4,4] [4,2,2] -> 2 nodes.
  in.waiting = {Waiting("a-0", "a", cost, 4), Waiting("a-1", "a", cost, 4),
                Waiting("a-2", "a", cost, 4), Waiting("b-0", "b", cost, 2),
                Waiting("b-1", "b", cost, 2)};
  EXPECT_THAT(Summary(planner.Plan(in, 0)), ElementsAre("add p x2"));
  // One node of 8 is coming with nothing on it yet: one more is enough.
  in.nodes = {{"p-1", "p", Phase::kProvisioning, 0, 8, 0, {}}};
  EXPECT_THAT(Summary(planner.Plan(in, 0)), ElementsAre("add p x1"));
  // max_nodes bounds the ask: 3 up already, nothing more.
  in.nodes = {{"p-1", "p", Phase::kUp, 0, 8, 8, {"x"}},
              {"p-2", "p", Phase::kUp, 0, 8, 8, {"y"}},
              {"p-3", "p", Phase::kUp, 0, 8, 8, {"z"}}};
  EXPECT_TRUE(planner.Plan(in, 0).actions.empty());
}

TEST(CapacityPlanner, SkipsPoolsThatCannotServeOrFailed) {
  CapacityOptions o;
  o.scale_up_delay = 0;
  o.failed_pool_backoff = 100 * kS;
  CapacityPlanner planner(o);
  CapacityInput in;
  in.pools = {Pool("cheap", "A10", 1, false), Pool("big", "H100", 98, false),
              Pool("small", "L4", 1, false, 4, 1)};
  // No latency model on "cheap" (absent from the map); "small" has nodes of
  // 1 GPU and the replica needs 2.
  in.waiting = {Waiting("m-0", "m", {{"big", 2.0}, {"small", 0.1}}, 2)};
  EXPECT_THAT(Summary(planner.Plan(in, 0)), ElementsAre("add big x1"));
  CapacityPlan failed;
  planner.NodeFailed("big", "big-1", "ResumeTimeout reached", 10 * kS, &failed);
  ASSERT_EQ(failed.events.size(), 1u);
  EXPECT_EQ(failed.events[0].kind, "capacity.failed");
  EXPECT_THAT(failed.events[0].message,
              HasSubstr("node big-1 of pool big did not come up: "
                        "ResumeTimeout reached"));
  in.waiting[0].usd_per_mtok["cheap"] = 3.0;
  EXPECT_THAT(Summary(planner.Plan(in, 20 * kS)), ElementsAre("add cheap x1"));
  EXPECT_THAT(Summary(planner.Plan(in, 110 * kS)), ElementsAre("add big x1"));
}

TEST(CapacityPlanner, SpotWithOnDemandFallback) {
  CapacityOptions o;
  o.scale_up_delay = 0;
  o.base_ondemand_fallback_replicas = 1;
  o.dynamic_ondemand_fallback = true;
  o.spot_recovery_delay = 300 * kS;
  CapacityPlanner planner(o);
  CapacityInput in;
  in.pools = {Pool("od", "G", 40, false), Pool("spot", "G", 12, true)};
  std::map<std::string, double> cost{{"od", 4}, {"spot", 1.2}};
  // Two replicas: the first keeps the base on on-demand, the second spot.
  in.waiting = {Waiting("m-0", "m", cost), Waiting("m-1", "m", cost)};
  EXPECT_THAT(Summary(planner.Plan(in, 0)),
              ElementsAre("add od x1", "add spot x1"));
  // With the base met, both go spot.
  in.ondemand_replicas["m"] = 1;
  EXPECT_THAT(Summary(planner.Plan(in, 0)), ElementsAre("add spot x1"));
  // A spot loss: on-demand until spot_recovery_delay has passed.
  CapacityPlan lost;
  planner.SpotLost("spot", "spot-1", {"m"}, 10 * kS, &lost);
  ASSERT_EQ(lost.events.size(), 1u);
  EXPECT_EQ(lost.events[0].kind, "spot.preempted");
  EXPECT_THAT(planner.FallbackDeployments(20 * kS), ElementsAre("m"));
  EXPECT_THAT(Summary(planner.Plan(in, 20 * kS)), ElementsAre("add od x1"));
  EXPECT_THAT(Summary(planner.Plan(in, 310 * kS)), ElementsAre("add spot x1"));
  // A deployment that may not run on spot never does.
  in.waiting[0].spot_ok = false;
  in.waiting.resize(1);
  EXPECT_THAT(Summary(planner.Plan(in, 400 * kS)), ElementsAre("add od x1"));
}

TEST(CapacityPlanner, ReleasesIdleNodesAboveMin) {
  CapacityOptions o;
  o.scale_down_delay = 60 * kS;
  o.consolidate = false;
  CapacityPlanner planner(o);
  CapacityInput in;
  in.pools = {Pool("p", "G", 10, false)};
  in.pools[0].min_nodes = 1;
  in.nodes = {{"p-1", "p", Phase::kUp, 0, 8, 0, {}},
              {"p-2", "p", Phase::kUp, 0, 8, 1, {"m-0"}}};
  EXPECT_TRUE(planner.Plan(in, 30 * kS).actions.empty());
  CapacityPlan plan = planner.Plan(in, 60 * kS);
  EXPECT_THAT(Summary(plan), ElementsAre("release p-1"));
  EXPECT_EQ(plan.events[0].kind, "node.released");
  EXPECT_THAT(plan.events[0].message, HasSubstr("no replica for 60 s"));
  // p-2 empties at 100 s; min_nodes keeps the last node.
  in.nodes = {{"p-2", "p", Phase::kUp, 0, 8, 0, {}}};
  EXPECT_TRUE(planner.Plan(in, 100 * kS).actions.empty());
  EXPECT_TRUE(planner.Plan(in, 500 * kS).actions.empty());
  // The idle time counts from the last replica, not from the node's start.
  in.pools[0].min_nodes = 0;
  in.nodes = {{"p-2", "p", Phase::kUp, 0, 8, 1, {"m-0"}}};
  planner.Plan(in, 600 * kS);
  in.nodes[0].replicas.clear();
  EXPECT_TRUE(planner.Plan(in, 630 * kS).actions.empty());
  EXPECT_THAT(Summary(planner.Plan(in, 660 * kS)), ElementsAre("release p-2"));
}

TEST(CapacityPlanner, ConsolidatesANearlyEmptyNodeThenReleasesIt) {
  CapacityOptions o;
  o.scale_down_delay = 60 * kS;
  CapacityPlanner planner(o);
  CapacityInput in;
  in.pools = {Pool("p", "G", 10, false)};
  in.nodes = {{"p-1", "p", Phase::kUp, 0, 8, 6, {"a-0", "a-1", "a-2"}},
              {"p-2", "p", Phase::kUp, 0, 8, 2, {"b-0"}}};
  in.room = {{"p-1", 2}, {"p-2", 6}};
  in.replica_gpus = {{"a-0", 2}, {"a-1", 2}, {"a-2", 2}, {"b-0", 2}};
  in.movable = {"a-0", "a-1", "a-2", "b-0"};
  EXPECT_TRUE(planner.Plan(in, 0).actions.empty());
  CapacityPlan plan = planner.Plan(in, 60 * kS);
  EXPECT_THAT(Summary(plan), ElementsAre("move p-2"));
  EXPECT_EQ(plan.events[0].kind, "node.consolidating");
  EXPECT_THAT(planner.Cordoned(), ElementsAre("p-2"));
  // Once its replica has moved, the node goes back at once.
  in.nodes[0].replicas.push_back("b-0");
  in.nodes[1].replicas.clear();
  in.nodes[1].gpus_held = 0;
  EXPECT_THAT(Summary(planner.Plan(in, 70 * kS)), ElementsAre("release p-2"));
  EXPECT_TRUE(planner.Cordoned().empty());
}

TEST(CapacityPlanner, EmptiesADearerNodeWhoseReplicasFitOnCheaperOnes) {
  CapacityOptions o;
  o.scale_down_delay = 60 * kS;
  CapacityPlanner planner(o);
  CapacityInput in;
  // $10 and $5 per GPU-hour. The H100 node is 6/8 held: not nearly empty,
  // but its replicas fit on the A100 node's free GPUs.
  in.pools = {Pool("h100", "H100", 80, false), Pool("a100", "A100", 40, false)};
  in.nodes = {{"a100-1", "a100", Phase::kUp, 0, 8, 2, {"b-0"}},
              {"h100-1", "h100", Phase::kUp, 0, 8, 6, {"a-0", "a-1", "a-2"}}};
  in.room = {{"a100-1", 6}, {"h100-1", 2}};
  in.replica_gpus = {{"a-0", 2}, {"a-1", 2}, {"a-2", 2}, {"b-0", 2}};
  in.movable = {"a-0", "a-1", "a-2", "b-0"};
  EXPECT_TRUE(planner.Plan(in, 0).actions.empty()) << "before the delay";
  CapacityPlan plan = planner.Plan(in, 60 * kS);
  // The dearer node goes first, though the A100 node is the emptier one.
  EXPECT_THAT(Summary(plan), ElementsAre("move h100-1"));
  ASSERT_EQ(plan.events.size(), 1u);
  EXPECT_THAT(plan.events[0].message,
              HasSubstr("node h100-1 holds 6.00 of its 8 GPUs at $10.00 per "
                        "GPU-hour and its replicas fit on cheaper nodes"));

  // Not when they fit only on nodes as dear, or do not fit at all.
  CapacityPlanner same(o);
  in.pools[1].price_per_node_hour = 80;
  EXPECT_TRUE(same.Plan(in, 0).actions.empty());
  EXPECT_THAT(Summary(same.Plan(in, 60 * kS)), ElementsAre("move a100-1"))
      << "only the nearly empty one";
  CapacityPlanner full(o);
  in.pools[1].price_per_node_hour = 40;
  in.room = {{"a100-1", 5}, {"h100-1", 2}};
  in.nodes[0].gpus_held = 3;
  in.replica_gpus["b-0"] = 3;
  EXPECT_TRUE(full.Plan(in, 0).actions.empty());
  EXPECT_TRUE(full.Plan(in, 60 * kS).actions.empty())
      << "6 GPUs do not fit in 5; 3 do not fit in 2";
}

TEST(CapacityPlanner, NoConsolidationWhenItDoesNotFitOrCannotMove) {
  CapacityOptions o;
  o.scale_down_delay = 0;
  o.scale_up_delay = 0;
  CapacityPlanner planner(o);
  CapacityInput in;
  in.pools = {Pool("p", "G", 10, false)};
  in.nodes = {{"p-1", "p", Phase::kUp, 0, 8, 7, {"a-0"}},
              {"p-2", "p", Phase::kUp, 0, 8, 2, {"b-0"}}};
  in.room = {{"p-1", 1}, {"p-2", 6}};
  in.replica_gpus = {{"a-0", 7}, {"b-0", 2}};
  in.movable = {"a-0", "b-0"};
  EXPECT_TRUE(planner.Plan(in, 0).actions.empty()) << "b-0 fits nowhere";
  in.room[0].free_gpus = 2;
  in.movable = {"a-0"};
  EXPECT_TRUE(planner.Plan(in, 0).actions.empty()) << "b-0 is not movable";
  in.movable = {"a-0", "b-0"};
  in.waiting = {Waiting("c-0", "c", {{"p", 1}}, 1, 0)};
  EXPECT_THAT(Summary(planner.Plan(in, 0)), ElementsAre("add p x1"))
      << "no consolidation while replicas wait";
  in.waiting.clear();
  EXPECT_THAT(Summary(planner.Plan(in, 0)), ElementsAre("move p-2"));
}

}  // namespace
}  // namespace gpusched::control
