// RendezvousPlacement: highest-random-weight hashing of chunk keys onto node ids. Every node
// computes the same ranking from the key and the node list alone, so placement needs no shared
// table, and a node joining or leaving only moves the keys it ranks first for (about 1/N of
// them) instead of reshuffling everything as modulo hashing would.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

namespace kvfs::cluster {

using NodeId = uint16_t;

class RendezvousPlacement {
 public:
  // The weight of `node` for `key`: a 64-bit hash of both (XXH3 seeded with a mix of the id).
  static uint64_t Score(NodeId node, std::string_view key);
  // `nodes` ordered by descending score for `key` (ties, which need a 64-bit collision, by id).
  static std::vector<NodeId> Rank(std::string_view key, std::span<const NodeId> nodes);
  // The ranking of a cluster chunk id (its 8 bytes as the key).
  static std::vector<NodeId> RankChunk(uint64_t chunk, std::span<const NodeId> nodes);
};

}  // namespace kvfs::cluster
