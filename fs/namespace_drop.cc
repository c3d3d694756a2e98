// Namespace::DropRecord: the one path by which a record the store removed on its own (a chunk
// whose data failed its checksum) leaves the namespace. The store already journaled the
// removal, so nothing is applied here; the kernel is told to forget the name so the next
// lookup misses instead of being answered from its dentry cache.
#include <spdlog/spdlog.h>

#include "namespace.h"

namespace kvfs::fs {

void Namespace::DropRecord(ObjectId id) {
  uint64_t parent = 0;
  std::string name;
  {
    std::lock_guard lock(mu_);
    Inode* in = Find(id);
    // Not journaled: already unlinked, or a new version is being written that will publish a
    // fresh record of its own.
    if (!in || !in->journaled || in->rec.id == kRootId) return;
    in->journaled = false;
    if (in->linked) {
      if (Inode* dir = Find(in->rec.parent); dir && dir->dir) UnlinkChild(dir, in->rec.name);
      in->linked = false;
      parent = in->rec.parent;
      name = in->rec.name;
    }
    MaybeDrop(in);
  }
  spdlog::error("kvfs: dropped '{}' (id {}) from the namespace: its data is corrupt", name, id);
  if (!name.empty() && sink_) sink_->InvalidateEntry(parent, name);
}

}  // namespace kvfs::fs
