// The chunk naming scheme kvfs documents for native clients (docs/connectors.md, "Prefix-hash
// chunk names"): chained SHA-256 over token ids, so a chunk's name identifies its whole prefix.
// The same scheme as prefix_hash_names() in tests/pylib/kvfs_testlib.py.
//
//   h_0 = SHA-256(seed)                       seed: the bytes of a string, "kvfs" by default
//   h_i = SHA-256(h_{i-1} || tok_a || ... )   the chunk's token ids, each 4 bytes little-endian
//   name_i = lowercase hex of h_i             64 characters
//
// Chunk i covers tokens [i*N, (i+1)*N); the last chunk may be shorter (partial) and is named
// the same way over the tokens it has.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "kvfs/status.h"

namespace kvfs::fs {

struct ChunkName {
  std::string name;     // 64 hex characters
  uint64_t first = 0;   // index of the chunk's first token
  uint64_t tokens = 0;  // how many tokens it covers (< chunk_tokens only for a partial last one)
};

// Token ids from text: a JSON array of integers, or decimal integers separated by whitespace.
// Every id must fit in 32 bits unsigned (0 .. 4294967295).
Result<std::vector<uint32_t>> ParseTokenIds(std::string_view text);

std::vector<ChunkName> PrefixHashNames(const std::vector<uint32_t>& tokens, uint64_t chunk_tokens,
                                       bool include_partial, std::string_view seed);

}  // namespace kvfs::fs
