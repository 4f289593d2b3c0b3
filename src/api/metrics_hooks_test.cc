// GatewayMetrics and ControllerMetrics against a registry: what each hook
// records, read back from the exposition (no network, no clock).
#include <string>

#include "api/controller_metrics.h"
#include "gateway/gateway_metrics.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gpusched::api {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr Micros kMs = kMicrosPerMilli;

class MetricsHooksTest : public ::testing::Test {
 protected:
  metrics::Registry registry_;
  gateway::GatewayMetrics gateway_{&registry_};
  ControllerMetrics controller_{
      &registry_, &gateway_, {{"H100-SXM-80GB", 3.6}}};
};

TEST_F(MetricsHooksTest, CellsAreStablePerTuple) {
  gateway::GatewayMetrics::RequestCells* a =
      gateway_.Cells("chat", "alice", "standard");
  EXPECT_EQ(a, gateway_.Cells("chat", "alice", "standard"));
  gateway::GatewayMetrics::RequestCells* b =
      gateway_.Cells("chat", "alice", "batch");
  EXPECT_NE(a, b);
  EXPECT_EQ(a->deployment, b->deployment);      // per deployment
  EXPECT_EQ(a->input_tokens, b->input_tokens);  // per (deployment, tenant)
  EXPECT_EQ(a->throttled, gateway_.Cells("embed", "alice", "batch")->throttled);
}

TEST_F(MetricsHooksTest, HeldRequestsAndHoldTime) {
  gateway::GatewayMetrics::RequestCells* c =
      gateway_.Cells("chat", "alice", "standard");
  gateway::GatewayMetrics::Held(c);
  gateway::GatewayMetrics::Held(c);
  gateway::GatewayMetrics::Released(c, 0.03);
  gateway::GatewayMetrics::Held(nullptr);  // no metrics: ignored
  const std::string text = registry_.Expose();
  EXPECT_THAT(
      text, HasSubstr("gpusched_held_requests_total{deployment=\"chat\"} 2\n"));
  EXPECT_THAT(text, HasSubstr("gpusched_request_hold_seconds_bucket{"
                              "deployment=\"chat\",le=\"0.025\"} 0\n"));
  EXPECT_THAT(text, HasSubstr("gpusched_request_hold_seconds_bucket{"
                              "deployment=\"chat\",le=\"0.05\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("gpusched_request_hold_seconds_count{"
                              "deployment=\"chat\"} 1\n"));
}

TEST_F(MetricsHooksTest, StreamedRequestTimesAndSlo) {
  controller_.SetSlo("chat", /*ttft_ms=*/100, /*tpot_ms=*/20);
  gateway::GatewayMetrics::RequestCells* c =
      gateway_.Cells("chat", "alice", "standard");
  // First chunk at 50 ms, 11 tokens by 250 ms: TPOT 20 ms; meets both.
  gateway::GatewayMetrics::Finished(c, true, true, 1000 * kMs, 1050 * kMs,
                                    1250 * kMs, 30, 11);
  // TTFT 150 ms: misses the TTFT SLO.
  gateway::GatewayMetrics::Finished(c, true, true, 0, 150 * kMs, 200 * kMs, 30,
                                    2);
  // Failed: never meets it.
  gateway::GatewayMetrics::Finished(c, false, false, 0, 10 * kMs, 20 * kMs, 30,
                                    0);
  const std::string text = registry_.Expose();
  EXPECT_THAT(text, HasSubstr("gpusched_requests_total{deployment=\"chat\","
                              "tenant=\"alice\",class=\"standard\",outcome="
                              "\"ok\"} 2\n"));
  EXPECT_THAT(text, HasSubstr("outcome=\"error\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("gpusched_slo_requests_total{deployment=\"chat\""
                              ",tenant=\"alice\"} 3\n"));
  EXPECT_THAT(text, HasSubstr("gpusched_slo_met_requests_total{deployment="
                              "\"chat\",tenant=\"alice\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("gpusched_time_per_output_token_seconds_bucket{"
                              "deployment=\"chat\",le=\"0.02\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("gpusched_time_per_output_token_seconds_count{"
                              "deployment=\"chat\"} 2\n"));
  EXPECT_THAT(text, HasSubstr("gpusched_time_to_first_token_seconds_bucket{"
                              "deployment=\"chat\",le=\"0.1\"} 2\n"));
  EXPECT_THAT(text, HasSubstr("gpusched_input_tokens_total{deployment=\"chat\","
                              "tenant=\"alice\"} 90\n"));
  EXPECT_THAT(text, HasSubstr("gpusched_output_tokens_total{deployment=\"chat\""
                              ",tenant=\"alice\"} 13\n"));
}

// The SLO counters are per (deployment, tenant), also for tuples whose cells
// existed before the deployment had an SLO.
TEST_F(MetricsHooksTest, SloCountersPerTenant) {
  gateway::GatewayMetrics::RequestCells* early =
      gateway_.Cells("chat", "alice", "standard");
  gateway::GatewayMetrics::Finished(early, true, false, 0, 10 * kMs, 20 * kMs,
                                    1, 1);  // before the SLO: not counted
  controller_.SetSlo("chat", /*ttft_ms=*/100, /*tpot_ms=*/0);
  gateway::GatewayMetrics::RequestCells* late =
      gateway_.Cells("chat", "bob", "batch");
  gateway::GatewayMetrics::Finished(early, true, false, 0, 10 * kMs, 20 * kMs,
                                    1, 1);  // met
  gateway::GatewayMetrics::Finished(late, true, false, 0, 500 * kMs, 600 * kMs,
                                    1, 1);  // TTFT missed
  const std::string text = registry_.Expose();
  EXPECT_THAT(text, HasSubstr("gpusched_slo_requests_total{deployment=\"chat\""
                              ",tenant=\"alice\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("gpusched_slo_met_requests_total{deployment="
                              "\"chat\",tenant=\"alice\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("gpusched_slo_requests_total{deployment=\"chat\""
                              ",tenant=\"bob\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("gpusched_slo_met_requests_total{deployment="
                              "\"chat\",tenant=\"bob\"} 0\n"));
}

TEST_F(MetricsHooksTest, RejectionsAndThrottling) {
  gateway::GatewayMetrics::RequestCells* c =
      gateway_.Cells("chat", "bob", "batch");
  gateway::GatewayMetrics::Rejected(c,
                                    serving::RejectReason::kRateLimitedTokens);
  gateway::GatewayMetrics::Rejected(c, serving::RejectReason::kQueueTimeout);
  gateway::GatewayMetrics::Rejected(nullptr,
                                    serving::RejectReason::kQueueTimeout);
  gateway_.Invalid("unknown_priority");
  const std::string text = registry_.Expose();
  EXPECT_THAT(text, HasSubstr("outcome=\"rejected\"} 2\n"));
  EXPECT_THAT(text, HasSubstr("gpusched_request_rejections_total{deployment="
                              "\"chat\",reason=\"rate_limited_tokens\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("reason=\"queue_timeout\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("reason=\"model_queue_full\"} 0\n"));
  EXPECT_THAT(text, HasSubstr("gpusched_tenant_throttled_requests_total{"
                              "tenant=\"bob\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("gpusched_invalid_requests_total{reason="
                              "\"unknown_priority\"} 1\n"));
  // No SLO: no SLO series.
  EXPECT_THAT(text, Not(HasSubstr("gpusched_slo_requests_total{")));
}

TEST_F(MetricsHooksTest, GpuSecondsSplitByTokens) {
  gateway::GatewayMetrics::Finished(gateway_.Cells("chat", "alice", "standard"),
                                    true, false, 0, 1, 2, 30, 0);
  gateway::GatewayMetrics::Finished(gateway_.Cells("chat", "bob", "critical"),
                                    true, false, 0, 1, 2, 10, 0);
  // Half a GPU for 10 s: 5 GPU-seconds, 5 * 3.6 / 3600 = 0.005.
  controller_.Accrue("chat", {{"H100-SXM-80GB", 0.5}}, 10);
  // Idle for 10 s more: charged to the deployment only; an unpriced model
  // costs nothing.
  controller_.Accrue("chat", {{"L4-24GB", 0.5}}, 10);
  const std::string text = registry_.Expose();
  EXPECT_THAT(text, HasSubstr("gpusched_deployment_gpu_seconds_total{"
                              "deployment=\"chat\"} 10\n"));
  EXPECT_THAT(text, HasSubstr("gpusched_deployment_cost_total{deployment="
                              "\"chat\"} 0.005\n"));
  EXPECT_THAT(text, HasSubstr("gpusched_tenant_gpu_seconds_total{tenant="
                              "\"alice\"} 3.75\n"));
  EXPECT_THAT(text, HasSubstr("gpusched_tenant_gpu_seconds_total{tenant="
                              "\"bob\"} 1.25\n"));
}

TEST_F(MetricsHooksTest, EngineCountersSurviveRestarts) {
  runtime::EngineSignals s;
  s.prefix_cache_queries = 100;
  s.prefix_cache_hits = 40;
  controller_.EngineScraped("chat", "chat-0", s);
  s.prefix_cache_queries = 150;
  s.prefix_cache_hits = 50;
  controller_.EngineScraped("chat", "chat-0", s);
  s.prefix_cache_queries = 20;  // restarted
  s.prefix_cache_hits = 10;
  controller_.EngineScraped("chat", "chat-0", s);
  const std::string text = registry_.Expose();
  EXPECT_THAT(text, HasSubstr("gpusched_prefix_cache_queries_total{deployment="
                              "\"chat\"} 170\n"));
  EXPECT_THAT(text, HasSubstr("gpusched_prefix_cache_hits_total{deployment="
                              "\"chat\"} 60\n"));
}

TEST_F(MetricsHooksTest, PlacementAndScaling) {
  placement::Decision placed;
  placed.placed = true;
  controller_.Placement(placed, 0.00002);
  placement::Decision no;
  no.reasons = {{"GpuFit: insufficient GPU milli", 3},
                {"GpuModel: GPU model mismatch", 1}};
  controller_.Placement(no, 0.00001);
  controller_.Scaled("chat", 1, 3);
  controller_.Scaled("chat", 3, 3);
  controller_.Scaled("chat", 3, 2);
  ControllerMetrics::Snapshot snap;
  snap.gpus.push_back({.node = "n0",
                       .model = "H100-SXM-80GB",
                       .index = 1,
                       .memory_mib = 1024,
                       .allocated_memory_mib = 512,
                       .allocated_milli = 250});
  controller_.SetSource([snap] { return snap; });
  const std::string text = registry_.Expose();
  EXPECT_THAT(text, HasSubstr("gpusched_placement_attempts_total{result="
                              "\"placed\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("gpusched_unschedulable_total{plugin=\"GpuFit\","
                              "reason=\"insufficient GPU milli\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("gpusched_placement_duration_seconds_count 2\n"));
  EXPECT_THAT(text, HasSubstr("gpusched_scale_decisions_total{deployment="
                              "\"chat\",direction=\"up\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("direction=\"down\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("gpusched_gpu_utilization_ratio{node=\"n0\","
                              "gpu=\"1\",source=\"allocation\"} 0.25\n"));
  EXPECT_THAT(text, HasSubstr("gpusched_gpu_memory_used_bytes{node=\"n0\","
                              "gpu=\"1\",source=\"allocation\"} 536870912\n"));
  EXPECT_THAT(text, HasSubstr("gpusched_preemptions_total 0\n"));
}

// The families the alerting rules need (deploy/prometheus/): engine
// failures by reason, the loop's heartbeat, queue bounds, nodes and their
// replicas, tenants' GPUs against their quota.
TEST_F(MetricsHooksTest, AlertingFamilies) {
  controller_.ReplicaStarted("chat");
  controller_.ReplicaFailed("chat", "exited");
  controller_.ReplicaFailed("chat", "exited");
  controller_.ReplicaFailed("chat", "unhealthy");
  controller_.LoopPassed(1765000000.5);
  runtime::DriverMetrics::Snapshot snap;
  snap.deployments.push_back({"chat", 1, {{"ready", 1}}, 3, 0, 8});
  snap.deployments.push_back({"embed", 1, {{"ready", 1}}, 0, 0, 0});
  snap.nodes.push_back({"n1", true, 2});
  snap.nodes.push_back({"n2", false, 1});
  snap.tenants.push_back({"alice", 2, 4, 1.5});
  snap.tenants.push_back({"bob", 0, 0, 0});
  controller_.SetSource([snap] { return snap; });
  const std::string text = registry_.Expose();
  EXPECT_THAT(text, HasSubstr("gpusched_replica_failures_total{deployment="
                              "\"chat\",reason=\"exited\"} 2\n"));
  EXPECT_THAT(text, HasSubstr("gpusched_replica_failures_total{deployment="
                              "\"chat\",reason=\"unhealthy\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("gpusched_replica_failures_total{deployment="
                              "\"chat\",reason=\"failed\"} 0\n"));
  EXPECT_THAT(text, HasSubstr("gpusched_controller_last_pass_timestamp_seconds "
                              "1765000000.5\n"));
  EXPECT_THAT(text, HasSubstr("gpusched_queue_limit{deployment=\"chat\"} 8\n"));
  EXPECT_THAT(text,
              Not(HasSubstr("gpusched_queue_limit{deployment=\"embed\"")));
  EXPECT_THAT(text, HasSubstr("gpusched_node_usable{node=\"n1\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("gpusched_node_usable{node=\"n2\"} 0\n"));
  EXPECT_THAT(text, HasSubstr("gpusched_node_replicas{node=\"n2\"} 1\n"));
  EXPECT_THAT(text,
              HasSubstr("gpusched_tenant_gpu_quota{tenant=\"alice\"} 2\n"));
  EXPECT_THAT(text,
              HasSubstr("gpusched_tenant_gpu_limit{tenant=\"alice\"} 4\n"));
  EXPECT_THAT(text, Not(HasSubstr("gpusched_tenant_gpu_limit{tenant=\"bob\"")));
  EXPECT_THAT(
      text,
      HasSubstr("gpusched_tenant_gpus_allocated{tenant=\"alice\"} 1.5\n"));
  controller_.SetSource(nullptr);
}

}  // namespace
}  // namespace gpusched::api
