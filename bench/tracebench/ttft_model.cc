#include "ttft_model.h"

#include <algorithm>
#include <cstdio>

namespace kvfs::tracebench {

double TtftModel::read_us_per_token() const {
  return static_cast<double>(kv_bytes_per_token) / (read_mib_s * 1048576.0) * 1e6;
}
double TtftModel::write_us_per_token() const {
  return static_cast<double>(kv_bytes_per_token) / (write_mib_s * 1048576.0) * 1e6;
}

std::string TtftModel::Describe() const {
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "TTFT model (DESIGN §10): %s: T=%.1f us/token, KV=%llu B/token, read %.0f MiB/s "
                "-> R=%.1f us/token, write %.0f MiB/s -> W=%.1f us/token",
                model.c_str(), compute_us_per_token,
                static_cast<unsigned long long>(kv_bytes_per_token), read_mib_s,
                read_us_per_token(), write_mib_s, write_us_per_token());
  return buf;
}

TtftSummary ModelTtft(const TtftModel& m, const std::vector<eviction::TraceRequest>& trace,
                      const std::vector<uint32_t>& hit_blocks, uint32_t block_tokens) {
  TtftSummary s;
  const size_t n = std::min(trace.size(), hit_blocks.size());
  if (n == 0) return s;
  const double t = m.compute_us_per_token, r = m.read_us_per_token(), w = m.write_us_per_token();
  double sum_nc = 0, sum_c = 0;
  for (size_t i = 0; i < n; ++i) {
    const double tokens = trace[i].input_tokens;
    if (tokens <= 0) continue;
    const double cached = std::min<double>(tokens, double(hit_blocks[i]) * block_tokens);
    const double alpha = cached / tokens;
    sum_nc += tokens * t;
    sum_c += std::max({alpha * tokens * r, (1 - alpha) * tokens * w, (1 - alpha) * tokens * t});
  }
  s.mean_no_cache_ms = sum_nc / double(n) / 1000.0;
  s.mean_cache_ms = sum_c / double(n) / 1000.0;
  return s;
}

}  // namespace kvfs::tracebench
