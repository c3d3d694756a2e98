#include "recent_publishes.h"

#include <gtest/gtest.h>

#include <vector>

namespace kvfs::cluster {
namespace {

using Clock = RecentPublishes::Clock;

LayoutRef NewLayout(uint64_t size) {
  auto l = std::make_shared<Layout>();
  l->size = size;
  return l;
}

TEST(RecentPublishes, FindsWhatWasPublished) {
  RecentPublishes recent;
  LayoutRef local = NewLayout(1), cluster = NewLayout(1);
  EXPECT_EQ(recent.Find(local), nullptr);
  recent.Add(local, cluster);
  EXPECT_EQ(recent.Find(local), cluster);
  EXPECT_EQ(recent.Find(NewLayout(1)), nullptr);
  EXPECT_EQ(recent.Find(nullptr), nullptr);
}

// The held copy keeps every published local layout alive: entries must still leave once they
// are older than the window (they were kept forever before, and scanned on every publish).
TEST(RecentPublishes, EntriesOfLiveLayoutsLeaveAfterTheWindow) {
  RecentPublishes recent(std::chrono::seconds(60));
  const Clock::time_point t0{};
  std::vector<LayoutRef> held;  // alive throughout, like the engine's held copies
  for (int i = 0; i < 1000; ++i) {
    held.push_back(NewLayout(static_cast<uint64_t>(i)));
    recent.Add(held.back(), NewLayout(static_cast<uint64_t>(i)), t0 + std::chrono::milliseconds(i));
  }
  EXPECT_EQ(recent.size(), 1000u);
  EXPECT_NE(recent.Find(held[0]), nullptr);
  // A minute and a half later, one more publish trims all the old ones.
  LayoutRef late = NewLayout(7);
  recent.Add(late, NewLayout(7), t0 + std::chrono::seconds(90));
  EXPECT_EQ(recent.size(), 1u);
  EXPECT_EQ(recent.Find(held[0]), nullptr);
  EXPECT_NE(recent.Find(late), nullptr);
}

TEST(RecentPublishes, StaysBoundedUnderASteadyRate) {
  RecentPublishes recent(std::chrono::seconds(1));
  std::vector<LayoutRef> held;
  const Clock::time_point t0{};
  for (int i = 0; i < 10000; ++i) {  // 1000 publishes a second for 10 s
    held.push_back(NewLayout(1));
    recent.Add(held.back(), NewLayout(1), t0 + std::chrono::milliseconds(i));
    EXPECT_LE(recent.size(), 1002u) << "after " << i;
  }
}

// A layout freed and a new one allocated at the same address: the new one is not taken for
// the old publish, and trimming the old entry leaves the new one alone.
TEST(RecentPublishes, AReusedAddressIsANewLayout) {
  RecentPublishes recent(std::chrono::seconds(10));
  const Clock::time_point t0{};
  auto storage = std::make_shared<Layout>();
  LayoutRef first(storage.get(), [](const Layout*) {});  // same address, separate owners
  LayoutRef first_cluster = NewLayout(1);
  recent.Add(first, first_cluster, t0);
  first.reset();
  LayoutRef second(storage.get(), [](const Layout*) {});
  EXPECT_EQ(recent.Find(second), nullptr) << "a dead layout's entry matched its address";
  LayoutRef second_cluster = NewLayout(2);
  recent.Add(second, second_cluster, t0 + std::chrono::seconds(5));
  // The first entry's time is up; the second must survive its trimming.
  LayoutRef other = NewLayout(3);
  recent.Add(other, NewLayout(3), t0 + std::chrono::seconds(12));
  EXPECT_EQ(recent.Find(second), second_cluster);
}

}  // namespace
}  // namespace kvfs::cluster
