#include "rendezvous_placement.h"

#include <xxhash.h>

#include <algorithm>

namespace kvfs::cluster {
namespace {

// splitmix64 finaliser: consecutive node ids become unrelated seeds, so nodes 1, 2, 3 do not get
// correlated scores.
uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace

uint64_t RendezvousPlacement::Score(NodeId node, std::string_view key) {
  return XXH3_64bits_withSeed(key.data(), key.size(), Mix(node));
}

std::vector<NodeId> RendezvousPlacement::Rank(std::string_view key, std::span<const NodeId> nodes) {
  std::vector<std::pair<uint64_t, NodeId>> scored;
  scored.reserve(nodes.size());
  for (NodeId n : nodes) scored.emplace_back(Score(n, key), n);
  std::sort(scored.begin(), scored.end(), [](const auto& a, const auto& b) {
    return a.first != b.first ? a.first > b.first : a.second < b.second;
  });
  std::vector<NodeId> out;
  out.reserve(scored.size());
  for (const auto& [score, n] : scored) out.push_back(n);
  return out;
}

std::vector<NodeId> RendezvousPlacement::RankChunk(uint64_t chunk, std::span<const NodeId> nodes) {
  // The id's bytes in this machine's order, as every release has ranked them: a change would
  // move every chunk's ranking (x86 and arm64 alike are little-endian).
  return Rank(std::string_view(reinterpret_cast<const char*>(&chunk), sizeof chunk), nodes);
}

}  // namespace kvfs::cluster
