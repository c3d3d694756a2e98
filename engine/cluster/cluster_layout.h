// ClusterLayout: the Layout of a published file in a cluster, as the namespace records it: its
// size, the chunk that holds its bytes (an id fixed at publish, so renames never move data) and
// the nodes holding a copy. The fs holds it like any LayoutRef; the cluster store reads it from
// the local copy when this node holds one, else from the holders.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "kvfs/object.h"

namespace kvfs::cluster {

using NodeId = uint16_t;

// Up to kMaxHolders node ids, inline (a namespace of millions of files keeps one per file).
class HolderList {
 public:
  static constexpr size_t kMaxHolders = 7;  // kMaxReplicas (kvfs/store.h)
  HolderList() = default;
  explicit HolderList(const std::vector<NodeId>& ids) {
    for (NodeId n : ids) Add(n);
  }
  bool Add(NodeId n) {
    if (Contains(n) || n_ == kMaxHolders) return false;
    ids_[n_++] = n;
    return true;
  }
  bool Remove(NodeId n);
  bool Contains(NodeId n) const;
  size_t size() const { return n_; }
  bool empty() const { return n_ == 0; }
  NodeId operator[](size_t i) const { return ids_[i]; }
  const NodeId* begin() const { return ids_.data(); }
  const NodeId* end() const { return ids_.data() + n_; }
  std::vector<NodeId> ToVector() const { return {begin(), end()}; }
  bool operator==(const HolderList& o) const;

 private:
  std::array<NodeId, kMaxHolders> ids_{};
  uint8_t n_ = 0;
};

struct ClusterLayout : Layout {
  uint64_t chunk = 0;  // the chunk's id: a cluster object id, unique per published version
  HolderList holders;  // in the order the publisher placed them
  // ContentChecksum of the publisher's copy (0: not recorded), so that user.kvfs.checksum is
  // the same on every node whether or not it holds a copy.
  uint64_t checksum = 0;
};

// A ClusterLayout as a LayoutRef, marked Layout::Kind::kClusterChunk.
LayoutRef MakeClusterLayout(uint64_t size, uint64_t chunk, const HolderList& holders,
                            uint64_t checksum);
// The ClusterLayout behind `layout`, or null for any other layout.
const ClusterLayout* AsClusterLayout(const LayoutRef& layout);

// The chunk's name in the local engine's hidden chunk directory: 16 hex digits.
std::string ChunkName(uint64_t chunk);
// Parses ChunkName; 0 for anything else.
uint64_t ParseChunkName(const std::string& name);

}  // namespace kvfs::cluster
