// LogLimiter: lines per window, and the count of those left out on the next one let through.
#include "kvfs/log_limiter.h"

#include <gtest/gtest.h>

#include <string>

namespace kvfs {
namespace {

using namespace std::chrono_literals;

TEST(LogLimiter, LetsABurstThroughPerWindowAndCountsTheRest) {
  LogLimiter limiter(3, 10s);
  const auto t0 = LogLimiter::Clock::time_point{} + 100s;
  std::string note = "stale";
  for (int i = 0; i < 3; ++i) {
    EXPECT_TRUE(limiter.Allow(&note, t0 + std::chrono::seconds(i)));
    EXPECT_EQ(note, "");
  }
  for (int i = 0; i < 7; ++i) EXPECT_FALSE(limiter.Allow(&note, t0 + 5s));
  // A new window: the first line says what was left out, once.
  EXPECT_TRUE(limiter.Allow(&note, t0 + 10s));
  EXPECT_EQ(note, " (7 similar lines left out)");
  EXPECT_TRUE(limiter.Allow(&note, t0 + 11s));
  EXPECT_EQ(note, "");
}

}  // namespace
}  // namespace kvfs
