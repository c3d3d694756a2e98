// SyntheticTrace: a generated KV-cache trace with a chosen shape, to check that a policy tuned
// on the Mooncake trace is not overfitted to it. The model: a few shared system prompts with
// Zipf popularity; sessions that come back for more turns (each turn's prompt = the previous
// prompt with its partial last block re-cut + the previous answer + a new message, so the old
// partial block never recurs, as with real chat templates); one-shot requests; and a pool of
// RAG documents inserted after the system prompt. Block ids are equal iff prefixes are equal.
#pragma once

#include <cstdint>
#include <vector>

#include "trace_replay.h"

namespace kvfs::eviction {

struct SyntheticTraceOptions {
  uint64_t seed = 7;
  uint32_t requests = 20000;
  uint32_t block_tokens = 512;
  uint32_t system_prompts = 32;  // shared heads, Zipf(1.1) popularity
  uint32_t documents = 400;      // RAG documents, Zipf(0.9) popularity
  double document_share = 0.2;   // share of new sessions that start with a document
  double continue_share = 0.45;  // share of requests that continue an open session
  uint32_t open_sessions = 800;  // sessions that may still come back
  uint32_t mean_message_tokens = 1500;
  uint32_t mean_answer_tokens = 400;
  uint32_t mean_gap_ms = 250;
};

std::vector<TraceRequest> GenerateSyntheticTrace(const SyntheticTraceOptions& options);

}  // namespace kvfs::eviction
