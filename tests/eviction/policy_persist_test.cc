// Persist/Recover for every policy: the state survives, corrupt or foreign blobs are rejected
// and leave the policy as it was.
#include <gtest/gtest.h>

#include "eviction_policy.h"

namespace kvfs::eviction {
namespace {

void Populate(EvictionPolicy& p) {
  for (uint32_t i = 1; i <= 6; ++i) {
    TrackHints h;
    h.context.position = i;
    p.Track(i, 100 * i, h);
  }
  AccessContext c;
  c.position = 1;
  p.Touch(2, c);
  c.position = 2;
  p.Touch(5, c);
  p.SetPinned(4, true);
  p.SetPinned(99, true);  // pinned, not yet published
  p.Remove(6);
}

class PolicyPersistTest : public ::testing::TestWithParam<std::string> {};

TEST_P(PolicyPersistTest, RoundTripKeepsEvictionOrderAndPins) {
  auto a = std::move(MakePolicy(GetParam())).value();
  Populate(*a);
  const std::string blob = a->Persist();
  auto b = std::move(MakePolicy(GetParam())).value();
  ASSERT_TRUE(b->Recover(blob).ok());
  EXPECT_EQ(b->size(), a->size());
  EXPECT_EQ(b->tracked_bytes(), a->tracked_bytes());
  b->Track(99, 10, {});
  a->Track(99, 10, {});
  const auto order = a->Evict(100);
  EXPECT_EQ(b->Evict(100), order);
  EXPECT_EQ(order.size(), 4u);  // 4 and 99 are pinned
  for (ObjectId id : order) EXPECT_NE(id, 4u);
}

TEST_P(PolicyPersistTest, CorruptBlobIsRejectedAndStateKept) {
  auto a = std::move(MakePolicy(GetParam())).value();
  Populate(*a);
  const std::string blob = a->Persist();
  auto b = std::move(MakePolicy(GetParam())).value();
  b->Track(500, 1, {});
  for (size_t pos : {size_t{0}, size_t{5}, blob.size() / 2, blob.size() - 1}) {
    std::string bad = blob;
    bad[pos] = static_cast<char>(bad[pos] ^ 0x40);
    EXPECT_FALSE(b->Recover(bad).ok()) << "flipped byte " << pos;
  }
  EXPECT_FALSE(b->Recover(blob.substr(0, blob.size() - 3)).ok());
  EXPECT_FALSE(b->Recover("").ok());
  EXPECT_EQ(b->size(), 1u);
  EXPECT_EQ(b->PickVictim(), 500u);
}

TEST_P(PolicyPersistTest, BlobOfAnotherPolicyIsRejected) {
  const std::string other = GetParam() == "lru" ? "fifo" : "lru";
  auto a = std::move(MakePolicy(other)).value();
  Populate(*a);
  auto b = std::move(MakePolicy(GetParam())).value();
  Status s = b->Recover(a->Persist());
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.err(), EINVAL);
}

INSTANTIATE_TEST_SUITE_P(AllPolicies, PolicyPersistTest,
                         ::testing::Values("lru", "fifo", "lfu", "prefix"));

}  // namespace
}  // namespace kvfs::eviction
