#include "sim/placement_sim.h"

#include <cstdio>
#include <fstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "inventory/alibaba_nodes.h"
#include "sim/alibaba_trace.h"
#include "sim/placement_report.h"

namespace gpusched::sim {
namespace {

using ::testing::HasSubstr;

const std::string kSample =
    std::string(GPUSCHED_SOURCE_DIR) + "/testdata/alibaba-gpu-v2023/";

std::string WriteTemp(const std::string& name, const std::string& text) {
  const std::string path = ::testing::TempDir() + name;
  std::ofstream(path) << text;
  return path;
}

TEST(ParseSeedsTest, RangesAndLists) {
  EXPECT_THAT(*ParseSeeds("42-45"), ::testing::ElementsAre(42, 43, 44, 45));
  EXPECT_THAT(*ParseSeeds("1,5,7-8"), ::testing::ElementsAre(1, 5, 7, 8));
  EXPECT_THAT(ParseSeeds("9-3").status().message(),
              HasSubstr("bad item '9-3'"));
  EXPECT_FALSE(ParseSeeds("x").ok());
  EXPECT_FALSE(ParseSeeds("").ok());
}

TEST(AlibabaTraceTest, ReadsTheSample) {
  auto nodes = inventory::ReadAlibabaNodes(kSample + "nodes.csv");
  ASSERT_TRUE(nodes.ok()) << nodes.status();
  EXPECT_EQ(nodes->size(), 122u);
  auto pods = ReadAlibabaPods(kSample + "pods.csv");
  ASSERT_TRUE(pods.ok()) << pods.status();
  EXPECT_EQ(pods->size(), 816u);
  int cpu = 0, share = 0, whole = 0;
  for (const TracePod& p : *pods) {
    switch (p.request.kind) {
      case inventory::GpuKind::kNone:
        ++cpu;
        break;
      case inventory::GpuKind::kFraction:
        ++share;
        break;
      default:
        ++whole;
    }
  }
  EXPECT_GT(cpu, 50);
  EXPECT_GT(share, 200);
  EXPECT_GT(whole, 300);
}

TEST(AlibabaTraceTest, ErrorsNameFileLineAndProblem) {
  const std::string header =
      "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\n";
  auto bad_share = ReadAlibabaPods(
      WriteTemp("p1.csv", header + "a,1000,10,1,500,\nb,1000,10,2,500,\n"));
  EXPECT_THAT(bad_share.status().message(),
              HasSubstr("p1.csv:3: num_gpu 2 with gpu_milli 500"));
  auto bad_int =
      ReadAlibabaPods(WriteTemp("p2.csv", header + "a,lots,10,1,500,\n"));
  EXPECT_THAT(bad_int.status().message(),
              HasSubstr("p2.csv:2: column 'cpu_milli': expected an integer"));
  auto missing = ReadAlibabaPods(WriteTemp("p3.csv", "name,cpu_milli\n"));
  EXPECT_THAT(missing.status().message(), HasSubstr("missing column(s)"));
  auto spec = ReadAlibabaPods(
      WriteTemp("p4.csv", header + "a,1000,10,1,1000,V100M16|V100M32\n"));
  ASSERT_TRUE(spec.ok());
  EXPECT_THAT((*spec)[0].request.gpu_models,
              ::testing::ElementsAre("V100M16", "V100M32"));
}

class PlacementSimTest : public ::testing::Test {
 protected:
  void SetUp() override {
    nodes_ = *inventory::ReadAlibabaNodes(kSample + "nodes.csv");
    pods_ = *ReadAlibabaPods(kSample + "pods.csv");
  }
  std::vector<inventory::NodeSpec> nodes_;
  std::vector<TracePod> pods_;
};

TEST_F(PlacementSimTest, SameSeedSameRun) {
  auto a = RunPlacementOnce(nodes_, pods_, "fgd", 42, 1.3);
  auto b = RunPlacementOnce(nodes_, pods_, "fgd", 42, 1.3);
  auto c = RunPlacementOnce(nodes_, pods_, "fgd", 43, 1.3);
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  EXPECT_EQ(a->pods_total, b->pods_total);
  EXPECT_EQ(a->pods_failed, b->pods_failed);
  EXPECT_EQ(a->allocated_pct, b->allocated_pct);
  EXPECT_NE(a->allocated_pct, c->allocated_pct);
}

TEST_F(PlacementSimTest, InflatesToTheTargetAndRecordsTheCurve) {
  auto r = RunPlacementOnce(nodes_, pods_, "best-fit", 7, 1.3);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_GT(r->pods_total, static_cast<int>(pods_.size()));
  // The curve runs from 0 to 130% arrived, allocation never decreasing
  // and never above what arrived.
  ASSERT_TRUE(r->allocated_pct.count(100));
  ASSERT_TRUE(r->allocated_pct.count(130));
  double last = 0;
  for (const auto& [k, v] : r->allocated_pct) {
    EXPECT_GE(v + 1e-9, last) << "at " << k;
    EXPECT_LE(v, k + 1.0) << "at " << k;
    last = v;
  }
  EXPECT_DOUBLE_EQ(r->unallocated_pct.at(100), 100 - r->allocated_pct.at(100));
  EXPECT_GT(r->pods_failed, 0);
  int by_reason = 0;
  for (const auto& [reason, n] : r->failed_by_reason) by_reason += n;
  EXPECT_EQ(by_reason, r->pods_failed);
}

TEST_F(PlacementSimTest, FragmentationAwarePoliciesPackBetter) {
  PlacementSimConfig config;
  config.nodes = nodes_;
  config.pods = pods_;
  config.policies = {"random", "best-fit", "fgd", "fillfrag"};
  config.seeds = {42, 43, 44, 45, 46};
  config.threads = 2;
  auto exp = RunPlacementExperiment(config);
  ASSERT_TRUE(exp.ok()) << exp.status();
  ASSERT_EQ(exp->results.size(), 20u);
  EXPECT_EQ(exp->gpus_total, 626);
  std::map<std::string, double> at100;
  for (const PlacementSummary& s : exp->summary) {
    at100[s.policy] = s.unallocated_pct.at(100).first;
  }
  EXPECT_LT(at100["best-fit"], at100["random"]);
  EXPECT_LT(at100["fgd"], at100["best-fit"]);
  EXPECT_LT(at100["fillfrag"], at100["fgd"]);

  const nlohmann::json j = PlacementReportJson(*exp, {"n.csv", "p.csv"});
  EXPECT_EQ(j["gpus_total"], 626);
  const auto& r0 = j["results"][0];
  for (const char* key : {"policy", "seed", "pods_total", "pods_failed",
                          "unallocated_pct", "wall_seconds"}) {
    EXPECT_TRUE(r0.contains(key)) << key;
  }
  EXPECT_TRUE(r0["unallocated_pct"].contains("100"));
  EXPECT_TRUE(r0["unallocated_pct"].contains("130"));
  EXPECT_TRUE(j["summary"][0]["unallocated_pct_100"].contains("sd"));
  const std::string html = PlacementReportHtml(*exp, {"n.csv", "p.csv"});
  EXPECT_THAT(html, HasSubstr("<svg"));
  EXPECT_THAT(html, HasSubstr("fillfrag"));
  EXPECT_THAT(html, ::testing::Not(HasSubstr("http://cdn")));
}

TEST_F(PlacementSimTest, RejectsBadConfigs) {
  PlacementSimConfig config;
  config.nodes = nodes_;
  config.pods = pods_;
  config.seeds = {1};
  config.policies = {"fgd", "magic"};
  EXPECT_THAT(RunPlacementExperiment(config).status().message(),
              HasSubstr("unknown placement policy 'magic'"));
  config.policies = {"fgd"};
  config.threads = -1;
  EXPECT_THAT(RunPlacementExperiment(config).status().message(),
              HasSubstr("--threads"));
  config.threads = 0;
  config.inflate = 0;
  EXPECT_THAT(RunPlacementExperiment(config).status().message(),
              HasSubstr("--inflate"));
}

}  // namespace
}  // namespace gpusched::sim
