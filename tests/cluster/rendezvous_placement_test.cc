#include "rendezvous_placement.h"

#include <gtest/gtest.h>

#include <map>
#include <string>

namespace kvfs::cluster {
namespace {

std::string Key(int i) { return "c0001-" + std::to_string(i); }

TEST(RendezvousPlacement, RankIsDeterministicAndAPermutation) {
  const std::vector<NodeId> nodes{1, 2, 3, 4, 5};
  const std::vector<NodeId> reversed{5, 4, 3, 2, 1};
  for (int i = 0; i < 100; ++i) {
    auto a = RendezvousPlacement::Rank(Key(i), nodes);
    auto b = RendezvousPlacement::Rank(Key(i), reversed);  // input order does not matter
    EXPECT_EQ(a, b);
    auto sorted = a;
    std::sort(sorted.begin(), sorted.end());
    EXPECT_EQ(sorted, nodes);
  }
}

TEST(RendezvousPlacement, FirstChoiceIsBalanced) {
  const std::vector<NodeId> nodes{1, 2, 3, 4};
  std::map<NodeId, int> first;
  const int kKeys = 20000;
  for (int i = 0; i < kKeys; ++i) ++first[RendezvousPlacement::Rank(Key(i), nodes)[0]];
  for (NodeId n : nodes) {
    // 5000 expected each; a loose bound that only a broken hash misses.
    EXPECT_GT(first[n], kKeys / 4 * 8 / 10) << "node " << n;
    EXPECT_LT(first[n], kKeys / 4 * 12 / 10) << "node " << n;
  }
}

TEST(RendezvousPlacement, JoinMovesOnlyKeysTheNewNodeWins) {
  const std::vector<NodeId> before{1, 2, 3, 4};
  const std::vector<NodeId> after{1, 2, 3, 4, 5};
  const int kKeys = 20000;
  int moved = 0;
  for (int i = 0; i < kKeys; ++i) {
    NodeId a = RendezvousPlacement::Rank(Key(i), before)[0];
    NodeId b = RendezvousPlacement::Rank(Key(i), after)[0];
    if (a != b) {
      ++moved;
      EXPECT_EQ(b, 5) << "a key moved between two old nodes";
    }
  }
  // About 1/5 of the keys move to the new node; nowhere near all of them.
  EXPECT_GT(moved, kKeys / 5 * 7 / 10);
  EXPECT_LT(moved, kKeys / 5 * 13 / 10);
}

TEST(RendezvousPlacement, LeaveKeepsTheRelativeOrderOfTheRest) {
  const std::vector<NodeId> all{1, 2, 3, 4, 5};
  const std::vector<NodeId> without3{1, 2, 4, 5};
  for (int i = 0; i < 1000; ++i) {
    auto full = RendezvousPlacement::Rank(Key(i), all);
    full.erase(std::find(full.begin(), full.end(), NodeId{3}));
    EXPECT_EQ(full, RendezvousPlacement::Rank(Key(i), without3));
  }
}

// Every node of a cluster must rank a chunk alike, across releases too: the key is the chunk
// id's 8 bytes, least significant first.
TEST(RendezvousPlacement, AChunkIsRankedByItsIdsLittleEndianBytes) {
  const std::vector<NodeId> nodes{1, 2, 3, 4, 5, 6, 7, 8};
  for (uint64_t chunk : {uint64_t{1}, uint64_t{0x0102030405060708}, ~uint64_t{0}}) {
    std::string key;
    for (int i = 0; i < 8; ++i) key.push_back(static_cast<char>((chunk >> (8 * i)) & 0xff));
    EXPECT_EQ(RendezvousPlacement::RankChunk(chunk, nodes), RendezvousPlacement::Rank(key, nodes));
  }
}

}  // namespace
}  // namespace kvfs::cluster
