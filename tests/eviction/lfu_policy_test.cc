// LfuPolicy: frequency order, LRU among ties, dynamic aging.
#include "lfu_policy.h"

#include <gtest/gtest.h>

namespace kvfs::eviction {
namespace {

using Ids = std::vector<ObjectId>;

TEST(LfuPolicyTest, EvictsLeastFrequentFirstAndOldestAmongTies) {
  LfuPolicy p;
  for (ObjectId id : {1, 2, 3, 4}) p.Track(id, 10, {});
  p.Touch(3, {});
  p.Touch(3, {});
  p.Touch(1, {});
  // 2 and 4 tie at one use: the older (2) goes first. Then 1 (two uses), then 3 (three).
  EXPECT_EQ(p.frequency(3), 3u);
  EXPECT_EQ(p.Evict(4), (Ids{2, 4, 1, 3}));
}

TEST(LfuPolicyTest, AgingLetsNewBlocksOutliveOnceHotOnes) {
  LfuPolicy p;
  p.Track(1, 10, {});
  for (int i = 0; i < 3; ++i) p.Touch(1, {});  // priority 4
  // A stream of blocks each read twice; every eviction raises the floor new blocks start at.
  ObjectId next = 100;
  for (int round = 0; round < 6; ++round) {
    p.Track(next, 10, {});
    p.Touch(next, {});
    ++next;
    p.Evict(1);
  }
  // Classic LFU would keep block 1 forever; with aging it has been evicted by now.
  EXPECT_EQ(p.frequency(1), 0u);
}

TEST(LfuPolicyTest, PinnedSkippedAndRemoved) {
  LfuPolicy p;
  p.Track(1, 10, {});
  p.Track(2, 10, {});
  p.SetPinned(1, true);
  EXPECT_EQ(p.Evict(5), (Ids{2}));
  p.Remove(1);
  EXPECT_EQ(p.size(), 0u);
  EXPECT_EQ(p.tracked_bytes(), 0u);
}

}  // namespace
}  // namespace kvfs::eviction
