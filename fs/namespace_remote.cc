// Namespace changes made on other cluster nodes (StoreListener::OnRemoteChanges and
// OnRemoteResync, through StoreEvents).
//
// The shared store has already committed the change (etcd orders them: each carries the
// revision that made it); this file only brings the in-memory tree in line and tells the kernel
// what went stale:
//   a name appeared        notify_inval_entry(parent, name): drops a cached negative dentry,
//                          so a lookup that missed a moment ago finds it now
//   a name moved or went   notify_inval_entry for the old (and new) name
//   a new version          notify_inval_inode(ino, data): cached pages and attributes
//   attributes changed     notify_inval_inode(ino, attrs only)
// Notifications go through the sink's own thread after mu_ is released: the caller is the
// store's watch thread, and the kernel may hold a directory lock while a FUSE thread waits on
// mu_.
//
// A name is unique in the shared namespace, so a committed record taking a name takes it from
// whatever committed record the tree still shows there (that record's own change follows). A
// file of this node that is not published yet keeps its name: its publish takes the name over
// (last writer wins) or, for O_EXCL, was committed before open returned; if its writer unlinks
// it or moves it away first, the record that waited for the name takes it.
#include <malloc.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>

#include "namespace.h"

namespace kvfs::fs {
namespace {

// Remote records arrive in the watch's large transient buffers, and the inodes, layouts and
// names they leave behind are small and long-lived: glibc keeps the freed buffers as holes
// between them, pages it never returns (33 bytes per name at 1M names, measured against a fixed
// mmap threshold). After this many records the free pages are handed back (malloc_trim).
constexpr size_t kTrimEveryRecords = size_t{1} << 16;

bool SameContent(const LayoutRef& a, const LayoutRef& b) {
  if (a == b) return true;
  // A shared store hands out one layout object per version; empty files have none.
  return (a ? a->size : 0) == 0 && (b ? b->size : 0) == 0;
}

bool SameTime(const Timespec64& a, const Timespec64& b) {
  return a.sec == b.sec && a.nsec == b.nsec;
}

}  // namespace

bool Namespace::SameAttrs(const NamelessRecord& a, const NamelessRecord& b) {
  return a.mode == b.mode && a.uid == b.uid && a.gid == b.gid && a.flags == b.flags &&
         a.rdev() == b.rdev() && a.type == b.type && SameTime(a.atime, b.atime) &&
         SameTime(a.mtime, b.mtime) && SameTime(a.ctime, b.ctime) &&
         a.symlink_target() == b.symlink_target() && a.size() == b.size();
}

bool Namespace::ClaimNameLocked(Inode* dir, const std::string& name, const ObjectRecord& rec,
                                Stale& stale) {
  Inode* other = Child(dir, name);
  if (!other || other->rec.id == rec.id) return true;
  // The holder's own change is in the commit being applied (an exchange, a directory renamed
  // where another moves from) and not applied yet: its record, which follows in the same step,
  // gives it its new names. Before, a directory kept the name and the claimant stayed out of
  // the tree for good. (A record parked for its directory is older than that commit.)
  if (other->journaled && applying_.count(other->rec.id) && other->rec.revision < rec.revision) {
    RemoveName(other, dir, name);
    stale.entries.emplace_back(dir->rec.id, name);
    return true;
  }
  // A directory keeps the name until its own change (a rename, an rmdir) arrives and frees it.
  if (other->dir) {
    spdlog::debug("namespace: record {:x} '{}' waits for the name held by directory {:x}", rec.id,
                  name, other->rec.id);
    return false;
  }
  // This node's own file, not published yet, keeps the name until its publish decides (last
  // writer wins). Its writer may instead move it away or unlink it first, which etcd never
  // hears of: the record then takes the name (RemoveEntry, RenameOnce). It did not, and
  // the other node's file, in etcd under that name, was missing here for good.
  if (!other->journaled) {
    spdlog::debug("namespace: record {:x} '{}' waits for the name held by unpublished {:x}", rec.id,
                  name, other->rec.id);
    deferred_claims_[rec.id] = rec;
    return false;
  }
  // The holder took the name in a later commit (this node's own, which the watch has not
  // reached yet): etcd gives it the name; the claimant's own later change (it lost the name to
  // that commit) follows.
  if (rec.revision != 0 && other->rec.revision > rec.revision) {
    spdlog::debug("namespace: record {:x} at revision {} lost '{}' to {:x} at revision {}", rec.id,
                  rec.revision, name, other->rec.id, other->rec.revision);
    return false;
  }
  // The holder's change is on its way to etcd: its answer says who holds the name (a commit
  // may take it from the claimant, a refusal resets the holder). The claim waits for it.
  if (InFlightLocked(other->rec.id)) {
    spdlog::debug("namespace: record {:x} '{}' waits for the change of {:x} on its way", rec.id,
                  name, other->rec.id);
    deferred_claims_[rec.id] = rec;
    return false;
  }
  // The committed holder gave the name up in the shared namespace; its own change follows.
  RemoveName(other, dir, name);
  if (!other->linked) other->journaled = false;
  stale.entries.emplace_back(dir->rec.id, name);
  stale.inodes.emplace_back(other->rec.id, false);  // its nlink changed
  MaybeDrop(other);
  return true;
}

void Namespace::RemotePutLocked(const ObjectRecord& rec, Stale& stale) {
  if (rec.id == kRootId || rec.id == kInvalidId || !CheckName(rec.name).ok()) return;
  deferred_claims_.erase(rec.id);  // this state is newer than one that waited
  Inode* in = Find(rec.id);
  // Already as new (this node's own change, or delivered twice).
  if (in && in->rec.revision != 0 && rec.revision != 0 && in->rec.revision >= rec.revision) {
    spdlog::debug("namespace: remote record {:x} '{}' at revision {} skipped: this node has {}",
                  rec.id, rec.name, rec.revision, in->rec.revision);
    return;
  }
  spdlog::debug("namespace: remote record {:x} '{}' at revision {} (this node had {})", rec.id,
                rec.name, rec.revision, in ? in->rec.revision : 0);
  Inode* dir = Find(rec.parent);
  if (!dir || !dir->dir) {
    // The parent directory is not here (yet): after a re-read records come in id order, and a
    // directory may hold an older id's file. Park the record until it arrives. A hard link into
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
  const std::vector<kvfs::Link> names = rec.links();
  bool new_version = false, attrs = false;
  const uint64_t revision_before = in ? in->rec.revision : 0;
  if (!in) {
    auto fresh = std::make_unique<Inode>();
    fresh->rec = rec;
    fresh->linked = false;
    if (rec.type == ObjectType::kDirectory) fresh->dir = std::make_unique<Directory>();
    in = fresh.get();
    inodes_.Put(std::move(fresh));
  } else {
    new_version = !SameContent(in->rec.layout, rec.layout);
    attrs = !SameAttrs(in->rec, rec);
  }
  const uint32_t nlink_before = in->linked ? in->rec.nlink() : 0;
  auto claim = [&](Inode* d, const std::string& n) { return ClaimNameLocked(d, n, rec, stale); };
  SetNames(in, names, claim, &stale.entries);
  if (in->linked && in->rec.nlink() != nlink_before) attrs = true;  // a link came or went
  // Everything but the names, which SetNames settled (a name lost to a conflict is left out).
  // A local writer's open session stays as it is; its close publishes over this version.
  TakeAllButNames(in, rec);
  // A name of the record waits for a change of this node on its way (deferred_claims_):
  // applied again, whole, once that change is answered, the record must not be skipped then
  // as already applied. It was, and a directory another node had moved onto the name of this
  // node's new file, its publish on its way, was gone from this node for good, its subtree
  // with it (the stress run, seed 920). A change of this node built meanwhile on the
  // half-applied record is based on the older revision, and refused.
  if (deferred_claims_.count(rec.id)) in->rec.revision = revision_before;
  if (new_version) NewVersion(in);
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
  AdoptParkedLocked(in, stale);
}

void Namespace::AdoptParkedLocked(Inode* in, Stale& stale) {
  if (!in->dir || !in->linked) return;
  if (auto behind = resets_behind_dir_.find(in->rec.id); behind != resets_behind_dir_.end()) {
    for (ResetBehind& r : behind->second) resets_ready_.push_back(std::move(r));
    resets_behind_dir_.erase(behind);
  }
  auto waiting = remote_orphans_.find(in->rec.id);
  if (waiting == remote_orphans_.end()) return;
  std::vector<ObjectRecord> children = std::move(waiting->second);
  remote_orphans_.erase(waiting);
  for (const ObjectRecord& child : children) RemotePutLocked(child, stale);
}

void Namespace::RemoteRemoveLocked(ObjectId id, Stale& stale) {
  deferred_claims_.erase(id);
  for (auto& [dir_id, waiting] : remote_orphans_)
    std::erase_if(waiting, [&](const ObjectRecord& r) { return r.id == id; });
  resets_behind_dir_.erase(id);  // nothing comes back into it
  Inode* in = Find(id);
  if (!in || id == kRootId) return;
  spdlog::debug("namespace: remote removal of {:x}", id);
  // A directory's children were removed before it (a directory goes only empty); a file of
  // this node still being written there stays with its writer (its publish is refused).
  UnlinkAllNames(in, &stale.entries);
  // Open handles keep the layout they hold; nothing more is journaled for this inode.
  in->journaled = false;
  ReleaseUnreachableData(in);
  DropGone(in);
}

void Namespace::TouchChangedDirectoriesLocked(const Stale& stale) {
  // A directory whose entries another node changed has changed here too: its mtime and ctime
  // move as for a local change (ls -lt, find -newer). Before, they moved only on the node that
  // made the change, and a directory's times differed between nodes for good. The kernel's
  // cached attributes of the directory go with the entry's invalidation (the kernel drops its
  // parent's attributes then). Not written back (not lazy_dirty): the record in etcd is the
  // changing node's business, and every node persisting every directory at shutdown would be a
  // storm of puts. A node that reads etcd afresh shows the times of the records.
  if (stale.entries.empty()) return;
  const Timespec64 now = Now();
  uint64_t last = 0;
  for (const auto& [parent, name] : stale.entries) {
    if (parent == last) continue;  // a commit's entries mostly share their directory
    last = parent;
    Inode* dir = Find(parent);
    if (dir && dir->dir) dir->rec.mtime = dir->rec.ctime = now;
  }
}

bool Namespace::KnownToKernelLocked(uint64_t ino) const {
  if (ino == kRootId) return true;  // never forgotten
  const Inode* in = inodes_.Find(ino);
  // An open file was looked up first; nlookup counts every entry the kernel was given.
  return in && (in->nlookup > 0 || in->opens() > 0);
}

void Namespace::KeepKnownToKernelLocked(Stale& stale) const {
  std::erase_if(stale.entries, [&](const auto& e) { return !KnownToKernelLocked(e.first); });
  std::erase_if(stale.inodes, [&](const auto& i) { return !KnownToKernelLocked(i.first); });
}

void Namespace::ApplyRemoteChanges(const std::vector<ObjectRecord>& puts,
                                   const std::vector<ObjectId>& removes) {
  Stale stale;
  bool trim = false;
  {
    std::lock_guard lock(mu_);
    // Removes first: a name one commit frees is then free for the records it puts.
    for (ObjectId id : removes) RemoteRemoveLocked(id, stale);
    for (const ObjectRecord& rec : puts) applying_.insert(rec.id);
    for (const ObjectRecord& rec : puts) RemotePutLocked(rec, stale);
    applying_.clear();
    TouchChangedDirectoriesLocked(stale);
    KeepKnownToKernelLocked(stale);
    remote_since_trim_ += puts.size() + removes.size();
    trim = remote_since_trim_ >= kTrimEveryRecords;
    if (trim) remote_since_trim_ = 0;
  }
  if (trim) {
    const auto start = std::chrono::steady_clock::now();
    malloc_trim(0);
    spdlog::debug("namespace: gave free heap pages back in {} us",
                  std::chrono::duration_cast<std::chrono::microseconds>(
                      std::chrono::steady_clock::now() - start)
                      .count());
  }
  Announce(stale);
  RunReadyResets();
}

void Namespace::RunReadyResets() {
  std::vector<ResetBehind> ready;
  {
    std::lock_guard lock(mu_);
    ready.swap(resets_ready_);
  }
  for (const ResetBehind& r : ready)
    RestoreStoreRecord(r.id, r.record ? &*r.record : nullptr, r.origin);
}

void Namespace::Announce(const Stale& stale) {
  if (!sink_) return;
  for (const auto& [parent, name] : stale.entries) sink_->InvalidateEntry(parent, name);
  for (const auto& [ino, data] : stale.inodes) sink_->InvalidateInode(ino, data);
}

void Namespace::ForgetRemoteRevisions() {
  std::lock_guard lock(mu_);
  inodes_.ForEach([](Inode* in) {
    // 0 stays 0: a change of this node still in flight, kept by the re-read.
    if (in->rec.id != kRootId && in->journaled && in->rec.revision != 0) in->rec.revision = 1;
  });
}

void Namespace::ApplyRemoteResync(const std::vector<ObjectId>& present, uint64_t revision) {
  Stale stale;
  {
    std::lock_guard lock(mu_);
    std::vector<ObjectId> gone;
    inodes_.ForEach([&](const Inode* in) {
      const ObjectId id = in->rec.id;
      if (id == kRootId || !in->journaled || in->rec.revision == 0) return;
      if (in->rec.revision > revision) return;  // committed after the re-read
      if (!std::binary_search(present.begin(), present.end(), id)) gone.push_back(id);
    });
    // Records that waited for a name and are gone from etcd since.
    std::erase_if(deferred_claims_, [&](const auto& kv) {
      return kv.second.revision <= revision &&
             !std::binary_search(present.begin(), present.end(), kv.first);
    });
    // Children before their directories: ids are handed out in creation order.
    std::sort(gone.rbegin(), gone.rend());
    for (ObjectId id : gone) RemoteRemoveLocked(id, stale);
    if (!gone.empty())
      spdlog::info("namespace: re-read at revision {}: {} objects gone meanwhile", revision,
                   gone.size());
    TouchChangedDirectoriesLocked(stale);
    KeepKnownToKernelLocked(stale);
  }
  if (!sink_) return;
  for (const auto& [parent, name] : stale.entries) sink_->InvalidateEntry(parent, name);
}

}  // namespace kvfs::fs
