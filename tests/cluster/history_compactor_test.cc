// When the lowest live node compacts etcd's history (history_compactor.h): to the revision etcd
// had `retention` ago, never twice to the same one, at most every retention / 10.
#include "history_compactor.h"

#include <gtest/gtest.h>

namespace kvfs::cluster {
namespace {

using Clock = HistoryCompactor::Clock;
using std::chrono::seconds;

TEST(HistoryCompactor, CompactsToTheRevisionOfRetentionAgoEveryTenthOfIt) {
  HistoryCompactor c(seconds(60));
  const Clock::time_point t0{};
  auto at = [&](int s) { return t0 + seconds(1000 + s); };
  // One change every second: revision 100 + 10 s at second s.
  for (int s = 0; s < 60; ++s) EXPECT_EQ(c.Due(at(s), 100 + 10 * s), 0) << s;
  EXPECT_EQ(c.Due(at(60), 700), 100);  // what etcd had 60 s ago
  c.Done(at(60), 100);
  for (int s = 61; s < 66; ++s) EXPECT_EQ(c.Due(at(s), 100 + 10 * s), 0) << s;  // the gap: 6 s
  EXPECT_EQ(c.Due(at(66), 760), 160);
  c.Done(at(66), 160);
  EXPECT_EQ(c.compacted(), 160);
}

TEST(HistoryCompactor, AQuietEtcdIsCompactedOnce) {
  HistoryCompactor c(seconds(10));
  const Clock::time_point t0 = Clock::time_point{} + seconds(1000);
  EXPECT_EQ(c.Due(t0, 50), 0);
  EXPECT_EQ(c.Due(t0 + seconds(10), 50), 50);
  c.Done(t0 + seconds(10), 50);
  for (int s = 11; s < 100; ++s) EXPECT_EQ(c.Due(t0 + seconds(s), 50), 0) << s;
}

TEST(HistoryCompactor, NeverGoesBackBehindWhatAnotherNodeCompacted) {
  HistoryCompactor c(seconds(10));
  const Clock::time_point t0 = Clock::time_point{} + seconds(1000);
  EXPECT_EQ(c.Due(t0, 50), 0);
  c.Done(t0 + seconds(5), 80);  // etcd said: compacted (to 80, by a node before this one)
  EXPECT_EQ(c.Due(t0 + seconds(10), 90), 0);  // 50 is behind it
  EXPECT_EQ(c.Due(t0 + seconds(20), 95), 90);
}

TEST(HistoryCompactor, RetentionZeroNeverCompacts) {
  HistoryCompactor c(seconds(0));
  const Clock::time_point t0 = Clock::time_point{} + seconds(1000);
  for (int s = 0; s < 100; ++s) EXPECT_EQ(c.Due(t0 + seconds(s), 10 * s + 1), 0) << s;
}

}  // namespace
}  // namespace kvfs::cluster
