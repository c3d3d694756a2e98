// Namespace::RestoreStoreRecord: after a failed journal write the store undoes every change it
// had not made durable and turns read-only; it then reports each undone id here, so the names
// and versions this mount shows are again exactly what the disk holds. Calls for one id come
// newest first; the last one is its durable state. Each call forces the id to the state given,
// moving aside whatever occupies its durable name (that occupant gets its own call, or was never
// durable), so the sequence converges whatever order the undone changes were made in.
#include <spdlog/spdlog.h>

#include <vector>

#include "namespace.h"

namespace kvfs::fs {

void Namespace::RestoreStoreRecord(ObjectId id, const ObjectRecord* record) {
  if (id == kRootId || id == kInvalidId) return;
  std::vector<std::pair<uint64_t, std::string>> stale_names;
  bool data_changed = false;
  {
    std::lock_guard lock(mu_);
    Inode* in = Find(id);
    auto unlink = [&](Inode* victim) {
      if (!victim->linked) return;
      if (Inode* dir = Find(victim->rec.parent); dir && dir->dir)
        UnlinkChild(dir, victim->rec.name);
      victim->linked = false;
      stale_names.emplace_back(victim->rec.parent, victim->rec.name);
    };
    if (!record) {
      // Nothing durable: the object leaves the tree (a new file whose publish failed, a new
      // directory, a rename target that was never made).
      if (!in) return;
      unlink(in);
      in->journaled = false;
      MaybeDrop(in);
    } else {
      Inode* dir = Find(record->parent);
      if (!in) {
        // An unlink that never became durable: the inode comes back.
        auto fresh = std::make_unique<Inode>();
        fresh->version = ++next_view_;
        if (record->type == ObjectType::kDirectory) fresh->dir = std::make_unique<Directory>();
        fresh->linked = false;
        in = fresh.get();
        inodes_.emplace(id, std::move(fresh));
      }
      const bool same_place =
          in->linked && in->rec.parent == record->parent && in->rec.name == record->name;
      data_changed = in->rec.layout != record->layout;
      if (!same_place) unlink(in);
      in->rec = *record;
      if (data_changed) in->version = ++next_view_;
      in->journaled = true;
      if (!same_place && dir && dir->dir) {
        if (Inode* occupant = Child(dir, record->name); occupant && occupant != in) {
          unlink(occupant);
          MaybeDrop(occupant);
        }
        LinkChild(dir, record->name, in);
        in->linked = true;
        stale_names.emplace_back(record->parent, record->name);
      }
      MaybeDrop(in);
    }
  }
  spdlog::warn("namespace: object {} undone after a failed journal write", id);
  if (!sink_) return;
  for (const auto& [parent, name] : stale_names) sink_->InvalidateEntry(parent, name);
  if (data_changed) sink_->InvalidateInode(id, true);
}

}  // namespace kvfs::fs
