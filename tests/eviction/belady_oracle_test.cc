// BeladyOracle: furthest next use first, never-again first, on a tiny known sequence.
#include "belady_oracle.h"

#include <gtest/gtest.h>

#include "lru_policy.h"
#include "trace_replay.h"

namespace kvfs::eviction {
namespace {

TEST(BeladyOracleTest, EvictsNeverUsedAgainThenFurthestNextUse) {
  BeladyOracle o({1, 2, 3, 2, 1});
  o.Track(1, 1, {});
  o.Track(2, 1, {});
  o.Track(3, 1, {});
  EXPECT_EQ(o.PickVictim(), 3u);                         // never referenced again
  EXPECT_EQ(o.Evict(2), (std::vector<ObjectId>{3, 1}));  // 1 is needed after 2
  EXPECT_EQ(o.mismatches(), 0u);
}

std::vector<TraceRequest> OneBlockRequests(const std::vector<uint64_t>& blocks) {
  std::vector<TraceRequest> trace;
  for (uint64_t b : blocks) {
    TraceRequest r;
    r.input_tokens = 512;
    r.blocks = {b};
    trace.push_back(r);
  }
  return trace;
}

TEST(BeladyOracleTest, KnownOptimumOnACyclicSequence) {
  // Capacity 2, cycle of 3: LRU always evicts the block needed next (0 hits); MIN with forced
  // insertion hits every other reference after warm-up: positions 3, 5 and 7.
  const auto trace = OneBlockRequests({1, 2, 3, 1, 2, 3, 1, 2, 3});
  ReplayOptions ro;
  ro.block_bytes = 1;
  ro.capacity_bytes = 2;
  BeladyOracle oracle(ReferenceSequence(trace));
  auto opt = ReplayTrace(trace, oracle, ro);
  EXPECT_EQ(opt.block_hits, 3u);
  EXPECT_EQ(oracle.mismatches(), 0u);
  LruPolicy lru;
  EXPECT_EQ(ReplayTrace(trace, lru, ro).block_hits, 0u);
}

TEST(BeladyOracleTest, RecoverIsRefused) {
  BeladyOracle o({});
  EXPECT_FALSE(o.Recover(o.Persist()).ok());
}

}  // namespace
}  // namespace kvfs::eviction
