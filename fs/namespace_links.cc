// An inode's names: hard links, and the helpers that keep the tree and the record in step.
//
// A record lists its names as (parent, name) followed by extra_links; the tree's directories
// map each of those names to the inode. While an inode is `linked` the two agree exactly, so a
// record journaled at any moment carries every name it has. Directories have one name (link(2)
// refuses them), so `..` is always rec.parent.
#include <algorithm>

#include "namespace.h"

namespace kvfs::fs {

void Namespace::AddName(Inode* in, Inode* dir, const std::string& name) {
  LinkChild(dir, name, in);
  if (!in->linked) {
    in->rec.parent = dir->rec.id;
    in->rec.name = name;
    in->rec.extra_links.clear();
    in->linked = true;
  } else {
    in->rec.extra_links.push_back({dir->rec.id, name});
  }
}

void Namespace::RemoveName(Inode* in, Inode* dir, const std::string& name) {
  UnlinkChild(dir, name);
  if (!in->linked) return;
  ObjectRecord& r = in->rec;
  if (r.parent == dir->rec.id && r.name == name) {
    if (r.extra_links.empty()) {
      in->linked = false;  // the record keeps its last name, for logs
      return;
    }
    r.parent = r.extra_links.front().parent;
    r.name = std::move(r.extra_links.front().name);
    r.extra_links.erase(r.extra_links.begin());
    return;
  }
  r.extra_links.erase_value(kvfs::Link{dir->rec.id, name});
}

void Namespace::RenameInRecord(Inode* in, const kvfs::Link& from, const kvfs::Link& to) {
  ObjectRecord& r = in->rec;
  if (r.parent == from.parent && r.name == from.name) {
    r.parent = to.parent;
    r.name = to.name;
    return;
  }
  std::replace(r.extra_links.begin(), r.extra_links.end(), from, to);
}

void Namespace::MoveName(Inode* in, Inode* src_dir, const std::string& name, Inode* dst_dir,
                         const std::string& new_name) {
  UnlinkChild(src_dir, name);
  LinkChild(dst_dir, new_name, in);
  RenameInRecord(in, {src_dir->rec.id, name}, {dst_dir->rec.id, new_name});
}

std::vector<kvfs::Link> Namespace::NamesOf(const Inode* in) {
  std::vector<kvfs::Link> names;
  if (!in->linked) return names;
  names.reserve(1 + in->rec.extra_links.size());
  names.push_back({in->rec.parent, in->rec.name});
  names.insert(names.end(), in->rec.extra_links.begin(), in->rec.extra_links.end());
  return names;
}

void Namespace::UnlinkAllNames(Inode* in, std::vector<std::pair<uint64_t, std::string>>* gone) {
  for (const kvfs::Link& l : NamesOf(in)) {
    if (Inode* dir = Find(l.parent); dir && dir->dir) UnlinkChild(dir, l.name);
    if (gone) gone->emplace_back(l.parent, l.name);
  }
  in->linked = false;
}

void Namespace::SetNames(Inode* in, const std::vector<kvfs::Link>& names,
                         const std::function<bool(Inode*, const std::string&)>& take,
                         std::vector<std::pair<uint64_t, std::string>>* changed) {
  const std::vector<kvfs::Link> before = NamesOf(in);
  auto listed = [](const std::vector<kvfs::Link>& v, const kvfs::Link& l) {
    return std::find(v.begin(), v.end(), l) != v.end();
  };
  for (const kvfs::Link& l : before) {
    if (listed(names, l)) continue;
    if (Inode* dir = Find(l.parent); dir && dir->dir) UnlinkChild(dir, l.name);
    if (changed) changed->emplace_back(l.parent, l.name);
  }
  in->linked = false;
  in->rec.extra_links.clear();
  for (const kvfs::Link& l : names) {
    Inode* dir = Find(l.parent);
    if (!dir || !dir->dir || !CheckName(l.name).ok()) continue;
    if (in->linked && listed(NamesOf(in), l)) continue;  // listed twice
    if (!listed(before, l)) {
      Inode* other = Child(dir, l.name);
      if (other && other != in && !take(dir, l.name)) continue;
      if (other != in) LinkChild(dir, l.name, in);
      if (changed) changed->emplace_back(l.parent, l.name);
    }
    // A name kept from before stays where it is in its directory (readdir cookies).
    if (!in->linked) {
      in->rec.parent = l.parent;
      in->rec.name = l.name;
      in->linked = true;
    } else {
      in->rec.extra_links.push_back(l);
    }
  }
}

Result<EntryInfo> Namespace::Link(uint64_t ino, uint64_t new_parent, std::string_view new_name) {
  return RetryConflicts([&] { return LinkOnce(ino, new_parent, new_name); });
}

Result<EntryInfo> Namespace::LinkOnce(uint64_t ino, uint64_t new_parent,
                                      std::string_view new_name) {
  MetaBatch batch;
  EntryInfo entry;
  uint64_t ticket = 0;
  {
    std::lock_guard lock(mu_);
    Inode* in = Find(ino);
    if (!in) return Status::NotFound("no such inode");
    if (in->dir) return Status::Error(EPERM, "cannot link a directory");
    // Its last name is gone (unlinked, evicted): a link cannot bring it back.
    if (!in->linked) return Status::NotFound("file was removed");
    if (in->rec.nlink() >= kMaxLinks) return Status::Error(EMLINK, "too many links");
    KVFS_ASSIGN_OR_RETURN(Inode * dir, DirForNewName(new_parent, new_name));
    NameLedger names;
    NoteNames(names, in);
    AddName(in, dir, std::string(new_name));
    ForgiveMiss(new_parent, new_name);
    const Timespec64 now = Now();
    in->rec.ctime = now;
    dir->rec.mtime = dir->rec.ctime = now;
    dir->lazy_dirty = true;
    ++in->nlookup;  // the reply is an entry the kernel counts, like a lookup
    entry = MakeEntry(in);
    // A file not published yet carries its names to the store when it is.
    if (!in->journaled) return entry;
    batch.puts.push_back(in->rec);
    FinishNames(names, &batch);
    batch.exclusive = true;
    ticket = TakeTicket();
  }
  if (Status st = ApplyInOrder(ticket, batch); !st.ok()) {
    UndoLookup(entry.attr.st_ino);  // the kernel never got the entry
    return st;
  }
  return entry;
}

}  // namespace kvfs::fs
