#include "control/prices.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gpusched::control {
namespace {

using ::testing::HasSubstr;

TEST(GpuPrices, TheShippedTableParsesAndCitesItsSources) {
  const auto& table = BuiltinGpuPrices();
  ASSERT_FALSE(table.empty());
  for (const GpuPrice& p : table) {
    EXPECT_GT(p.usd_per_node_hour, 0) << p.gpu;
    EXPECT_FALSE(p.source.empty()) << p.gpu;
  }
  auto a100 = FindGpuPrice(table, "a100-80gb", false);
  ASSERT_TRUE(a100.ok()) << a100.status();
  EXPECT_EQ(a100->gpus_per_node, 8);
  auto spot = FindGpuPrice(table, "A100-80GB", true);
  ASSERT_TRUE(spot.ok());
  EXPECT_LT(spot->usd_per_node_hour, a100->usd_per_node_hour);
  auto none = FindGpuPrice(table, "B200", false);
  EXPECT_EQ(none.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(none.status().message()),
              HasSubstr("set the pool's price_per_node_hour"));
}

TEST(GpuPrices, ErrorsNameTheLineAndColumn) {
  const std::string head = "gpu,spot,gpus_per_node,usd_per_node_hour,source\n";
  struct Case {
    std::string rows, error;
  } cases[] = {
      {"A,maybe,8,1,x\n", "p.csv:2: column spot: true or false, not 'maybe'"},
      {"A,false,0,1,x\n", "p.csv:2: column gpus_per_node: must be 1..16"},
      {"A,false,8,-2,x\n", "p.csv:2: column usd_per_node_hour: must be"},
      {"A,false,8,1,x\na,false,8,2,y\n", "p.csv:3: column gpu: a is given"},
      {",false,8,1,x\n", "p.csv:2: column gpu: required"},
  };
  for (const Case& c : cases) {
    auto t = ParseGpuPrices(head + c.rows, "p.csv");
    ASSERT_FALSE(t.ok()) << c.rows;
    EXPECT_THAT(std::string(t.status().message()), HasSubstr(c.error));
  }
  auto ok = ParseGpuPrices(head + "A,true,4,2.5,x\n", "p.csv");
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_DOUBLE_EQ((*ok)[0].usd_per_gpu_hour(), 0.625);
}

}  // namespace
}  // namespace gpusched::control
