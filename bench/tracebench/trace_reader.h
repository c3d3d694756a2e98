// Reads a Mooncake-style JSONL trace: one object a line with timestamp (ms), input_length,
// output_length and hash_ids (the prompt's 512-token block ids in prefix order).
#pragma once

#include <string>
#include <vector>

#include "kvfs/status.h"
#include "trace_replay.h"

namespace kvfs::tracebench {

Result<std::vector<eviction::TraceRequest>> ReadJsonlTrace(const std::string& path,
                                                           size_t max_requests);

}  // namespace kvfs::tracebench
