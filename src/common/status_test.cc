#include "common/status.h"

#include "common/check.h"
#include "gtest/gtest.h"

namespace gpusched {
namespace {

absl::StatusOr<int> Half(int x) {
  if (x % 2 != 0) return absl::InvalidArgumentError("odd");
  return x / 2;
}

absl::StatusOr<int> Quarter(int x) {
  ASSIGN_OR_RETURN(int h, Half(x));
  ASSIGN_OR_RETURN(int q, Half(h));
  return q;
}

absl::Status CheckEven(int x) {
  RETURN_IF_ERROR(Half(x).status());
  return absl::OkStatus();
}

TEST(StatusTest, MacrosPropagate) {
  EXPECT_EQ(*Quarter(8), 2);
  EXPECT_EQ(Quarter(6).status().message(), "odd");
  EXPECT_TRUE(CheckEven(4).ok());
  EXPECT_FALSE(CheckEven(3).ok());
}

TEST(CheckDeathTest, AbortsWithMessage) {
  EXPECT_DEATH(CHECK(1 + 1 == 3) << "gpu " << 7 << " given twice",
               "CHECK failed: 1 \\+ 1 == 3 gpu 7 given twice");
  CHECK(true) << "never printed";
}

}  // namespace
}  // namespace gpusched
