#include "api/control_query.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gpusched::api {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Pair;

TEST(ControlTargetTest, SplitsAndDecodesPathAndQuery) {
  auto t = ParseControlTarget(
      "/api/v1//deployments/chat%2Dv2/logs?tail=5&replica=chat-v2-0&"
      "stream=stdout&flag&k=a+b%20c");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->path, "/api/v1//deployments/chat%2Dv2/logs");
  EXPECT_THAT(t->parts, ElementsAre("deployments", "chat-v2", "logs"));
  EXPECT_THAT(t->query,
              ElementsAre(Pair("tail", "5"), Pair("replica", "chat-v2-0"),
                          Pair("stream", "stdout"), Pair("flag", ""),
                          Pair("k", "a b c")));
  EXPECT_EQ(t->Get("missing"), "");
  EXPECT_TRUE(MatchesRoute("deployments/{}/logs", t->parts));
  EXPECT_FALSE(MatchesRoute("deployments/{}", t->parts));
  EXPECT_FALSE(MatchesRoute("deployments/{}/logs/x", t->parts));
  EXPECT_FALSE(MatchesRoute("tenants/{}/logs", t->parts));
}

TEST(ControlTargetTest, RejectsWhatItCannotRead) {
  EXPECT_THAT(ParseControlTarget("/api/v1/x?a=%4").status().message(),
              HasSubstr("'%' at byte 12 must be followed by two hex digits"));
  EXPECT_THAT(ParseControlTarget("/api/v1/a%zz").status().message(),
              HasSubstr("path: '%' at byte 9"));
  EXPECT_THAT(ParseControlTarget("/api/v1/a%2Fb").status().message(),
              HasSubstr("encoded '/'"));
  EXPECT_THAT(ParseControlTarget("/api/v1/a%0Ab").status().message(),
              HasSubstr("control characters"));
  EXPECT_THAT(
      ParseControlTarget("/api/v1/1/2/3/4/5/6/7/8/9").status().message(),
      HasSubstr("more than 8 segments"));
  std::string many = "/api/v1/events?";
  for (int i = 0; i < 33; ++i) many += "kind=x&";
  EXPECT_THAT(ParseControlTarget(many).status().message(),
              HasSubstr("more than 32 parameters"));
  EXPECT_THAT(ParseControlTarget("/api/v1/x?" + std::string(9000, 'a'))
                  .status()
                  .message(),
              HasSubstr("at most 8192"));
  EXPECT_FALSE(ParseControlTarget("/api/v10").ok());
  EXPECT_TRUE(IsControlPath("/api/v1"));
  EXPECT_FALSE(IsControlPath("/api/v10"));
}

TEST(ControlTargetTest, EventQueryIsBounded) {
  auto f = ParseEventQuery(*ParseControlTarget(
      "/api/v1/events?deployment=chat&kind=a&kind=b&since=-5&limit=1000"));
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->deployment, "chat");
  EXPECT_THAT(f->kinds, ElementsAre("a", "b"));
  EXPECT_EQ(f->since, -5);
  EXPECT_EQ(f->limit, 1000);
  EXPECT_EQ(ParseEventQuery(*ParseControlTarget("/api/v1/events"))->limit, 100);
  for (const char* bad : {"limit=0", "limit=1001", "limit=x", "since=1.5"}) {
    auto r = ParseEventQuery(
        *ParseControlTarget(std::string("/api/v1/events?") + bad));
    EXPECT_FALSE(r.ok()) << bad;
  }
  EXPECT_THAT(ParseEventQuery(*ParseControlTarget("/api/v1/events?limit=0"))
                  .status()
                  .message(),
              HasSubstr("limit must be an integer from 1 to 1000, got '0'"));
  std::string kinds = "/api/v1/events?";
  for (int i = 0; i < 17; ++i) kinds += "kind=k&";
  EXPECT_THAT(ParseEventQuery(*ParseControlTarget(kinds)).status().message(),
              HasSubstr("kind: at most 16 kinds"));
}

TEST(ControlTargetTest, LogsQueryIsBounded) {
  auto q = ParseLogsQuery(*ParseControlTarget("/api/v1/deployments/a/logs"));
  ASSERT_TRUE(q.ok());
  EXPECT_EQ(q->stream, "stderr");
  EXPECT_EQ(q->tail, 100);
  EXPECT_EQ(
      ParseLogsQuery(*ParseControlTarget("/api/v1/d/a/logs?tail=10000"))->tail,
      10000);
  EXPECT_THAT(ParseLogsQuery(*ParseControlTarget("/api/v1/d/a/logs?tail=0"))
                  .status()
                  .message(),
              HasSubstr("tail must be an integer from 1 to 10000 lines"));
  EXPECT_THAT(
      ParseLogsQuery(*ParseControlTarget("/api/v1/d/a/logs?stream=both"))
          .status()
          .message(),
      HasSubstr("stream must be stdout or stderr, got 'both'"));
}

}  // namespace
}  // namespace gpusched::api
