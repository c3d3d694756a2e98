// TraceReplay semantics (prefix lookups stop at the first miss) and a small simulation: the
// prefix policy is at least as good as LRU, and the optimum bounds both.
#include "trace_replay.h"

#include <gtest/gtest.h>

#include "belady_oracle.h"
#include "eviction_policy.h"
#include "synthetic_trace.h"

namespace kvfs::eviction {
namespace {

TraceRequest Req(std::vector<uint64_t> blocks) {
  TraceRequest r;
  r.input_tokens = static_cast<uint32_t>(blocks.size() * 512);
  r.blocks = std::move(blocks);
  return r;
}

TEST(TraceReplayTest, LookupsStopAtTheFirstMiss) {
  auto lru = std::move(MakePolicy("lru")).value();
  ReplayOptions ro;
  ro.block_bytes = 1;
  ro.capacity_bytes = 100;
  std::vector<TraceRequest> trace = {Req({1, 2, 3}), Req({1, 9, 3}), Req({1, 2, 3, 4})};
  auto res = ReplayTrace(trace, *lru, ro);
  // Request 2 hits 1 only (9 misses, so 3 is not looked up); request 3 hits 1 2 3.
  EXPECT_EQ(res.hit_blocks, (std::vector<uint32_t>{0, 1, 3}));
  EXPECT_EQ(res.block_hits, 4u);
  EXPECT_EQ(res.reusable_blocks, 4u);
  EXPECT_DOUBLE_EQ(res.request_hit_rate(), 1.0);
  EXPECT_EQ(DistinctBlocks(trace), 5u);
}

TEST(TraceReplayTest, CapacityIsRespected) {
  auto fifo = std::move(MakePolicy("fifo")).value();
  ReplayOptions ro;
  ro.block_bytes = 10;
  ro.capacity_bytes = 30;
  std::vector<TraceRequest> trace = {Req({1, 2, 3, 4, 5}), Req({1, 2})};
  auto res = ReplayTrace(trace, *fifo, ro);
  EXPECT_LE(fifo->tracked_bytes(), 30u);
  EXPECT_EQ(res.block_hits, 0u);  // 1 and 2 were evicted first
  EXPECT_EQ(res.evictions, 4u);
}

TEST(TraceReplayTest, PrefixAtLeastLruAndOptimumBoundsBothOnASyntheticTrace) {
  SyntheticTraceOptions so;
  so.seed = 99;
  so.requests = 3000;
  const auto trace = GenerateSyntheticTrace(so);
  const uint64_t distinct = DistinctBlocks(trace);
  ASSERT_GT(distinct, 1000u);
  for (double fraction : {0.05, 0.10, 0.25}) {
    ReplayOptions ro;
    ro.block_bytes = 1;
    ro.capacity_bytes = static_cast<uint64_t>(fraction * double(distinct));
    auto lru = std::move(MakePolicy("lru")).value();
    auto prefix = std::move(MakePolicy("prefix")).value();
    BeladyOracle oracle(ReferenceSequence(trace));
    const double l = ReplayTrace(trace, *lru, ro).block_hit_rate();
    const double p = ReplayTrace(trace, *prefix, ro).block_hit_rate();
    const double o = ReplayTrace(trace, oracle, ro).block_hit_rate();
    EXPECT_GE(p, l) << "capacity " << fraction;
    EXPECT_GE(o, p) << "capacity " << fraction;
    EXPECT_GT(l, 0.0);
  }
}

TEST(SyntheticTraceTest, DeterministicPerSeedAndSharesPrefixes) {
  SyntheticTraceOptions so;
  so.requests = 200;
  const auto a = GenerateSyntheticTrace(so);
  const auto b = GenerateSyntheticTrace(so);
  ASSERT_EQ(a.size(), 200u);
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i].blocks, b[i].blocks);
  so.seed = 8;
  EXPECT_NE(GenerateSyntheticTrace(so)[5].blocks, a[5].blocks);
  // Equal prefixes share ids: some block is referenced by more than one request.
  EXPECT_LT(DistinctBlocks(a), ReferenceSequence(a).size());
}

}  // namespace
}  // namespace kvfs::eviction
