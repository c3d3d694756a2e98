// DirReplay: the trace through real files, doing what a connector does: for each request stat
// the block files in order and read the hits fully (verifying every byte) until the first miss,
// then write every block from the miss on via a temp file + rename. Capacity is whatever the
// directory's filesystem enforces (a kvfs mount with --capacity evicts by itself); on a plain
// directory nothing is evicted.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kvfs/status.h"
#include "trace_replay.h"

namespace kvfs::tracebench {

struct DirReplayOptions {
  std::string dir;
  uint64_t block_bytes = 64 * 1024;
  double time_scale = 0;  // > 0: pace requests at timestamp * time_scale; 0: back to back
  // Set user.kvfs.parent (the previous block's name) on each written block before it is
  // published, as a connector that knows its chains would.
  bool parent_xattr = false;
};

struct DirReplayResult {
  eviction::ReplayResult replay;  // hits, bytes, per-request hit blocks
  uint64_t lookups = 0;
  uint64_t verify_failures = 0;  // reads whose bytes were not what was written
  uint64_t write_failures = 0;   // e.g. ENOSPC from a full filesystem
  uint64_t xattr_failures = 0;   // --parent-xattr: setxattr refused (e.g. the parent was evicted)
  double read_seconds = 0;       // time spent in open+read of hits
  double write_seconds = 0;
  double total_seconds = 0;
  uint64_t fs_capacity_bytes = 0;  // statvfs of the directory
};

// The bytes of block `block`: a pattern derived from its id, so a read can be verified.
void FillBlock(uint64_t block, uint64_t size, std::string* out);

Result<DirReplayResult> ReplayThroughDirectory(const std::vector<eviction::TraceRequest>& trace,
                                               const DirReplayOptions& options);

}  // namespace kvfs::tracebench
