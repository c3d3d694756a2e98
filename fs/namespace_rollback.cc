// Namespace::RestoreStoreRecord: after a failed journal write the store undoes every change it
// had not made durable and turns read-only; a shared store (the cluster) that refused a batch
// reports what it holds for the batch's objects. Either way each id comes here, so the names and
// versions this mount shows are again exactly what the store holds. Calls for one id come
// newest first; the last one is its durable state. Each call forces the id to the state given,
// moving aside whatever occupies its durable name (that occupant gets its own call, or was never
// durable), so the sequence converges whatever order the undone changes were made in.
#include <spdlog/spdlog.h>

#include <vector>

#include "namespace.h"

namespace kvfs::fs {

void Namespace::RestoreStoreRecord(ObjectId id, const ObjectRecord* record, ResetOrigin origin) {
  if (id == kRootId || id == kInvalidId) return;
  Stale stale;
  auto& stale_names = stale.entries;
  bool data_changed = false;
  bool attrs_changed = false;
  {
    std::lock_guard lock(mu_);
    Inode* in = Find(id);
    if (auto d = deferred_claims_.find(id);
        d != deferred_claims_.end() && (origin.as_of == 0 || d->second.revision <= origin.as_of))
      deferred_claims_.erase(d);  // the store's state, read after the one that waited
    // A shared store's record read before a newer one of the same object reached this node
    // (its watch applied it meanwhile): what the tree shows is already newer, keep it.
    if (record && in && record->revision != 0 && in->rec.revision > record->revision) {
      spdlog::debug("namespace: reset of {:x} to revision {} skipped: this node has {}", id,
                    record->revision, in->rec.revision);
      return;
    }
    // A shared store's reset is a read of etcd taken after a refusal, applied later on another
    // thread: a change this node made meanwhile (to the object, or to the holder of a name the
    // reset would give it) is newer than that read. Forcing the read on it would move a name
    // off an object that etcd gives it, for good: the watch skips this node's own commits.
    if (Overtakes(in, origin)) {
      spdlog::debug("namespace: reset of {:x} (change {}, as of {}) skipped: changed since", id,
                    origin.seq, origin.as_of);
      return;
    }
    const std::vector<kvfs::Link> names = record ? record->links() : std::vector<kvfs::Link>{};
    if (record) {
      for (const kvfs::Link& l : names) {
        Inode* dir = Find(l.parent);
        Inode* holder = dir && dir->dir ? Child(dir, l.name) : nullptr;
        if (holder != in && Overtakes(holder, origin)) {
          const bool waits = InFlightLocked(holder->rec.id);
          spdlog::debug(
              "namespace: reset of {:x} (change {}, as of {}) skipped: '{}' held by "
              "{:x}, changed since{}",
              id, origin.seq, origin.as_of, l.name, holder->rec.id,
              waits ? "; runs again if that change is refused" : "");
          if (waits) resets_behind_[holder->rec.id].push_back({id, *record, origin});
          return;
        }
      }
    }
    if (!record) {
      resets_behind_dir_.erase(id);  // nothing comes back into it
      // Nothing durable: the object leaves the tree (a new file whose publish failed, a new
      // directory, a rename target that was never made).
      if (!in) return;
      // Unless a writer has it open and etcd never held it (no commit of it reached this
      // node): the writer's close publishes it, a change newer than the refused one. Taking
      // its names lost that write for good, close succeeded and no file was there (a file
      // rewritten right after etcd came back, before the reset of its refused creation).
      // Not durable, though: that publish must take its names in etcd too (a record whose
      // name key is missing lets another node take the name).
      if (shared_ && in->rec.revision == 0 && in->writing()) {
        spdlog::debug("namespace: reset of {:x} (change {}) waits for its writer's close", id,
                      origin.seq);
        resets_behind_writer_[id] = origin;
        in->journaled = false;
        return;
      }
      UnlinkAllNames(in, &stale_names);
      in->journaled = false;
      DropGone(in);
      ApplyDeferredClaimsLocked(stale);  // a record may have waited for a name it held
    } else {
      if (!in) {
        // An unlink that never became durable: the inode comes back.
        auto fresh = std::make_unique<Inode>();
        fresh->rec = *record;
        if (record->type == ObjectType::kDirectory) fresh->dir = std::make_unique<Directory>();
        fresh->linked = false;
        in = fresh.get();
        inodes_.Put(std::move(fresh));
      }
      data_changed = in->rec.layout != record->layout;
      // The kernel may hold the attributes of the refused change (a stat from another thread
      // while it waited on etcd): it keeps them for kStableTimeout unless told.
      attrs_changed = !SameAttrs(in->rec, *record);
      // A name in a directory that is not in the tree (it left with a refused change of this
      // node, and its own reset comes later) is given when the directory is back.
      for (const kvfs::Link& l : names) {
        if (Find(l.parent)) continue;
        spdlog::debug("namespace: reset of {:x} (change {}) waits for directory {:x}", id,
                      origin.seq, l.parent);
        resets_behind_dir_[l.parent].push_back({id, *record, origin});
        break;
      }
      // Whatever occupies a durable name moves aside: it gets its own call, or was never durable.
      auto move_aside = [&](Inode* dir, const std::string& name) {
        Inode* occupant = Child(dir, name);
        RemoveName(occupant, dir, name);
        stale_names.emplace_back(dir->rec.id, name);
        MaybeDrop(occupant);
        return true;
      };
      SetNames(in, names, move_aside, &stale_names);
      TakeAllButNames(in, *record);
      if (data_changed) NewVersion(in);
      in->journaled = true;
      AdoptParkedLocked(in, stale);
      MaybeDrop(in);
    }
  }
  spdlog::log(shared_ ? spdlog::level::debug : spdlog::level::warn,
              "namespace: object {:x} reset to the store's state ({}, as of {}, change {})", id,
              record ? "named '" + record->name + "'" : std::string("gone"), origin.as_of,
              origin.seq);
  Announce(stale);
  if (sink_ && (data_changed || attrs_changed)) sink_->InvalidateInode(id, data_changed);
  RunReadyResets();
}

}  // namespace kvfs::fs
