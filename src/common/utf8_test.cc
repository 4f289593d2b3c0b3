#include "common/utf8.h"

#include <string>

#include "gtest/gtest.h"

namespace gpusched {
namespace {

TEST(Utf8Test, FindsTheFirstInvalidByte) {
  constexpr size_t kOk = absl::string_view::npos;
  EXPECT_EQ(InvalidUtf8At(""), kOk);
  EXPECT_EQ(InvalidUtf8At("plain ascii"), kOk);
  EXPECT_EQ(InvalidUtf8At("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"), kOk);
  EXPECT_EQ(InvalidUtf8At("ab\xff"), 2u);            // never valid
  EXPECT_EQ(InvalidUtf8At("a\xc3"), 1u);             // cut short
  EXPECT_EQ(InvalidUtf8At("\xc0\xaf"), 0u);          // overlong '/'
  EXPECT_EQ(InvalidUtf8At("\xe0\x80\xaf"), 0u);      // overlong
  EXPECT_EQ(InvalidUtf8At("\xed\xa0\x80"), 0u);      // a surrogate
  EXPECT_EQ(InvalidUtf8At("\xf4\x90\x80\x80"), 0u);  // above U+10FFFF
  EXPECT_EQ(InvalidUtf8At("x\xe2\x82"), 1u);         // cut short
  EXPECT_EQ(InvalidUtf8At("\xe2\x28\xa1"), 0u);      // bad continuation
}

}  // namespace
}  // namespace gpusched
