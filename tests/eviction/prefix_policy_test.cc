// PrefixPolicy: tails before heads, never-reused before reused, chains learned from bursts or
// given explicitly, ghosts, pins.
#include "prefix_policy.h"

#include <gtest/gtest.h>

namespace kvfs::eviction {
namespace {

using Ids = std::vector<ObjectId>;

// Accesses of one stream; position counts from 1 within a request.
AccessContext At(uint32_t position, uint64_t stream = 0) {
  AccessContext c;
  c.stream = stream;
  c.position = position;
  return c;
}
TrackHints Hints(uint32_t position, uint64_t stream = 0) {
  TrackHints h;
  h.context = At(position, stream);
  return h;
}

PolicyOptions AllProtected() {
  PolicyOptions o;
  o.prefix_protected_fraction = 1.0;  // no demotion: segment order alone
  return o;
}

TEST(PrefixPolicyTest, EvictsAChainTailFirst) {
  PrefixPolicy p;
  for (uint32_t i = 1; i <= 4; ++i) p.Track(i, 100, Hints(i));
  EXPECT_EQ(p.ParentOf(3), 2u);  // learned from the order of the burst
  EXPECT_EQ(p.ParentOf(1), kInvalidId);
  EXPECT_EQ(p.Evict(4), (Ids{4, 3, 2, 1}));
}

TEST(PrefixPolicyTest, LastBlockOfARequestBecomesATailWhenTheNextRequestStarts) {
  PrefixPolicy p;
  for (uint32_t i = 1; i <= 3; ++i) p.Track(i, 100, Hints(i));
  p.Track(10, 100, Hints(1));  // a new request of the same stream
  EXPECT_TRUE(p.SegmentOf(3) == PrefixPolicy::kTail);
  EXPECT_TRUE(p.SegmentOf(2) == PrefixPolicy::kProbation);
  EXPECT_EQ(p.PickVictim(), 3u);
}

TEST(PrefixPolicyTest, PartialBlockGoesStraightToTail) {
  PrefixPolicy p;
  p.Track(1, 100, Hints(1));
  TrackHints h = Hints(2);
  h.partial = true;
  p.Track(2, 60, h);
  p.Track(3, 100, Hints(1, /*stream=*/7));
  EXPECT_EQ(p.Evict(1), (Ids{2}));
}

TEST(PrefixPolicyTest, NeverReusedGoBeforeReusedAndHeadsLast) {
  PrefixPolicy p(AllProtected());
  for (uint32_t i = 1; i <= 3; ++i) p.Track(i, 100, Hints(i));  // request A: 1 2 3
  // Request B re-reads A's prefix 1 2, then writes 20 21.
  p.Touch(1, At(1));
  p.Touch(2, At(2));
  p.Track(20, 100, Hints(3));
  p.Track(21, 100, Hints(4));
  EXPECT_TRUE(p.SegmentOf(1) == PrefixPolicy::kProtected);
  EXPECT_TRUE(p.SegmentOf(20) == PrefixPolicy::kProbation);
  // 3 ended request A (tail), then B's new blocks tail first, then the re-read chain, its head
  // (the shared block 1) last.
  EXPECT_EQ(p.Evict(5), (Ids{3, 21, 20, 2, 1}));
}

TEST(PrefixPolicyTest, ProtectedShareIsCapped) {
  PolicyOptions o;
  o.prefix_protected_fraction = 0.5;
  PrefixPolicy p(o);
  for (uint32_t i = 1; i <= 4; ++i) p.Track(i, 100, Hints(i));
  for (uint32_t i = 1; i <= 4; ++i) p.Touch(i, At(i));  // all re-read: 400 bytes protected
  uint64_t protected_ids = 0;
  for (ObjectId id = 1; id <= 4; ++id) protected_ids += p.SegmentOf(id) == PrefixPolicy::kProtected;
  EXPECT_EQ(protected_ids, 2u);  // half of 400 bytes; the chain's tail end was demoted
  EXPECT_TRUE(p.SegmentOf(1) == PrefixPolicy::kProtected);
  EXPECT_TRUE(p.SegmentOf(2) == PrefixPolicy::kProtected);
  EXPECT_TRUE(p.SegmentOf(4) == PrefixPolicy::kProbation);
  EXPECT_EQ(p.Evict(4), (Ids{4, 3, 2, 1}));
}

TEST(PrefixPolicyTest, ExplicitParentWinsOverAccessOrder) {
  PrefixPolicy p;
  p.Track(1, 100, Hints(1));
  TrackHints h = Hints(2);
  h.parent = 77;  // the writer says so (xattr user.kvfs.parent)
  p.Track(2, 100, h);
  EXPECT_EQ(p.ParentOf(2), 77u);
}

TEST(PrefixPolicyTest, BurstsSplitOnTimeGapsWithoutPositions) {
  PolicyOptions o;
  o.prefix_burst_window_ms = 100;
  PrefixPolicy p(o);
  TrackHints h;
  h.context.time_ms = 1000;
  p.Track(1, 100, h);
  h.context.time_ms = 1010;
  p.Track(2, 100, h);
  h.context.time_ms = 5000;  // long pause: a new request
  p.Track(3, 100, h);
  EXPECT_EQ(p.ParentOf(2), 1u);
  EXPECT_EQ(p.ParentOf(3), kInvalidId);
  EXPECT_TRUE(p.SegmentOf(2) == PrefixPolicy::kTail);
}

TEST(PrefixPolicyTest, StreamsDoNotMixChains) {
  PrefixPolicy p;
  p.Track(1, 100, Hints(1, /*stream=*/1));
  p.Track(2, 100, Hints(1, /*stream=*/2));
  p.Track(3, 100, Hints(2, /*stream=*/1));
  EXPECT_EQ(p.ParentOf(3), 1u);
  EXPECT_EQ(p.ParentOf(2), kInvalidId);
}

TEST(PrefixPolicyTest, AnIdEvictedTooEarlyComesBackProtected) {
  PrefixPolicy p(AllProtected());
  p.Track(1, 100, Hints(1));
  p.Track(2, 100, Hints(1));
  EXPECT_EQ(p.Evict(1), (Ids{1}));
  p.Track(1, 100, Hints(1));  // wanted again: the ghost remembers it
  EXPECT_TRUE(p.SegmentOf(1) == PrefixPolicy::kProtected);
}

TEST(PrefixPolicyTest, PinnedNeverEvictedAndRemoveWorks) {
  PrefixPolicy p;
  for (uint32_t i = 1; i <= 3; ++i) p.Track(i, 100, Hints(i));
  p.SetPinned(3, true);
  p.Remove(2);
  EXPECT_EQ(p.tracked_bytes(), 200u);
  EXPECT_EQ(p.Evict(5), (Ids{1}));
  EXPECT_EQ(p.PickVictim(), std::nullopt);
  p.SetPinned(3, false);
  EXPECT_EQ(p.Evict(5), (Ids{3}));
}

}  // namespace
}  // namespace kvfs::eviction
