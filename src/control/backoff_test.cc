#include "control/backoff.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace gpusched::control {
namespace {

struct BackoffStep {
  enum Kind { kStart, kExit } kind;
  Micros at;
  Micros want_next_start;  // NextStart(at) after the step
};

TEST(RestartBackoffTest, Table) {
  constexpr Micros s = kMicrosPerSecond;
  struct Case {
    std::string label;
    std::vector<BackoffStep> steps;
  };
  const std::vector<Case> cases = {
      {"first exit waits 1 s",
       {{BackoffStep::kStart, 0, 0}, {BackoffStep::kExit, 10 * s, 11 * s}}},
      {"quick exits double",
       {{BackoffStep::kStart, 0, 0},
        {BackoffStep::kExit, 1 * s, 2 * s},
        {BackoffStep::kStart, 2 * s, 2 * s},
        {BackoffStep::kExit, 3 * s, 5 * s},
        {BackoffStep::kStart, 5 * s, 5 * s},
        {BackoffStep::kExit, 6 * s, 10 * s},
        {BackoffStep::kStart, 10 * s, 10 * s},
        {BackoffStep::kExit, 11 * s, 19 * s}}},
      {"failed starts (no OnStarted) double too",
       {{BackoffStep::kExit, 0, 1 * s},
        {BackoffStep::kExit, 1 * s, 3 * s},
        {BackoffStep::kExit, 3 * s, 7 * s},
        {BackoffStep::kExit, 7 * s, 15 * s},
        {BackoffStep::kExit, 15 * s, 31 * s},
        {BackoffStep::kExit, 31 * s, 63 * s},
        {BackoffStep::kExit, 63 * s, 123 * s},
        {BackoffStep::kExit, 123 * s, 183 * s}}},
      {"a 5 min run resets",
       {{BackoffStep::kExit, 0, 1 * s},
        {BackoffStep::kExit, 1 * s, 3 * s},
        {BackoffStep::kExit, 3 * s, 7 * s},
        {BackoffStep::kStart, 7 * s, 7 * s},
        {BackoffStep::kExit, 307 * s, 308 * s}}},
      {"4:59 does not reset",
       {{BackoffStep::kExit, 0, 1 * s},
        {BackoffStep::kStart, 1 * s, 1 * s},
        {BackoffStep::kExit, 300 * s, 302 * s}}},
      {"asking late returns now",
       {{BackoffStep::kExit, 0, 1 * s}, {BackoffStep::kStart, 50 * s, 50 * s}}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.label);
    RestartBackoff backoff;
    EXPECT_EQ(backoff.NextStart(0), 0);
    for (const BackoffStep& step : c.steps) {
      if (step.kind == BackoffStep::kStart) {
        backoff.OnStarted(step.at);
      } else {
        backoff.OnExit(step.at);
      }
      EXPECT_EQ(backoff.NextStart(step.at), step.want_next_start)
          << "at " << step.at;
    }
  }
}

TEST(RestartBackoffTest, CountsFailuresAndCapsDelay) {
  RestartBackoff backoff;
  Micros now = 0;
  for (int i = 0; i < 20; ++i) {
    backoff.OnExit(now);
    now = backoff.NextStart(now);
  }
  EXPECT_EQ(backoff.consecutive_failures(), 20);
  EXPECT_EQ(backoff.current_delay(), 60 * kMicrosPerSecond);
  backoff.OnStarted(now);
  backoff.OnExit(now + 300 * kMicrosPerSecond);
  EXPECT_EQ(backoff.consecutive_failures(), 1);
  EXPECT_EQ(backoff.current_delay(), 2 * kMicrosPerSecond);
}

}  // namespace
}  // namespace gpusched::control
