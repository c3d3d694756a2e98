// Namespace::SetPrefixParent / PrefixParent: user.kvfs.parent, the writer's explicit chain link
// for prefix-aware eviction. The value names the chunk this one extends: a plain name is looked
// up in the file's own directory, a value with a '/' is a path from the mount root (a leading
// '/' is allowed). The link is stored as the parent's object id in the record's prefix_parent,
// so renames of either file keep it, and it is journaled like any other attribute change (set
// before the first close, it goes to the store with the publish). An empty value clears it.
#include "namespace.h"

namespace kvfs::fs {

Status Namespace::SetPrefixParent(uint64_t ino, std::string_view value) {
  MetaBatch batch;
  uint64_t ticket = 0;
  {
    std::lock_guard lock(mu_);
    Inode* in = Find(ino);
    if (!in) return Status::NotFound("no such inode");
    if (in->rec.type != ObjectType::kFile) return Status::Invalid("only files have a parent");
    ObjectId parent = kInvalidId;
    if (!value.empty()) {
      // Resolve from the file's directory (a plain name) or from the root (a path).
      const bool from_root = value.find('/') != std::string_view::npos;
      Inode* at = Find(from_root ? kRootId : in->rec.parent);
      std::string_view rest = value;
      while (at && !rest.empty()) {
        const size_t slash = rest.find('/');
        const std::string_view part = rest.substr(0, slash);
        rest = slash == std::string_view::npos ? std::string_view() : rest.substr(slash + 1);
        if (part.empty() || part == ".") continue;
        if (!at->dir || part.size() > kNameMax) return Status::NotFound("no such parent chunk");
        at = Child(at, part);
      }
      if (!at) return Status::NotFound("no such parent chunk: " + std::string(value));
      if (at->rec.type != ObjectType::kFile) return Status::Invalid("the parent is not a file");
      if (at->rec.id == ino) return Status::Invalid("a chunk cannot be its own parent");
      parent = at->rec.id;
    }
    if (parent == in->rec.prefix_parent()) return Status::Ok();
    if (in->journaled && in->linked) KVFS_RETURN_IF_ERROR(store_->CheckWritable());
    in->rec.set_prefix_parent(parent);
    // Not published yet: the link goes to the store with the publish.
    if (!in->journaled || !in->linked) return Status::Ok();
    batch.puts.push_back(RecordOf(in));
    ticket = TakeTicket(batch);
  }
  return ApplyInOrder(ticket, batch);
}

Result<std::string> Namespace::PrefixParent(uint64_t ino) {
  std::lock_guard lock(mu_);
  Inode* in = Find(ino);
  if (!in) return Status::NotFound("no such inode");
  const ObjectId link = in->rec.prefix_parent();
  Inode* parent = link != kInvalidId ? Find(link) : nullptr;
  // No link, or the parent was unlinked or evicted since: nothing to name.
  if (!parent || !parent->linked) return Status::Error(ENODATA, "no parent link");
  if (parent->rec.parent == in->rec.parent) return std::string(FirstName(parent));
  // Elsewhere: its path from the mount root.
  std::string path(FirstName(parent));
  for (Inode* d = Find(parent->rec.parent); d && d->rec.id != kRootId; d = Find(d->rec.parent)) {
    if (!d->linked) return Status::Error(ENODATA, "the parent's directory is gone");
    path = std::string(FirstName(d)) + "/" + path;
  }
  return "/" + path;
}

}  // namespace kvfs::fs
