// The TTFT model of DESIGN §10: with T = compute time per prompt token, R = time to read one
// token's KV, W = time to write it, alpha = share of the prompt found in the cache, N = prompt
// tokens, and I/O overlapped with compute layer by layer:
//   TTFT(no cache) = N*T;  TTFT(cache) = max(alpha*N*R, (1-alpha)*N*W, (1-alpha)*N*T).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "trace_replay.h"

namespace kvfs::tracebench {

struct TtftModel {
  std::string model = "Llama-3-8B bf16 on one H100";
  double compute_us_per_token = 100.0;  // T: 10k prompt tokens/s (8B prefill, ~8k-token prompts)
  uint64_t kv_bytes_per_token = 128 * 1024;  // 2 x 32 layers x 8 KV heads x 128 x 2 bytes
  double read_mib_s = 1960;                  // O_DIRECT 1 MiB reads here (DESIGN §9)
  double write_mib_s = 1540;

  double read_us_per_token() const;
  double write_us_per_token() const;
  std::string Describe() const;
};

struct TtftSummary {
  double mean_no_cache_ms = 0;
  double mean_cache_ms = 0;
  double speedup() const { return mean_cache_ms > 0 ? mean_no_cache_ms / mean_cache_ms : 0; }
};

TtftSummary ModelTtft(const TtftModel& model, const std::vector<eviction::TraceRequest>& trace,
                      const std::vector<uint32_t>& hit_blocks, uint32_t block_tokens);

}  // namespace kvfs::tracebench
