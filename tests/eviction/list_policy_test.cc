// LruPolicy and FifoPolicy: eviction order, pins, removal, the factory.
#include <gtest/gtest.h>

#include "eviction_policy.h"
#include "fifo_policy.h"
#include "lru_policy.h"

namespace kvfs::eviction {
namespace {

using Ids = std::vector<ObjectId>;

void TrackAll(EvictionPolicy& p, const Ids& ids) {
  for (ObjectId id : ids) p.Track(id, 100, {});
}

TEST(LruPolicyTest, EvictsLeastRecentlyUsedFirst) {
  LruPolicy p;
  TrackAll(p, {1, 2, 3, 4});
  p.Touch(1, {});
  p.Touch(3, {});
  EXPECT_EQ(p.PickVictim(), 2u);
  EXPECT_EQ(p.Evict(4), (Ids{2, 4, 1, 3}));
  EXPECT_EQ(p.size(), 0u);
  EXPECT_EQ(p.tracked_bytes(), 0u);
}

TEST(LruPolicyTest, RepublishCountsAsRecentAndUpdatesBytes) {
  LruPolicy p;
  TrackAll(p, {1, 2});
  p.Track(1, 300, {});
  EXPECT_EQ(p.tracked_bytes(), 400u);
  EXPECT_EQ(p.Evict(2), (Ids{2, 1}));
}

TEST(FifoPolicyTest, IgnoresReadHits) {
  FifoPolicy p;
  TrackAll(p, {1, 2, 3});
  p.Touch(1, {});
  p.Touch(1, {});
  EXPECT_EQ(p.Evict(3), (Ids{1, 2, 3}));
}

TEST(ListPolicyTest, PinnedIdsAreNeverReturned) {
  LruPolicy p;
  TrackAll(p, {1, 2, 3});
  p.SetPinned(1, true);
  p.SetPinned(9, true);  // pinned before it is published
  p.Track(9, 100, {});
  EXPECT_EQ(p.Evict(10), (Ids{2, 3}));
  EXPECT_EQ(p.PickVictim(), std::nullopt);
  EXPECT_EQ(p.size(), 2u);
  p.SetPinned(1, false);
  EXPECT_EQ(p.Evict(10), (Ids{1}));
}

TEST(ListPolicyTest, RemoveForgetsTheId) {
  FifoPolicy p;
  TrackAll(p, {1, 2, 3});
  p.Remove(2);
  p.Remove(42);  // unknown: ignored
  p.Touch(42, {});
  EXPECT_EQ(p.tracked_bytes(), 200u);
  EXPECT_EQ(p.Evict(3), (Ids{1, 3}));
}

TEST(ListPolicyTest, EvictBytesStopsOnceEnoughIsFreed) {
  LruPolicy p;
  p.Track(1, 100, {});
  p.Track(2, 500, {});
  p.Track(3, 100, {});
  EXPECT_EQ(p.EvictBytes(150), (Ids{1, 2}));
  EXPECT_EQ(p.tracked_bytes(), 100u);
}

TEST(PolicyFactoryTest, KnowsEveryNameAndRejectsOthers) {
  for (const auto& name : PolicyNames()) {
    auto p = MakePolicy(name);
    ASSERT_TRUE(p.ok()) << name;
    EXPECT_EQ((*p)->name(), name);
  }
  auto bad = MakePolicy("arc");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().err(), EINVAL);
}

}  // namespace
}  // namespace kvfs::eviction
