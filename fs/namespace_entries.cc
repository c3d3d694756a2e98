// The name-changing half of Namespace: creating directories, symlinks and special files, and
// removing and renaming names. Each change is one MetaBatch applied in ticket order
// (ApplyInOrder); a shared namespace may refuse it as a conflict, and unlink, rmdir and rename
// then run again on the tree as it is now (RetryConflicts).
#include <linux/fs.h>

#include <optional>

#include "namespace.h"

namespace kvfs::fs {
namespace {

// The object type of a mknod(2) mode; nullopt for a type mknod cannot make.
std::optional<ObjectType> MknodType(uint32_t mode) {
  switch (mode & S_IFMT) {
    case 0:  // mknod(2): a zero type means a regular file
    case S_IFREG:
      return ObjectType::kFile;
    case S_IFIFO:
      return ObjectType::kFifo;
    case S_IFCHR:
      return ObjectType::kCharDevice;
    case S_IFBLK:
      return ObjectType::kBlockDevice;
    case S_IFSOCK:
      return ObjectType::kSocket;
  }
  return std::nullopt;
}

}  // namespace

Result<Inode*> Namespace::DirForNewName(uint64_t parent, std::string_view name) {
  KVFS_RETURN_IF_ERROR(CheckName(name));
  KVFS_ASSIGN_OR_RETURN(Inode * dir, FindDir(parent));
  if (!dir->linked) return Status::NotFound("directory was removed");
  if (Child(dir, name) || (parent == kRootId && name == kControlDirName))
    return Status::Error(EEXIST, "name exists");
  return dir;
}

Result<Inode*> Namespace::NewChild(uint64_t parent, std::string_view name, ObjectType type,
                                   uint32_t mode, uint32_t uid, uint32_t gid) {
  KVFS_ASSIGN_OR_RETURN(Inode * dir, DirForNewName(parent, name));
  // A new name goes to the store (at once, or with the file's publish): refused up front, it is
  // not made (see ChunkStore::CheckWritable). After the name checks, as Linux answers EEXIST
  // before EROFS.
  KVFS_RETURN_IF_ERROR(store_->CheckWritable());
  // The kernel already dropped S_ISGID from a file's mode when the caller may not have it.
  if (dir->rec.mode & S_ISGID) {
    gid = dir->rec.gid;
    if (type == ObjectType::kDirectory) mode |= S_ISGID;
  }
  auto in = std::make_unique<Inode>();
  NamelessRecord& r = in->rec;
  r.id = store_->NewId();
  r.type = type;
  r.mode = mode & 07777;
  r.uid = uid;
  r.gid = gid;
  r.atime = r.mtime = r.ctime = Now();
  if (type == ObjectType::kDirectory) in->dir = std::make_unique<Directory>();
  in->linked = false;
  Inode* raw = in.get();
  inodes_.Put(std::move(in));
  AddName(raw, dir, std::string(name));
  ForgiveMiss(parent, name);
  dir->rec.mtime = dir->rec.ctime = r.mtime;
  dir->lazy_dirty = true;
  return raw;
}

Result<EntryInfo> Namespace::Mkdir(uint64_t parent, std::string_view name, uint32_t mode,
                                   uint32_t uid, uint32_t gid) {
  MetaBatch batch;
  EntryInfo entry;
  uint64_t ticket;
  {
    std::lock_guard lock(mu_);
    KVFS_ASSIGN_OR_RETURN(Inode * in,
                          NewChild(parent, name, ObjectType::kDirectory, mode, uid, gid));
    NameLedger names;
    NoteNames(names, in);
    in->journaled = true;
    FinishNames(names, &batch);
    batch.exclusive = true;
    ++in->nlookup;
    batch.puts.push_back(RecordOf(in));
    entry = MakeEntry(in);
    ticket = TakeTicket(batch);
  }
  if (Status st = ApplyInOrder(ticket, batch); !st.ok()) {
    UndoLookup(entry.attr.st_ino);  // the kernel never got the entry
    return st;
  }
  return entry;
}

Result<EntryInfo> Namespace::Symlink(uint64_t parent, std::string_view name,
                                     std::string_view target, uint32_t uid, uint32_t gid) {
  if (target.empty() || target.size() >= 4096) return Status::Error(ENAMETOOLONG, "bad target");
  MetaBatch batch;
  EntryInfo entry;
  uint64_t ticket;
  {
    std::lock_guard lock(mu_);
    KVFS_ASSIGN_OR_RETURN(Inode * in, NewChild(parent, name, ObjectType::kSymlink, 0777, uid, gid));
    in->rec.set_symlink_target(std::string(target));
    NameLedger names;
    NoteNames(names, in);
    in->journaled = true;
    FinishNames(names, &batch);
    batch.exclusive = true;
    ++in->nlookup;
    batch.puts.push_back(RecordOf(in));
    entry = MakeEntry(in);
    ticket = TakeTicket(batch);
  }
  if (Status st = ApplyInOrder(ticket, batch); !st.ok()) {
    UndoLookup(entry.attr.st_ino);  // the kernel never got the entry
    return st;
  }
  return entry;
}

Result<EntryInfo> Namespace::Mknod(uint64_t parent, std::string_view name, uint32_t mode,
                                   uint64_t rdev, uint32_t uid, uint32_t gid) {
  const std::optional<ObjectType> type = MknodType(mode);
  if (!type) return Status::Invalid("mknod cannot make this file type");
  MetaBatch batch;
  EntryInfo entry;
  uint64_t ticket;
  {
    std::lock_guard lock(mu_);
    KVFS_ASSIGN_OR_RETURN(Inode * in, NewChild(parent, name, *type, mode, uid, gid));
    if (*type == ObjectType::kCharDevice || *type == ObjectType::kBlockDevice)
      in->rec.set_rdev(rdev);
    NameLedger names;
    NoteNames(names, in);
    in->journaled = true;
    FinishNames(names, &batch);
    batch.exclusive = true;
    ++in->nlookup;
    batch.puts.push_back(RecordOf(in));
    entry = MakeEntry(in);
    ticket = TakeTicket(batch);
  }
  if (Status st = ApplyInOrder(ticket, batch); !st.ok()) {
    UndoLookup(entry.attr.st_ino);  // the kernel never got the entry
    return st;
  }
  return entry;
}

Status Namespace::RemoveEntry(uint64_t parent, std::string_view name, bool want_dir) {
  if (name.size() > kNameMax) return Status::Error(ENAMETOOLONG, "name too long");
  MetaBatch batch;
  uint64_t ticket = 0;
  Stale freed;
  {
    std::lock_guard lock(mu_);
    KVFS_ASSIGN_OR_RETURN(Inode * dir, FindDir(parent));
    Inode* in = Child(dir, name);
    if (!in) return Status::NotFound("no such entry");
    if (want_dir) {
      if (!in->dir) return Status::Error(ENOTDIR, "not a directory");
      if (!in->dir->empty()) return Status::Error(ENOTEMPTY, "directory not empty");
    } else if (in->dir) {
      return Status::Error(EISDIR, "is a directory");
    }
    const Timespec64 now = Now();
    const bool unpublished = !in->journaled;
    NameLedger names;
    NoteNames(names, in);
    DetachEntry(dir, in, std::string(name), now, &batch);
    FinishNames(names, &batch);
    dir->rec.mtime = dir->rec.ctime = now;
    dir->lazy_dirty = true;
    // A file in writing left a name etcd never gave it: a record waiting for it takes it.
    if (unpublished) ApplyDeferredClaimsLocked(freed);
    if (!batch.removes.empty() || !batch.puts.empty()) ticket = TakeTicket(batch);
  }
  Announce(freed);
  RunReadyResets();  // a record that waited for the name may have brought a directory back
  if (batch.removes.empty() && batch.puts.empty()) return Status::Ok();
  return ApplyInOrder(ticket, batch);
}

Status Namespace::Unlink(uint64_t parent, std::string_view name) {
  return RetryConflicts([&] { return RemoveEntry(parent, name, false); });
}

Status Namespace::Rmdir(uint64_t parent, std::string_view name) {
  return RetryConflicts([&] { return RemoveEntry(parent, name, true); });
}

Status Namespace::Rename(uint64_t parent, std::string_view name, uint64_t new_parent,
                         std::string_view new_name, unsigned flags) {
  return RetryConflicts([&] { return RenameOnce(parent, name, new_parent, new_name, flags); });
}

Status Namespace::RenameOnce(uint64_t parent, std::string_view name, uint64_t new_parent,
                             std::string_view new_name, unsigned flags) {
  if (flags & ~(RENAME_NOREPLACE | RENAME_EXCHANGE)) return Status::Invalid("unsupported flags");
  if ((flags & RENAME_NOREPLACE) && (flags & RENAME_EXCHANGE)) return Status::Invalid("flags");
  if (name.size() > kNameMax) return Status::Error(ENAMETOOLONG, "name too long");
  KVFS_RETURN_IF_ERROR(CheckName(new_name));
  MetaBatch batch;
  uint64_t ticket = 0;
  Stale freed;
  {
    std::lock_guard lock(mu_);
    KVFS_ASSIGN_OR_RETURN(Inode * src_dir, FindDir(parent));
    KVFS_ASSIGN_OR_RETURN(Inode * dst_dir, FindDir(new_parent));
    Inode* moved = Child(src_dir, name);
    if (!moved) return Status::NotFound("no such entry");
    if (new_parent == kRootId && new_name == kControlDirName)
      return Status::Error(EPERM, "reserved name");
    Inode* target = Child(dst_dir, new_name);
    if (target == moved) return Status::Ok();
    // A directory may not move below itself: walk up from the destination.
    auto inside = [&](Inode* dir, Inode* maybe_ancestor) {
      for (Inode* p = dir; p;) {
        if (p == maybe_ancestor) return true;
        if (p->rec.id == kRootId) return false;
        p = Find(p->rec.parent);
      }
      return false;
    };
    if (moved->dir && inside(dst_dir, moved)) return Status::Invalid("move into itself");
    Timespec64 now = Now();
    NameLedger names;
    NoteNames(names, moved);
    NoteNames(names, target);
    batch.exclusive = (flags & RENAME_NOREPLACE) != 0;
    if (flags & RENAME_EXCHANGE) {
      if (!target) return Status::NotFound("no target to exchange with");
      if (target->dir && inside(src_dir, target)) return Status::Invalid("move into itself");
      const kvfs::Link a{parent, std::string(name)}, b{new_parent, std::string(new_name)};
      const bool moved_first = IsFirstName(moved, a), target_first = IsFirstName(target, b);
      UnlinkChild(src_dir, a.name);
      UnlinkChild(dst_dir, b.name);
      LinkChild(dst_dir, b.name, moved);
      LinkChild(src_dir, a.name, target);
      RenameInRecord(moved, a, b, moved_first);
      RenameInRecord(target, b, a, target_first);
      moved->rec.ctime = target->rec.ctime = now;
      if (moved->journaled) batch.puts.push_back(RecordOf(moved));
      if (target->journaled) batch.puts.push_back(RecordOf(target));
    } else {
      if (target) {
        if (flags & RENAME_NOREPLACE) return Status::Error(EEXIST, "target exists");
        if (moved->dir) {
          if (!target->dir) return Status::Error(ENOTDIR, "target is not a directory");
          if (!target->dir->empty()) return Status::Error(ENOTEMPTY, "target directory not empty");
        } else if (target->dir) {
          return Status::Error(EISDIR, "target is a directory");
        }
        DetachEntry(dst_dir, target, std::string(new_name), now, &batch);
      }
      MoveName(moved, src_dir, std::string(name), dst_dir, std::string(new_name));
      moved->rec.ctime = now;
      if (!target) ForgiveMiss(new_parent, new_name);
      if (moved->journaled) {
        batch.puts.push_back(RecordOf(moved));
      } else {
        ApplyDeferredClaimsLocked(freed);  // as in RemoveEntry: a record may wait for the name
      }
    }
    FinishNames(names, &batch);
    if (src_dir != dst_dir) {
      // What the check against moving below itself saw must hold in the shared namespace too.
      if (moved->dir) NoteAncestors(dst_dir, &batch);
      if ((flags & RENAME_EXCHANGE) && target->dir) NoteAncestors(src_dir, &batch);
    }
    src_dir->rec.mtime = src_dir->rec.ctime = dst_dir->rec.mtime = dst_dir->rec.ctime = now;
    src_dir->lazy_dirty = dst_dir->lazy_dirty = true;
    if (!batch.puts.empty() || !batch.removes.empty()) ticket = TakeTicket(batch);
  }
  Announce(freed);
  RunReadyResets();  // as in RemoveEntry
  if (batch.puts.empty() && batch.removes.empty()) return Status::Ok();
  return ApplyInOrder(ticket, batch);
}

}  // namespace kvfs::fs
