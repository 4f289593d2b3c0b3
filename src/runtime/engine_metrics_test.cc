#include "runtime/engine_metrics.h"

#include "gtest/gtest.h"

namespace gpusched::runtime {
namespace {

TEST(EngineMetricsTest, ReadsVllmSignalsSummedOverLabels) {
  const auto names = MetricNamesFor("vllm:");
  ASSERT_TRUE(names.has_value());
  const EngineSignals s = ParseEngineSignals(
      "# HELP vllm:num_requests_running x\n"
      "# TYPE vllm:num_requests_running gauge\n"
      "vllm:num_requests_running{model_name=\"a\"} 3\n"
      "vllm:num_requests_running{model_name=\"b\"} 2\n"
      "vllm:num_requests_waiting{model_name=\"a\"} 7 1700000000\n"
      "vllm:gpu_cache_usage_perc{model_name=\"a\"} 0.25\n"
      "vllm:num_requests_running_total 99\n"
      "vllm:prefix_cache_queries_total{model_name=\"a\"} 1000\n"
      "vllm:prefix_cache_hits_total{model_name=\"a\"} 250\n"
      "garbage line\n",
      *names);
  EXPECT_EQ(s.running, 5);
  EXPECT_EQ(s.prefix_cache_queries, 1000);
  EXPECT_EQ(s.prefix_cache_hits, 250);
  EXPECT_EQ(s.waiting, 7);
  EXPECT_DOUBLE_EQ(s.kv_used_fraction, 0.25);
}

// Found by fuzz_engine_metrics: huge samples summed into an int came out
// negative; negative samples were taken as they came.
TEST(EngineMetricsTest, OutOfRangeSamplesAreBoundedOrSkipped) {
  const auto names = *MetricNamesFor("vllm:");
  const EngineSignals s = ParseEngineSignals(
      "vllm:num_requests_running 8888888888888888888888\n"
      "vllm:num_requests_running 1e308\n"
      "vllm:num_requests_waiting -3\n"
      "vllm:gpu_cache_usage_perc 7.5\n",
      names);
  EXPECT_EQ(s.running, 1000000000);
  EXPECT_EQ(s.waiting, -1);  // the only sample was negative: unknown
  EXPECT_EQ(s.kv_used_fraction, 1.0);
}

TEST(EngineMetricsTest, AbsentMetricsStayUnknown) {
  const EngineSignals s = ParseEngineSignals("sglang:num_queue_reqs 4\n",
                                             *MetricNamesFor("sglang:"));
  EXPECT_EQ(s.running, -1);
  EXPECT_EQ(s.waiting, 4);
  EXPECT_EQ(s.kv_used_fraction, -1);
  EXPECT_EQ(s.prefix_cache_hits, -1);
  EXPECT_FALSE(MetricNamesFor("unknown_").has_value());
  // The newer vLLM name for the KV gauge is read as well.
  EXPECT_DOUBLE_EQ(ParseEngineSignals("vllm:kv_cache_usage_perc 0.5\n",
                                      *MetricNamesFor("vllm:"))
                       .kv_used_fraction,
                   0.5);
}

}  // namespace
}  // namespace gpusched::runtime
