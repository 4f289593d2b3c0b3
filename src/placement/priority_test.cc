#include "placement/priority.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gpusched::placement {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(PriorityClassesTest, BuiltinDefaults) {
  const PriorityClasses pc = PriorityClasses::Defaults();
  struct Row {
    const char* name;
    int value;
    bool preemptible;
  };
  const Row rows[] = {
      {"system", 2000, false}, {"critical", 1000, true},
      {"standard", 500, true}, {"batch", 100, true},
      {"sheddable", 0, true},
  };
  for (const Row& row : rows) {
    SCOPED_TRACE(row.name);
    absl::StatusOr<PriorityClass> c = pc.Find(row.name);
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_EQ(c->value, row.value);
    EXPECT_EQ(c->preemptible, row.preemptible);
    EXPECT_FALSE(c->description.empty());
  }
  std::vector<std::string> order;
  for (const PriorityClass& c : pc.classes()) order.push_back(c.name);
  EXPECT_THAT(order, ElementsAre("system", "critical", "standard", "batch",
                                 "sheddable"));
  EXPECT_EQ(pc.default_class().name, "standard");
}

TEST(PriorityClassesTest, EmptyNameMeansDefault) {
  const PriorityClasses pc = PriorityClasses::Defaults();
  EXPECT_EQ(pc.Find("")->name, "standard");
  absl::StatusOr<inventory::PodInfo> info = pc.MakePodInfo("team-a", "");
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->tenant, "team-a");
  EXPECT_EQ(info->priority, 500);
  EXPECT_TRUE(info->preemptible);
  info = pc.MakePodInfo("ops", "system");
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->priority, 2000);
  EXPECT_FALSE(info->preemptible);
}

TEST(PriorityClassesTest, UnknownClassNamesTheKnownOnes) {
  const PriorityClasses pc = PriorityClasses::Defaults();
  absl::StatusOr<PriorityClass> c = pc.Find("urgent");
  EXPECT_EQ(c.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(c.status().message()),
              AllOf(HasSubstr("unknown priority class 'urgent'"),
                    HasSubstr("known: system, critical, standard, batch, "
                              "sheddable")));
  EXPECT_EQ(pc.MakePodInfo("t", "urgent").status().code(),
            absl::StatusCode::kNotFound);
}

TEST(PriorityClassesTest, CustomClasses) {
  absl::StatusOr<PriorityClasses> pc =
      PriorityClasses::Create({{"low", 1, true, ""},
                               {"high", 10, false, ""},
                               {"also-low", 1, true, ""}},
                              "low");
  ASSERT_TRUE(pc.ok()) << pc.status();
  std::vector<std::string> order;
  for (const PriorityClass& c : pc->classes()) order.push_back(c.name);
  // Highest first; equal values keep their configured order.
  EXPECT_THAT(order, ElementsAre("high", "low", "also-low"));
  EXPECT_EQ(pc->default_class().name, "low");
}

TEST(PriorityClassesTest, ValidationListsEveryProblem) {
  struct Case {
    const char* label;
    std::vector<PriorityClass> classes;
    std::string default_class;
    std::vector<std::string> problems;
  };
  const Case cases[] = {
      {"empty name",
       {{"", 1, true, ""}, {"a", 2, true, ""}},
       "a",
       {"priority class #1 has no name"}},
      {"duplicate",
       {{"a", 1, true, ""}, {"a", 2, true, ""}},
       "a",
       {"priority class 'a' is declared twice"}},
      {"default missing",
       {{"a", 1, true, ""}},
       "standard",
       {"default priority class 'standard' is not declared"}},
      {"all at once",
       {{"", 1, true, ""}, {"b", 1, true, ""}, {"b", 3, true, ""}},
       "c",
       {"3 problems", "#1 has no name", "'b' is declared twice",
        "'c' is not declared"}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.label);
    absl::StatusOr<PriorityClasses> pc =
        PriorityClasses::Create(c.classes, c.default_class);
    ASSERT_FALSE(pc.ok());
    EXPECT_EQ(pc.status().code(), absl::StatusCode::kInvalidArgument);
    for (const std::string& p : c.problems) {
      EXPECT_THAT(std::string(pc.status().message()), HasSubstr(p));
    }
  }
}

}  // namespace
}  // namespace gpusched::placement
