// Namespace::DropEvicted: the bounded cache removed a published file (its removal is already
// journaled by the store). The name leaves the namespace and the kernel's dentry cache, and
// the inode lets go of the layout so the extents return to the store as soon as the last open
// handle (which holds its own reference and keeps reading byte-exact) is closed.
#include <spdlog/spdlog.h>

#include "namespace.h"

namespace kvfs::fs {

void Namespace::DropEvicted(ObjectId id) {
  uint64_t parent = 0;
  std::string name;
  {
    std::lock_guard lock(mu_);
    Inode* in = Find(id);
    // Gone already, or a new version is being written: its publish puts a fresh record.
    if (!in || !in->journaled || in->writing || in->rec.id == kRootId) return;
    in->journaled = false;
    in->rec.layout = nullptr;
    if (in->linked) {
      if (Inode* dir = Find(in->rec.parent); dir && dir->dir) UnlinkChild(dir, in->rec.name);
      in->linked = false;
      parent = in->rec.parent;
      name = in->rec.name;
    }
    MaybeDrop(in);
  }
  spdlog::debug("kvfs: evicted '{}' (id {})", name, id);
  if (!name.empty() && sink_) sink_->InvalidateEntry(parent, name);
}

}  // namespace kvfs::fs
