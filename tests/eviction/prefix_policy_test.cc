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
  o.prefix_adapt_step = 0;
  return o;
}

PolicyOptions FixedShare(double share) {
  PolicyOptions o;
  o.prefix_protected_fraction = share;
  o.prefix_adapt_step = 0;
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
  EXPECT_TRUE(p.SegmentOf(4) == PrefixPolicy::kDemoted);
  EXPECT_EQ(p.Evict(4), (Ids{4, 3, 2, 1}));
}

TEST(PrefixPolicyTest, OutsideTheProtectedShareOrderIsRecency) {
  // Share 0: a re-read chunk is demoted at once and competes with never-re-read ones by its
  // last access, so the policy is LRU (with tails first).
  PrefixPolicy p(FixedShare(0));
  p.Track(1, 100, Hints(1, /*stream=*/1));
  p.Track(2, 100, Hints(1, /*stream=*/2));
  p.Touch(1, At(1, /*stream=*/3));
  p.Track(3, 100, Hints(1, /*stream=*/4));
  EXPECT_TRUE(p.SegmentOf(1) == PrefixPolicy::kDemoted);
  EXPECT_EQ(p.Evict(3), (Ids{2, 1, 3}));
}

TEST(PrefixPolicyTest, GhostHitsMoveTheProtectedShareLikeArc) {
  PolicyOptions o;
  o.prefix_protected_fraction = 0.5;
  PrefixPolicy p(o);
  for (ObjectId id = 1; id <= 4; ++id) p.Track(id, 100, Hints(1, /*stream=*/id));
  p.Touch(4, At(1, /*stream=*/9));           // 4 is re-read
  EXPECT_EQ(p.Evict(1), (Ids{1}));           // never re-read: a plain ghost
  p.Track(1, 100, Hints(1, /*stream=*/10));  // wanted again: protection cost a hit
  const double after_plain = p.protected_fraction();
  EXPECT_LT(after_plain, 0.5);
  EXPECT_TRUE(p.SegmentOf(1) == PrefixPolicy::kProtected);
  // Evict everything but 1; 4 (re-read) leaves a re-read ghost.
  while (p.size() > 1) {
    auto v = p.PickVictim();
    if (*v == 1) break;
    p.Evict(1);
  }
  p.Track(4, 100, Hints(1, /*stream=*/11));  // a re-read chunk came back: protect more
  EXPECT_GT(p.protected_fraction(), after_plain);
  // The adapted share, the ghosts and the links survive Persist/Recover.
  PrefixPolicy q(o);
  ASSERT_TRUE(q.Recover(p.Persist()).ok());
  EXPECT_DOUBLE_EQ(q.protected_fraction(), p.protected_fraction());
  EXPECT_EQ(q.Evict(10), p.Evict(10));
}

TEST(PrefixPolicyTest, WithoutPositionsAReadAfterAWriteStartsANewBurst) {
  // What a mount sees: no positions, one stream, no pause. A connector reads a request's
  // cached prefix and then writes the rest, so a read after a write is the next request.
  PrefixPolicy p;
  AccessContext none;
  TrackHints h;
  for (ObjectId id = 1; id <= 3; ++id) p.Track(id, 100, h);
  // Writes in a row without positions: one request's blocks or several requests? No guess.
  EXPECT_EQ(p.ParentOf(2), kInvalidId);
  p.Touch(1, none);                                    // the next request re-reads the head...
  EXPECT_TRUE(p.SegmentOf(3) == PrefixPolicy::kTail);  // ...so 3 ended the previous one
  p.Track(4, 100, h);                                  // and extends it from its last hit
  EXPECT_EQ(p.ParentOf(4), 1u);
  EXPECT_EQ(p.PickVictim(), 3u);
}

TEST(PrefixPolicyTest, ParentGivenAfterThePublishPutsTheChildBeforeItsParent) {
  PrefixPolicy p(FixedShare(0));
  p.Track(1, 100, Hints(1, /*stream=*/1));
  p.Track(2, 100, Hints(1, /*stream=*/2));
  p.Track(3, 100, Hints(1, /*stream=*/3));
  EXPECT_EQ(p.ParentOf(3), kInvalidId);
  p.SetParent(3, 1);  // user.kvfs.parent set after rename
  EXPECT_EQ(p.ParentOf(3), 1u);
  EXPECT_EQ(p.Evict(3), (Ids{3, 1, 2}));
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
  EXPECT_EQ(p.ParentOf(2), kInvalidId);  // writes in a row without positions: no guessed link
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
