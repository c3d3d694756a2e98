// Namespace's user xattrs: setxattr(2) and friends in the "user." namespace (the user.kvfs.*
// names are the fs's own controls and never come here). They live in the record
// (NamelessRecord::xattrs, sorted by name) and are journaled like any attribute change, so
// they survive a restart and, in a cluster, reach every node with the record. Set on a file
// before its first close, they go to the store with the publish. The root directory has no
// stored record (its mode is not kept either), so it takes none.
#include <sys/xattr.h>

#include <algorithm>

#include "namespace.h"

namespace kvfs::fs {
namespace {

Status CheckXattrName(std::string_view name) {
  if (!name.starts_with(kUserXattrPrefix) || name.starts_with("user.kvfs.")) {
    return Status::Error(ENOTSUP, "not a user xattr");
  }
  if (name.size() == kUserXattrPrefix.size()) return Status::Invalid("empty xattr name");
  if (name.size() > kXattrNameMax) return Status::Error(ERANGE, "xattr name too long");
  return Status::Ok();
}

// Where `name` is, or would go, in the sorted list (an iterator of the list's constness).
template <class List>
auto Position(List& list, std::string_view name) {
  return std::lower_bound(list.begin(), list.end(), name,
                          [](const Xattr& x, std::string_view n) { return x.name < n; });
}

}  // namespace

Status Namespace::SetXattr(uint64_t ino, std::string_view name, std::string_view value, int flags) {
  KVFS_RETURN_IF_ERROR(CheckXattrName(name));
  if (flags & ~(XATTR_CREATE | XATTR_REPLACE)) return Status::Invalid("unknown xattr flags");
  return RetryConflicts([&] { return ChangeXattrOnce(ino, name, &value, flags); });
}

Status Namespace::RemoveXattr(uint64_t ino, std::string_view name) {
  KVFS_RETURN_IF_ERROR(CheckXattrName(name));
  return RetryConflicts([&] { return ChangeXattrOnce(ino, name, nullptr, 0); });
}

Status Namespace::ChangeXattrOnce(uint64_t ino, std::string_view name,
                                  const std::string_view* value, int flags) {
  MetaBatch batch;
  uint64_t ticket = 0;
  {
    std::lock_guard lock(mu_);
    Inode* in = Find(ino);
    if (!in) return Status::NotFound("no such inode");
    if (in->rec.type != ObjectType::kFile && in->rec.type != ObjectType::kDirectory) {
      return Status::Error(EPERM, "user xattrs are for files and directories");
    }
    if (in->rec.id == kRootId) return Status::Error(ENOTSUP, "the root directory keeps no xattrs");
    std::vector<Xattr> list = in->rec.xattrs();
    auto at = Position(list, name);
    const bool exists = at != list.end() && at->name == name;
    if (!value) {
      if (!exists) return Status::Error(ENODATA, "no such xattr");
      list.erase(at);
    } else {
      if (exists && (flags & XATTR_CREATE)) return Status::Error(EEXIST, "xattr exists");
      if (!exists && (flags & XATTR_REPLACE)) return Status::Error(ENODATA, "no such xattr");
      // The value it already has: nothing changes, not even ctime (as on ext4), and nothing
      // is written (a connector tagging every file it reads costs no transaction).
      if (exists && at->value == *value) return Status::Ok();
      if (exists) {
        at->value.assign(*value);
      } else {
        list.insert(at, Xattr{std::string(name), std::string(*value)});
      }
      if (!ValidXattrs(list)) {
        return Status::Error(
            ENOSPC, "an object's xattrs take at most " + std::to_string(kMaxXattrBytes) + " bytes");
      }
    }
    in->rec.set_xattrs(std::move(list));
    in->rec.ctime = Now();
    // Not published yet: the xattrs go to the store with the publish.
    if (!in->journaled || !in->linked) return Status::Ok();
    batch.puts.push_back(RecordOf(in));
    in->lazy_dirty = false;
    ticket = TakeTicket(batch);
  }
  return ApplyInOrder(ticket, batch);
}

Result<std::string> Namespace::GetXattr(uint64_t ino, std::string_view name) {
  std::lock_guard lock(mu_);
  Inode* in = Find(ino);
  if (!in) return Status::NotFound("no such inode");
  const std::vector<Xattr>& list = in->rec.xattrs();
  auto at = Position(list, name);
  if (at == list.end() || at->name != name) return Status::Error(ENODATA, "no such xattr");
  return at->value;
}

Result<std::string> Namespace::ListXattrs(uint64_t ino) {
  std::lock_guard lock(mu_);
  Inode* in = Find(ino);
  if (!in) return Status::NotFound("no such inode");
  std::string names;
  for (const Xattr& x : in->rec.xattrs()) {
    names += x.name;
    names.push_back('\0');
  }
  return names;
}

}  // namespace kvfs::fs
