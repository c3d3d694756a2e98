// An inode's names: hard links, and the helpers that keep the tree and the record in step.
//
// A record lists its names as (parent, name) followed by extra_links; the tree's directories
// map each of those names to the inode. While an inode is `linked` the two agree exactly, so a
// record journaled at any moment carries every name it has. Directories have one name (link(2)
// refuses them), so `..` is always rec.parent.
#include <spdlog/spdlog.h>

#include <algorithm>

#include "namespace.h"

namespace kvfs::fs {

std::string_view Namespace::FirstName(const Inode* in) const {
  if (in->name_cookie != 0) {
    const Inode* dir = inodes_.Find(in->rec.parent);
    if (dir && dir->dir) {
      const std::string_view name = dir->dir->NameAt(in->name_cookie);
      if (!name.empty()) return name;
    }
    spdlog::error("namespace: inode {} lost its first name's entry {} in {}", in->rec.id,
                  static_cast<uint64_t>(in->name_cookie), in->rec.parent);
  }
  if (in->kept_name) {
    auto it = kept_names_.find(in->rec.id);
    if (it != kept_names_.end()) return it->second;
  }
  return {};
}

void Namespace::SetFirstName(Inode* in, uint64_t parent, std::string_view name) {
  in->rec.parent = parent;
  const Inode* dir = inodes_.Find(parent);
  const uint64_t cookie = dir && dir->dir ? dir->dir->CookieOf(name, in->rec.id) : 0;
  in->name_cookie = cookie;
  if (cookie != 0) {
    DropKeptName(in);
  } else {
    KeepName(in, std::string(name));  // not linked there (a failed link)
  }
}

void Namespace::KeepFirstName(Inode* in) {
  if (in->name_cookie == 0) return;
  KeepName(in, std::string(FirstName(in)));
  in->name_cookie = 0;
}

void Namespace::KeepName(Inode* in, std::string name) {
  kept_names_[in->rec.id] = std::move(name);
  in->kept_name = true;
}

void Namespace::DropKeptName(Inode* in) {
  if (!in->kept_name) return;
  kept_names_.erase(in->rec.id);
  in->kept_name = false;
}

ObjectRecord Namespace::RecordOf(const Inode* in) const {
  ObjectRecord r;
  static_cast<NamelessRecord&>(r) = in->rec;
  r.name = FirstName(in);
  return r;
}

void Namespace::TakeAllButNames(Inode* in, const ObjectRecord& rec) {
  const uint64_t parent = in->rec.parent;
  RareVector<kvfs::Link> extra_links = std::move(in->rec.extra_links);
  in->rec = rec;  // the record without its name: the inode's is held apart
  in->rec.parent = parent;
  in->rec.extra_links = std::move(extra_links);
}

size_t Namespace::KeptNameCount() {
  std::lock_guard lock(mu_);
  return kept_names_.size();
}

bool Namespace::IsFirstName(const Inode* in, const kvfs::Link& name) const {
  return in->rec.parent == name.parent && FirstName(in) == name.name;
}

void Namespace::AddName(Inode* in, Inode* dir, const std::string& name) {
  LinkChild(dir, name, in);
  if (!in->linked) {
    in->rec.extra_links.clear();
    in->linked = true;
    SetFirstName(in, dir->rec.id, name);
  } else {
    in->rec.extra_links.push_back({dir->rec.id, name});
  }
}

void Namespace::RemoveName(Inode* in, Inode* dir, const std::string& name) {
  if (!in->linked) {
    UnlinkChild(dir, name);
    return;
  }
  NamelessRecord& r = in->rec;
  if (!IsFirstName(in, {dir->rec.id, name})) {
    UnlinkChild(dir, name);
    r.extra_links.erase_value(kvfs::Link{dir->rec.id, name});
    return;
  }
  if (r.extra_links.empty()) {
    KeepFirstName(in);  // the record keeps its last name, for logs
    UnlinkChild(dir, name);
    in->linked = false;
    return;
  }
  UnlinkChild(dir, name);
  kvfs::Link next = std::move(r.extra_links.front());
  r.extra_links.erase(r.extra_links.begin());
  SetFirstName(in, next.parent, next.name);
}

void Namespace::RenameInRecord(Inode* in, const kvfs::Link& from, const kvfs::Link& to,
                               bool first) {
  if (first) {
    SetFirstName(in, to.parent, to.name);
    return;
  }
  std::replace(in->rec.extra_links.begin(), in->rec.extra_links.end(), from, to);
}

void Namespace::MoveName(Inode* in, Inode* src_dir, const std::string& name, Inode* dst_dir,
                         const std::string& new_name) {
  const kvfs::Link from{src_dir->rec.id, name};
  const bool first = IsFirstName(in, from);
  UnlinkChild(src_dir, name);
  LinkChild(dst_dir, new_name, in);
  RenameInRecord(in, from, {dst_dir->rec.id, new_name}, first);
}

std::vector<kvfs::Link> Namespace::NamesOf(const Inode* in) const {
  std::vector<kvfs::Link> names;
  if (!in->linked) return names;
  names.reserve(1 + in->rec.extra_links.size());
  names.push_back({in->rec.parent, std::string(FirstName(in))});
  names.insert(names.end(), in->rec.extra_links.begin(), in->rec.extra_links.end());
  return names;
}

void Namespace::UnlinkAllNames(Inode* in, std::vector<std::pair<uint64_t, std::string>>* gone) {
  KeepFirstName(in);  // the record keeps its names, for logs
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
  in->name_cookie = 0;  // its entry may go below; `before` holds the name
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
      in->linked = true;
      SetFirstName(in, l.parent, l.name);
    } else {
      in->rec.extra_links.push_back(l);
    }
  }
  // Nothing linked: the inode keeps its last first name, for logs.
  if (!in->linked && !before.empty()) KeepName(in, before.front().name);
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
    batch.puts.push_back(RecordOf(in));
    FinishNames(names, &batch);
    batch.exclusive = true;
    ticket = TakeTicket(batch);
  }
  if (Status st = ApplyInOrder(ticket, batch); !st.ok()) {
    UndoLookup(entry.attr.st_ino);  // the kernel never got the entry
    return st;
  }
  return entry;
}

}  // namespace kvfs::fs
