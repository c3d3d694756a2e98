#include "cluster_layout.h"

#include <cinttypes>
#include <cstdio>
#include <memory>
#include <string>

#include "namespace_keys.h"

namespace kvfs::cluster {
bool HolderList::Remove(NodeId n) {
  for (size_t i = 0; i < n_; ++i) {
    if (ids_[i] != n) continue;
    for (size_t j = i + 1; j < n_; ++j) ids_[j - 1] = ids_[j];
    --n_;
    return true;
  }
  return false;
}

bool HolderList::Contains(NodeId n) const {
  for (size_t i = 0; i < n_; ++i)
    if (ids_[i] == n) return true;
  return false;
}

bool HolderList::operator==(const HolderList& o) const {
  if (n_ != o.n_) return false;
  for (size_t i = 0; i < n_; ++i)
    if (ids_[i] != o.ids_[i]) return false;
  return true;
}

LayoutRef MakeClusterLayout(uint64_t size, uint64_t chunk, const HolderList& holders,
                            uint64_t checksum) {
  // One allocation for the layout and its reference counts: a node keeps one per name.
  auto l = std::make_shared<ClusterLayout>();
  l->kind = Layout::Kind::kClusterChunk;
  l->size = size;
  l->chunk = chunk;
  l->holders = holders;
  l->checksum = checksum;
  return l;
}

const ClusterLayout* AsClusterLayout(const LayoutRef& layout) {
  if (!layout || layout->kind != Layout::Kind::kClusterChunk) return nullptr;
  return static_cast<const ClusterLayout*>(layout.get());
}

std::string ChunkName(uint64_t chunk) { return Hex16(chunk); }

uint64_t ParseChunkName(const std::string& name) { return ParseHex16(name).value_or(0); }

}  // namespace kvfs::cluster
