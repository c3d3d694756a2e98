// Namespace::ForgetStoreRemoval: the one path by which a record the store removed on its own
// leaves the namespace: a chunk whose data failed its checksum, or one the bounded cache
// evicted. The store already journaled the removal, so nothing is applied here; the kernel is
// told to forget the name so the next lookup misses instead of being answered from its dentry
// cache. Open handles hold their own layout reference and keep reading until closed.
#include <spdlog/spdlog.h>

#include "namespace.h"

namespace kvfs::fs {

void Namespace::ForgetStoreRemoval(ObjectId id, StoreRemoval why) {
  const bool evicted = why == StoreRemoval::kEvicted;
  std::vector<std::pair<uint64_t, std::string>> names;
  {
    std::lock_guard lock(mu_);
    Inode* in = Find(id);
    // Gone already, or not journaled: a new version being written publishes a fresh record.
    if (!in || !in->journaled || in->rec.id == kRootId) return;
    // An eviction never takes a name from under its writer (the store does not pick a file
    // with an open write session, see ChunkStore::SetWriting; this guards the name if one did).
    if (evicted && in->writing()) return;
    in->journaled = false;
    UnlinkAllNames(in, &names);
    // Open handles keep the whole file (and fstat its size); the space returns as soon as the
    // last of them closes (Release), or now when there is none.
    ReleaseUnreachableData(in);
    MaybeDrop(in);
  }
  const std::string name = names.empty() ? std::string() : names.front().second;
  if (evicted) {
    spdlog::debug("kvfs: evicted '{}' (id {})", name, id);
  } else {
    spdlog::error("kvfs: dropped '{}' (id {}) from the namespace: its data is corrupt", name, id);
  }
  if (!sink_) return;
  for (const auto& [parent, n] : names) sink_->InvalidateEntry(parent, n);
}

}  // namespace kvfs::fs
