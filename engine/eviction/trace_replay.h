// TraceReplay: replays a KV-cache request trace against an EvictionPolicy in memory, the way a
// connector uses the cache: each request looks its blocks up in order and stops at the first
// miss (only a prefix can be reused), the hits are read (Touch), and every block from the first
// miss on is computed and written (Track; an already present block is republished), evicting
// until the new block fits. Every block has the same size. With BeladyOracle built from
// ReferenceSequence() the same loop gives the offline optimum.
#pragma once

#include <cstdint>
#include <vector>

#include "eviction_policy.h"

namespace kvfs::eviction {

struct TraceRequest {
  uint64_t timestamp_ms = 0;
  uint32_t input_tokens = 0;
  uint32_t output_tokens = 0;
  std::vector<uint64_t> blocks;  // the prompt's block ids, in prefix order
};

struct ReplayOptions {
  uint64_t block_bytes = 512 * 128 * 1024;  // 512 tokens of Llama-3-8B KV
  uint64_t capacity_bytes = 0;
  uint32_t block_tokens = 512;
  // Hand the policies the "partial" hint for a request's last block when the prompt does not
  // fill it (the chunk file is then shorter than a full block, which a store can see).
  bool partial_hints = true;
  // Hand the explicit parent link (the previous block) to Track, as a writer setting
  // user.kvfs.parent would. Off by default: PrefixPolicy then learns chains from access order.
  bool parent_hints = false;
};

struct ReplayResult {
  uint64_t requests = 0;
  uint64_t blocks = 0;           // block references
  uint64_t block_hits = 0;       // references served from the cache (the reusable prefix)
  uint64_t reusable_blocks = 0;  // hits an unbounded cache would have had
  uint64_t full_requests = 0;    // requests that got every block an unbounded cache gives
  uint64_t reuse_requests = 0;   // requests where an unbounded cache has at least one hit
  uint64_t bytes_read = 0, bytes_written = 0;
  uint64_t evictions = 0;
  std::vector<uint32_t> hit_blocks;  // per request

  double block_hit_rate() const { return blocks ? double(block_hits) / double(blocks) : 0; }
  // Of the requests that had something to reuse, the share that found all of it.
  double request_hit_rate() const {
    return reuse_requests ? double(full_requests) / double(reuse_requests) : 0;
  }
};

// Ids as the store sees them: trace block id + 1 (ObjectId 0 is invalid).
inline ObjectId BlockObjectId(uint64_t block) { return block + 1; }

uint64_t DistinctBlocks(const std::vector<TraceRequest>& trace);
// Every reference in the order TraceReplay calls Track/Touch, for BeladyOracle. The hit/miss
// split does not change the order: each block of each request is referenced exactly once.
std::vector<ObjectId> ReferenceSequence(const std::vector<TraceRequest>& trace);

ReplayResult ReplayTrace(const std::vector<TraceRequest>& trace, EvictionPolicy& policy,
                         const ReplayOptions& options);

}  // namespace kvfs::eviction
