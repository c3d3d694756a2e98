// Namespace changes made on other cluster nodes (ClusterListener -> ClusterNode -> here).
//
// The ClusterStore has already merged the change (last writer wins by stamp); this file only
// brings the in-memory tree in line and tells the kernel what went stale:
//   a name appeared        notify_inval_entry(parent, name): drops a cached negative dentry,
//                          so a lookup that missed a moment ago finds it now
//   a name moved or went   notify_inval_entry for the old (and new) name
//   a new version          notify_inval_inode(ino, data): cached pages and attributes
//   attributes changed     notify_inval_inode(ino, attrs only)
// Notifications go through the sink's own thread after mu_ is released: the caller is a
// transport worker, and the kernel may hold a directory lock while a FUSE thread waits on mu_.
//
// Two different records claiming one name (two nodes created it at once) resolve the same way
// on every node: the higher object id keeps the name, the other is not shown here.
#include <spdlog/spdlog.h>

#include "cluster_layout.h"
#include "namespace.h"

namespace kvfs::fs {
namespace {

bool SameContent(const LayoutRef& a, const LayoutRef& b) {
  if (a == b) return true;
  if (!a || !b) return (a ? a->size : 0) == 0 && (b ? b->size : 0) == 0;
  const auto* ca = cluster::AsClusterLayout(a.get());
  const auto* cb = cluster::AsClusterLayout(b.get());
  if (ca && cb) return ca->chunk_key == cb->chunk_key;
  // A locally published version (plain layout) and the cluster layout made of it.
  if (cb && cb->local == a) return true;
  if (ca && ca->local == b) return true;
  return false;
}

bool SameTime(const Timespec64& a, const Timespec64& b) {
  return a.sec == b.sec && a.nsec == b.nsec;
}

bool SameAttrs(const ObjectRecord& a, const ObjectRecord& b) {
  return a.mode == b.mode && a.uid == b.uid && a.gid == b.gid && a.flags == b.flags &&
         a.rdev == b.rdev && a.type == b.type && SameTime(a.atime, b.atime) &&
         SameTime(a.mtime, b.mtime) && SameTime(a.ctime, b.ctime) &&
         a.symlink_target == b.symlink_target && a.size() == b.size();
}

}  // namespace

bool Namespace::ClaimNameLocked(Inode* dir, const std::string& name, uint64_t id, Stale& stale) {
  Inode* other = Child(dir, name);
  if (!other || other->rec.id == id) return true;
  if (other->rec.id > id || other->dir) {
    spdlog::warn("namespace: peer record {} '{}' loses the name to record {}", id, name,
                 other->rec.id);
    return false;
  }
  // The lower id gives way: that name is unlinked here without journaling (its record stays in
  // the store). With no name left it is not shown at all.
  RemoveName(other, dir, name);
  if (!other->linked) other->journaled = false;
  stale.entries.emplace_back(dir->rec.id, name);
  stale.inodes.emplace_back(other->rec.id, false);  // its nlink changed
  MaybeDrop(other);
  return true;
}

void Namespace::RemotePutLocked(const ObjectRecord& rec, Stale& stale) {
  if (rec.id == kRootId || rec.id == kInvalidId || !CheckName(rec.name).ok()) return;
  Inode* in = Find(rec.id);
  Inode* dir = Find(rec.parent);
  if (!dir || !dir->dir) {
    // The parent directory has not arrived yet (pull answers are in id order, and a peer's
    // directory may hold an older id's file): park the record until it does. A hard link into
    // a directory that is missing is simply not shown (that directory may never come).
    auto& waiting = remote_orphans_[rec.parent];
    std::erase_if(waiting, [&](const ObjectRecord& r) { return r.id == rec.id; });
    waiting.push_back(rec);
    if (in && in->linked) {
      UnlinkAllNames(in, &stale.entries);
      MaybeDrop(in);
    }
    return;
  }
  std::vector<kvfs::Link> names{{rec.parent, rec.name}};
  names.insert(names.end(), rec.extra_links.begin(), rec.extra_links.end());
  bool new_version = false, attrs = false;
  if (!in) {
    auto fresh = std::make_unique<Inode>();
    fresh->rec = rec;
    fresh->linked = false;
    fresh->version = ++next_view_;
    if (rec.type == ObjectType::kDirectory) fresh->dir = std::make_unique<Directory>();
    in = fresh.get();
    inodes_.emplace(rec.id, std::move(fresh));
  } else {
    new_version = !SameContent(in->rec.layout, rec.layout);
    attrs = !SameAttrs(in->rec, rec);
  }
  const uint32_t nlink_before = in->linked ? in->rec.nlink() : 0;
  auto claim = [&](Inode* d, const std::string& n) { return ClaimNameLocked(d, n, rec.id, stale); };
  SetNames(in, names, claim, &stale.entries);
  if (in->linked && in->rec.nlink() != nlink_before) attrs = true;  // a link came or went
  // Everything but the names, which SetNames settled (a name lost to a conflict is left out).
  ObjectRecord next = rec;
  next.parent = in->rec.parent;
  next.name = in->rec.name;
  next.extra_links = in->rec.extra_links;
  // A local writer's open session stays as it is; its close publishes over this version.
  in->rec = std::move(next);
  if (new_version) in->version = ++next_view_;
  in->journaled = in->linked;
  if (!in->linked) {
    MaybeDrop(in);
    return;
  }
  if (new_version) {
    stale.inodes.emplace_back(rec.id, true);
  } else if (attrs) {
    stale.inodes.emplace_back(rec.id, false);
  }
  // Records that were waiting for this directory.
  if (in->dir) {
    auto waiting = remote_orphans_.find(rec.id);
    if (waiting != remote_orphans_.end()) {
      std::vector<ObjectRecord> children = std::move(waiting->second);
      remote_orphans_.erase(waiting);
      for (const ObjectRecord& child : children) RemotePutLocked(child, stale);
    }
  }
}

void Namespace::ApplyRemotePut(const ObjectRecord& rec) {
  Stale stale;
  {
    std::lock_guard lock(mu_);
    RemotePutLocked(rec, stale);
  }
  if (!sink_) return;
  for (const auto& [parent, name] : stale.entries) sink_->InvalidateEntry(parent, name);
  for (const auto& [ino, data] : stale.inodes) sink_->InvalidateInode(ino, data);
}

void Namespace::ApplyRemoteRemove(ObjectId id) {
  std::vector<std::pair<uint64_t, std::string>> gone;
  {
    std::lock_guard lock(mu_);
    for (auto& [dir_id, waiting] : remote_orphans_) {
      std::erase_if(waiting, [&](const ObjectRecord& r) { return r.id == id; });
    }
    Inode* in = Find(id);
    if (!in || id == kRootId) return;
    UnlinkAllNames(in, &gone);
    // Open handles keep the layout they hold; nothing more is journaled for this inode.
    in->journaled = false;
    MaybeDrop(in);
  }
  if (!sink_) return;
  for (const auto& [parent, name] : gone) sink_->InvalidateEntry(parent, name);
}

void Namespace::ReplaceLayout(ObjectId id, const LayoutRef& from, const LayoutRef& to) {
  std::lock_guard lock(mu_);
  Inode* in = Find(id);
  if (in && from && in->rec.layout == from) in->rec.layout = to;
}

}  // namespace kvfs::fs
