#include "common/csv.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gpusched {
namespace {

using ::testing::HasSubstr;

TEST(CsvTest, ReadsColumnsByName) {
  auto t = CsvTable::Parse("b,a\n1,x\n\n2,\"y,z\"\n", "t.csv");
  ASSERT_TRUE(t.ok()) << t.status();
  ASSERT_EQ(t->rows().size(), 2u);
  EXPECT_EQ(*t->rows()[0].GetInt("b"), 1);
  EXPECT_EQ(*t->rows()[0].Get("a"), "x");
  EXPECT_EQ(*t->rows()[1].Get("a"), "y,z");
  EXPECT_EQ(t->rows()[1].line(), 4);
}

TEST(CsvTest, ErrorsNameFileLineAndColumn) {
  auto t = CsvTable::Parse("n,cpu\nnode-1,abc\n", "nodes.csv");
  ASSERT_TRUE(t.ok());
  auto v = t->rows()[0].GetInt("cpu");
  ASSERT_FALSE(v.ok());
  EXPECT_THAT(v.status().message(), HasSubstr("nodes.csv:2: column 'cpu'"));
  EXPECT_THAT(v.status().message(), HasSubstr("'abc'"));
  EXPECT_THAT(t->rows()[0].Get("gpu").status().message(),
              HasSubstr("no column 'gpu'"));
  EXPECT_THAT(t->RequireColumns({"n", "gpu", "model"}).message(),
              HasSubstr("missing column(s) gpu, model"));
}

TEST(CsvTest, RejectsExtraFieldsAndEmptyFiles) {
  EXPECT_THAT(CsvTable::Parse("a\n1,2\n", "x.csv").status().message(),
              HasSubstr("x.csv:2: 2 fields but the header has 1"));
  EXPECT_FALSE(CsvTable::Parse("", "e.csv").ok());
  EXPECT_EQ(CsvTable::ReadFile("/nonexistent/x.csv").status().code(),
            absl::StatusCode::kNotFound);
}

TEST(CsvTest, RowsOutliveMovedTable) {
  auto t = CsvTable::Parse("a\n7\n", "t.csv");
  ASSERT_TRUE(t.ok());
  CsvTable moved = *std::move(t);
  std::vector<CsvRow> rows = moved.rows();
  EXPECT_EQ(*rows[0].GetInt("a"), 7);
}

}  // namespace
}  // namespace gpusched
