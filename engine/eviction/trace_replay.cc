#include "trace_replay.h"

#include <unordered_set>

namespace kvfs::eviction {

uint64_t DistinctBlocks(const std::vector<TraceRequest>& trace) {
  std::unordered_set<uint64_t> seen;
  for (const auto& r : trace) seen.insert(r.blocks.begin(), r.blocks.end());
  return seen.size();
}

std::vector<ObjectId> ReferenceSequence(const std::vector<TraceRequest>& trace) {
  std::vector<ObjectId> refs;
  for (const auto& r : trace) {
    for (uint64_t b : r.blocks) refs.push_back(BlockObjectId(b));
  }
  return refs;
}

ReplayResult ReplayTrace(const std::vector<TraceRequest>& trace, EvictionPolicy& policy,
                         const ReplayOptions& options) {
  ReplayResult out;
  out.hit_blocks.reserve(trace.size());
  std::unordered_set<ObjectId> present;  // what the store holds
  std::unordered_set<ObjectId> ever;     // what an unbounded cache would hold
  for (const TraceRequest& req : trace) {
    const size_t n = req.blocks.size();
    ++out.requests;
    out.blocks += n;
    size_t hits = 0;
    while (hits < n && present.count(BlockObjectId(req.blocks[hits]))) ++hits;
    size_t reusable = 0;
    while (reusable < n && ever.count(BlockObjectId(req.blocks[reusable]))) ++reusable;
    out.block_hits += hits;
    out.reusable_blocks += reusable;
    if (reusable > 0) {
      ++out.reuse_requests;
      if (hits >= reusable) ++out.full_requests;
    }
    out.hit_blocks.push_back(static_cast<uint32_t>(hits));
    out.bytes_read += hits * options.block_bytes;

    // One request is one burst of one stream (the trace has no client ids); positions are
    // 1-based so a policy sees where each request starts.
    AccessContext ctx;
    ctx.stream = 0;
    ctx.time_ms = req.timestamp_ms;
    for (size_t j = 0; j < n; ++j) {
      const ObjectId id = BlockObjectId(req.blocks[j]);
      ctx.position = static_cast<uint32_t>(j + 1);
      ever.insert(id);
      if (j < hits) {
        policy.Touch(id, ctx);
        continue;
      }
      TrackHints hints;
      hints.context = ctx;
      hints.parent = options.parent_hints && j > 0 ? BlockObjectId(req.blocks[j - 1]) : kInvalidId;
      hints.partial =
          options.partial_hints && j + 1 == n && req.input_tokens % options.block_tokens != 0;
      if (!present.count(id)) {
        // Make room first, as a store must before it can publish.
        while (policy.tracked_bytes() + options.block_bytes > options.capacity_bytes) {
          auto victims = policy.Evict(1);
          if (victims.empty()) break;
          present.erase(victims[0]);
          ++out.evictions;
        }
        if (policy.tracked_bytes() + options.block_bytes > options.capacity_bytes) continue;
        present.insert(id);
      }
      policy.Track(id, options.block_bytes, hints);
      out.bytes_written += options.block_bytes;
    }
  }
  return out;
}

}  // namespace kvfs::eviction
