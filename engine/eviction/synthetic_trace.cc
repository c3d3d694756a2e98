#include "synthetic_trace.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <random>

namespace kvfs::eviction {
namespace {

// Samples 0..n-1 with P(k) ~ 1/(k+1)^s.
class Zipf {
 public:
  Zipf(uint32_t n, double s) {
    double sum = 0;
    for (uint32_t k = 0; k < n; ++k) cdf_.push_back(sum += 1.0 / std::pow(k + 1.0, s));
    for (double& c : cdf_) c /= sum;
  }
  template <typename Rng>
  uint32_t operator()(Rng& rng) {
    double u = std::uniform_real_distribution<double>(0, 1)(rng);
    return static_cast<uint32_t>(std::lower_bound(cdf_.begin(), cdf_.end(), u) - cdf_.begin());
  }

 private:
  std::vector<double> cdf_;
};

// Token segments of a prompt: (content key, tokens). Block ids come from hashing the prefix of
// segments each block covers, so two prompts share a block id iff they share that prefix.
struct Piece {
  uint64_t key;
  uint32_t tokens;
};

class BlockNamer {
 public:
  std::vector<uint64_t> Name(const std::vector<Piece>& pieces, uint32_t block_tokens) {
    // The identity of block i is the sequence of (key, tokens) pieces up to its end.
    std::vector<uint64_t> ids;
    std::vector<std::pair<uint64_t, uint32_t>> prefix;
    uint32_t total = 0;
    for (const Piece& p : pieces) total += p.tokens;
    uint32_t covered = 0;
    size_t pi = 0;
    uint32_t used_in_piece = 0;
    while (covered < total) {
      uint32_t want = std::min(block_tokens, total - covered);
      while (want > 0) {
        uint32_t take = std::min(want, pieces[pi].tokens - used_in_piece);
        prefix.emplace_back(pieces[pi].key, used_in_piece + take);
        used_in_piece += take;
        want -= take;
        covered += take;
        if (used_in_piece == pieces[pi].tokens) {
          ++pi;
          used_in_piece = 0;
        }
      }
      auto [it, inserted] = ids_.try_emplace(prefix, ids_.size());
      ids.push_back(it->second);
    }
    return ids;
  }

 private:
  std::map<std::vector<std::pair<uint64_t, uint32_t>>, uint64_t> ids_;
};

}  // namespace

std::vector<TraceRequest> GenerateSyntheticTrace(const SyntheticTraceOptions& o) {
  std::mt19937_64 rng(o.seed);
  Zipf system_pick(o.system_prompts, 1.1);
  Zipf doc_pick(std::max<uint32_t>(o.documents, 1), 0.9);
  std::exponential_distribution<double> msg(1.0 / o.mean_message_tokens);
  std::exponential_distribution<double> ans(1.0 / o.mean_answer_tokens);
  std::exponential_distribution<double> gap(1.0 / std::max<uint32_t>(o.mean_gap_ms, 1));
  std::uniform_real_distribution<double> coin(0, 1);
  BlockNamer namer;
  uint64_t next_key = 1ull << 40;  // keys below are system prompts and documents

  struct Session {
    std::vector<Piece> pieces;
  };
  std::vector<Session> open;
  std::vector<TraceRequest> trace;
  double now = 0;
  auto tokens = [](double t) { return static_cast<uint32_t>(std::max(16.0, t)); };
  for (uint32_t i = 0; i < o.requests; ++i) {
    now += gap(rng);
    Session s;
    size_t slot = open.size();
    if (!open.empty() && coin(rng) < o.continue_share) {
      // Recent sessions come back more often than old ones.
      slot = open.size() - 1 -
             std::min<size_t>(open.size() - 1, Zipf(static_cast<uint32_t>(open.size()), 0.8)(rng));
      s = open[slot];
      s.pieces.push_back({next_key++, tokens(ans(rng))});  // the previous answer
    } else {
      uint32_t sp = system_pick(rng);
      s.pieces.push_back({sp + 1, 512u * (1 + sp % 4) + 37 * (sp % 7)});
      if (o.documents > 0 && coin(rng) < o.document_share) {
        uint32_t d = doc_pick(rng);
        s.pieces.push_back({(1ull << 32) + d, 2048u + 512u * (d % 8)});
      }
    }
    s.pieces.push_back({next_key++, tokens(msg(rng))});  // the new user message
    TraceRequest req;
    req.timestamp_ms = static_cast<uint64_t>(now);
    for (const Piece& p : s.pieces) req.input_tokens += p.tokens;
    req.output_tokens = tokens(ans(rng));
    req.blocks = namer.Name(s.pieces, o.block_tokens);
    trace.push_back(std::move(req));
    if (slot < open.size()) {
      open[slot] = std::move(s);
    } else {
      open.push_back(std::move(s));
      if (open.size() > o.open_sessions) open.erase(open.begin());
    }
  }
  return trace;
}

}  // namespace kvfs::eviction
