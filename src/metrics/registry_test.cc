#include "metrics/registry.h"

#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gpusched::metrics {
namespace {

using ::testing::HasSubstr;

TEST(RegistryTest, ExpositionGolden) {
  Registry r;
  CounterFamily* requests = r.AddCounter("gpusched_requests_total", "Requests.",
                                         {"deployment", "outcome"});
  GaugeFamily* depth = r.AddGauge("gpusched_queue_depth", "Queued.");
  HistogramFamily* ttft = r.AddHistogram(
      "gpusched_ttft_seconds", "First token.", {"deployment"}, {0.125, 0.5, 1});
  r.AddCollector({{"gpusched_gpu_healthy",
                   "1 when healthy.",
                   MetricType::kGauge,
                   {"gpu"}}},
                 [](std::vector<std::vector<Sample>>* s) {
                   (*s)[0].push_back({{"0"}, 1});
                   (*s)[0].push_back({{"1"}, 0});
                 });
  requests->With({"chat", "ok"})->Add();
  requests->With({"chat", "ok"})->Add(2);
  requests->With({"chat", "rejected"})->Add();
  depth->With({})->Set(3.5);
  Histogram* h = ttft->With({"chat"});
  h->Observe(0.0625);
  h->Observe(0.125);  // on the bound: counted in le="0.125"
  h->Observe(0.75);
  h->Observe(2);
  EXPECT_EQ(r.Expose(),
            "# HELP gpusched_requests_total Requests.\n"
            "# TYPE gpusched_requests_total counter\n"
            "gpusched_requests_total{deployment=\"chat\",outcome=\"ok\"} 3\n"
            "gpusched_requests_total{deployment=\"chat\",outcome=\"rejected\"}"
            " 1\n"
            "# HELP gpusched_queue_depth Queued.\n"
            "# TYPE gpusched_queue_depth gauge\n"
            "gpusched_queue_depth 3.5\n"
            "# HELP gpusched_ttft_seconds First token.\n"
            "# TYPE gpusched_ttft_seconds histogram\n"
            "gpusched_ttft_seconds_bucket{deployment=\"chat\",le=\"0.125\"} 2\n"
            "gpusched_ttft_seconds_bucket{deployment=\"chat\",le=\"0.5\"} 2\n"
            "gpusched_ttft_seconds_bucket{deployment=\"chat\",le=\"1\"} 3\n"
            "gpusched_ttft_seconds_bucket{deployment=\"chat\",le=\"+Inf\"} 4\n"
            "gpusched_ttft_seconds_sum{deployment=\"chat\"} 2.9375\n"
            "gpusched_ttft_seconds_count{deployment=\"chat\"} 4\n"
            "# HELP gpusched_gpu_healthy 1 when healthy.\n"
            "# TYPE gpusched_gpu_healthy gauge\n"
            "gpusched_gpu_healthy{gpu=\"0\"} 1\n"
            "gpusched_gpu_healthy{gpu=\"1\"} 0\n");
}

TEST(RegistryTest, FamiliesWithoutSamplesStillHaveHelpAndType) {
  Registry r;
  r.AddCounter("gpusched_preemptions_total", "Preemptions.");
  r.AddHistogram("gpusched_x_seconds", "X.", {"a"}, {1});
  EXPECT_EQ(r.Expose(),
            "# HELP gpusched_preemptions_total Preemptions.\n"
            "# TYPE gpusched_preemptions_total counter\n"
            "# HELP gpusched_x_seconds X.\n"
            "# TYPE gpusched_x_seconds histogram\n");
}

TEST(RegistryTest, Escaping) {
  EXPECT_EQ(EscapeLabelValue("a\\b\"c\nd"), "a\\\\b\\\"c\\nd");
  EXPECT_EQ(EscapeHelp("a\\b\"c\nd"), "a\\\\b\"c\\nd");
  Registry r;
  r.AddGauge("g", "multi\nline \\ help", {"name"})
      ->With({"we\"ird\\name\n"})
      ->Set(1);
  EXPECT_EQ(r.Expose(),
            "# HELP g multi\\nline \\\\ help\n"
            "# TYPE g gauge\n"
            "g{name=\"we\\\"ird\\\\name\\n\"} 1\n");
}

TEST(RegistryTest, FormatValue) {
  EXPECT_EQ(FormatValue(0), "0");
  EXPECT_EQ(FormatValue(-3), "-3");
  EXPECT_EQ(FormatValue(1e15), "1000000000000000");
  EXPECT_EQ(FormatValue(0.005), "0.005");
  EXPECT_EQ(FormatValue(1e20), "1e+20");
  EXPECT_EQ(FormatValue(std::numeric_limits<double>::infinity()), "+Inf");
  EXPECT_EQ(FormatValue(-std::numeric_limits<double>::infinity()), "-Inf");
  EXPECT_EQ(FormatValue(std::nan("")), "NaN");
}

TEST(RegistryTest, SeriesAreBounded) {
  Registry r(/*max_series=*/2);
  CounterFamily* f = r.AddCounter("c_total", "C.", {"k"});
  f->With({"a"})->Add();
  f->With({"b"})->Add();
  Counter* over = f->With({"c"});
  EXPECT_EQ(over, f->With({"d"}));
  EXPECT_EQ(f->With({"a"}), f->With({"a"}));  // known tuples still work
  over->Add(5);
  EXPECT_THAT(r.Expose(), HasSubstr("c_total{k=\"_overflow\"} 5\n"));
}

TEST(RegistryTest, ConcurrentUpdatesAndScrapes) {
  Registry r;
  CounterFamily* c = r.AddCounter("c_total", "C.", {"t"});
  HistogramFamily* h =
      r.AddHistogram("h_seconds", "H.", {"t"}, ExponentialBuckets(1, 2, 4));
  constexpr int kThreads = 4, kEach = 20000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      const std::string label = t % 2 ? "odd" : "even";
      Counter* cell = c->With({label});
      for (int i = 0; i < kEach; ++i) {
        cell->Add();
        h->With({label})->Observe(i % 10);
      }
    });
  }
  std::thread scraper([&] {
    for (int i = 0; i < 50; ++i) {
      const std::string text = r.Expose();
      ASSERT_THAT(text, HasSubstr("# TYPE h_seconds histogram"));
    }
  });
  for (auto& t : threads) t.join();
  scraper.join();
  EXPECT_EQ(c->With({"odd"})->value(), 2 * kEach);
  EXPECT_EQ(c->With({"even"})->value(), 2 * kEach);
  const Histogram::Snapshot s = h->With({"odd"})->snapshot();
  EXPECT_EQ(s.count, 2u * kEach);
  EXPECT_EQ(s.sum, 2.0 * kEach * 4.5);  // 0..9, mean 4.5
  for (size_t i = 1; i < s.cumulative.size(); ++i) {
    EXPECT_LE(s.cumulative[i - 1], s.cumulative[i]);
  }
  // le=1: 0 and 1; le=2: +2; le=4: +3,4; le=8: +5..8; +Inf: +9.
  EXPECT_EQ(s.cumulative,
            (std::vector<uint64_t>{8000, 12000, 20000, 36000, 40000}));
}

}  // namespace
}  // namespace gpusched::metrics
