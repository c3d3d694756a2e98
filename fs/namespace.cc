#include "namespace.h"

#include <spdlog/spdlog.h>
#include <time.h>

#include <algorithm>

#include "op_failure_log.h"

namespace kvfs::fs {
namespace {

uint32_t TypeBits(ObjectType t) {
  switch (t) {
    case ObjectType::kDirectory:
      return S_IFDIR;
    case ObjectType::kSymlink:
      return S_IFLNK;
    case ObjectType::kFifo:
      return S_IFIFO;
    case ObjectType::kCharDevice:
      return S_IFCHR;
    case ObjectType::kBlockDevice:
      return S_IFBLK;
    case ObjectType::kSocket:
      return S_IFSOCK;
    case ObjectType::kFile:
      break;
  }
  return S_IFREG;
}

bool IsSpecial(ObjectType t) {
  return t == ObjectType::kFifo || t == ObjectType::kCharDevice || t == ObjectType::kBlockDevice ||
         t == ObjectType::kSocket;
}

struct timespec ToTimespec(const Timespec64& t) {
  struct timespec ts;
  ts.tv_sec = static_cast<time_t>(t.sec);
  ts.tv_nsec = static_cast<long>(t.nsec);
  return ts;
}

// Allocated bytes as du should count them: what the store says the published version takes
// (the engine: its stored extents, none for holes; `truncate -s 1G` made 1 GiB of du from no
// data), else, while a writer changes the size, the size rounded up.
uint64_t AllocatedBytes(const ChunkStore& store, const NamelessRecord& rec, uint64_t size_now) {
  if (IsSpecial(rec.type)) return 0;  // metadata only
  if (rec.type != ObjectType::kFile) return 4096;
  if (rec.layout && rec.layout->size == size_now) return store.DiskBytes(*rec.layout);
  return (size_now + 4095) & ~4095ull;
}

}  // namespace

Timespec64 Now() {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return Timespec64{ts.tv_sec, ts.tv_nsec};
}

Status CheckName(std::string_view name) {
  if (name.empty() || name == "." || name == "..") return Status::Invalid("bad name");
  if (name.size() > kNameMax) return Status::Error(ENAMETOOLONG, "name longer than 255 bytes");
  if (name.find('/') != std::string_view::npos) return Status::Invalid("name contains '/'");
  return Status::Ok();
}

Namespace::Namespace(ChunkStore* store, InvalidationSink* sink)
    : store_(store), sink_(sink), shared_(store->SharedNamespace()) {
  auto root = std::make_unique<Inode>();
  root->rec.id = kRootId;
  root->rec.parent = kRootId;
  root->rec.type = ObjectType::kDirectory;
  root->rec.mode = 0755;
  root->rec.atime = root->rec.mtime = root->rec.ctime = Now();
  root->journaled = true;  // the root always exists and is never journaled
  root->dir = std::make_unique<Directory>();
  inodes_.Put(std::move(root));
}

Namespace::~Namespace() = default;

Status Namespace::Load() {
  std::lock_guard lock(mu_);
  // Streamed: a namespace of millions of records is never held twice. The first names wait
  // here until their directories are linked, then live in the directories only.
  std::vector<std::pair<uint64_t, std::string>> first_names;
  auto take = [&](ObjectRecord&& rec) {
    if (rec.id == kRootId || rec.id == kInvalidId) return;
    auto in = std::make_unique<Inode>();
    in->journaled = true;
    if (rec.type == ObjectType::kDirectory) in->dir = std::make_unique<Directory>();
    first_names.emplace_back(rec.id, std::move(rec.name));
    in->rec = std::move(rec);
    inodes_.Put(std::move(in));
  };
  auto start_over = [&] {  // nothing is linked yet: the inodes read so far simply go
    for (const auto& [id, name] : first_names) inodes_.Erase(id);
    first_names.clear();
  };
  KVFS_RETURN_IF_ERROR(store_->LoadRecords(take, start_over));
  // Link in id order so readdir lists older entries first, as they were created. An id the
  // store yields twice kept its later record (Put replaced the inode): its later name too.
  std::stable_sort(first_names.begin(), first_names.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  auto kept = std::unique(first_names.rbegin(), first_names.rend(),
                          [](const auto& a, const auto& b) { return a.first == b.first; });
  first_names.erase(first_names.begin(), kept.base());
  size_t orphans = 0;
  auto taken = [](Inode*, const std::string&) { return false; };  // the older record keeps it
  for (auto& [id, name] : first_names) {
    Inode* in = inodes_.Find(id);
    in->linked = false;
    // Every name whose directory exists and is free; the first of them becomes the first name.
    std::vector<kvfs::Link> names{{in->rec.parent, std::move(name)}};
    names.insert(names.end(), in->rec.extra_links.begin(), in->rec.extra_links.end());
    SetNames(in, names, taken, nullptr);
    if (!in->linked) {
      ++orphans;
      name = std::move(names.front().name);  // for the warning below
    }
  }
  // An orphan's parent may itself be an orphan: unreachable inodes are dropped from memory.
  for (const auto& [id, name] : first_names) {
    Inode* in = inodes_.Find(id);
    if (in->linked) continue;
    spdlog::warn("namespace: record {} '{}' has no parent directory {}; not shown", id, name,
                 in->rec.parent);
    EraseInode(in);
  }
  spdlog::info("namespace: loaded {} objects ({} orphans skipped)", inodes_.size() - 1, orphans);
  return Status::Ok();
}

Inode* Namespace::Find(uint64_t ino) { return inodes_.Find(ino); }

Result<Inode*> Namespace::FindDir(uint64_t ino) {
  Inode* in = Find(ino);
  if (!in) return Status::NotFound("no such inode");
  if (!in->dir) return Status::Error(ENOTDIR, "not a directory");
  return in;
}

Inode* Namespace::Child(Inode* dir, std::string_view name) {
  const uint64_t ino = dir->dir->Find(name);
  return ino == 0 ? nullptr : Find(ino);
}

void Namespace::LinkChild(Inode* dir, const std::string& name, Inode* child) {
  // Callers unlink a name before they link it again, and names are checked against kNameMax
  // (local requests) or by the record decoder (a shared store) before they get here.
  if (!dir->dir->Link(name, child->rec.id, child->dir != nullptr))
    spdlog::error("namespace: cannot link '{}' in directory {}: taken or too long", name,
                  dir->rec.id);
}

void Namespace::UnlinkChild(Inode* dir, const std::string& name) { dir->dir->Unlink(name); }

void Namespace::DetachEntry(Inode* dir, Inode* in, const std::string& name, Timespec64 now,
                            MetaBatch* batch) {
  RemoveName(in, dir, name);
  in->rec.ctime = now;
  if (in->linked) {
    // Other names remain: the record goes on with them.
    if (in->journaled) batch->puts.push_back(RecordOf(in));
    return;
  }
  if (in->journaled) {
    batch->removes.push_back(in->rec.id);
    batch->remove_revisions.push_back(in->rec.revision);
  }
  // Nothing more is journaled for it: a writer still holding it publishes nowhere.
  in->journaled = false;
  ReleaseUnreachableData(in);
  MaybeDrop(in);  // `in` may be gone from here on
}

void Namespace::ReleaseUnreachableData(Inode* in) {
  // Without a name or an open handle nobody can read the data again: the inode may linger
  // while the kernel still counts lookups, but its extents must not (statvfs right after an
  // unlink counts them free). Open handles hold their own LayoutRef until they close.
  if (!in->linked && in->opens() == 0 && in->rec.id != kRootId) in->rec.layout.reset();
}

void Namespace::MaybeDrop(Inode* in) {
  // A directory that still lists entries lost its name for a while: another node's record of
  // it waits for a name this node's change holds, or a reset is about to give it back. Its
  // entries come back with it; erased and made again from its record, it came back empty and
  // its children were cut off from the tree, on this node only.
  if (in->dir && !in->dir->empty()) return;
  DropGone(in);
}

void Namespace::DropGone(Inode* in) {
  if (in->linked || in->nlookup > 0 || in->opens() > 0 || in->rec.id == kRootId) return;
  EraseInode(in);
}

void Namespace::EraseInode(Inode* in) {
  // Entries left in a directory that goes (an orphan's children) take their names with them:
  // the children keep theirs in their records.
  if (in->dir && !in->dir->empty()) {
    in->dir->ForEachAfter(0, [&](const Directory::Item& item) {
      Inode* child = Find(item.ino);
      if (child && child->name_cookie == item.cookie && child->rec.parent == in->rec.id)
        KeepFirstName(child);
      return true;
    });
  }
  DropKeptName(in);
  resets_behind_writer_.erase(in->rec.id);
  inodes_.Erase(in->rec.id);
}

void Namespace::SetLayout(Inode* in, LayoutRef layout) {
  in->rec.layout = std::move(layout);
  NewVersion(in);
}

void Namespace::NewVersion(Inode* in) {
  if (in->open) {
    in->open->version = ++next_view_;
  } else {
    in->cache_current = false;
  }
}

OpenState& Namespace::Opened(Inode* in) {
  if (!in->open) {
    in->open = std::make_unique<OpenState>();
    in->open->version = ++next_view_;
    if (in->cache_current) in->open->cache_view = in->open->version;
  }
  return *in->open;
}

EntryInfo Namespace::MakeEntry(const Inode* in, const FileHandle* fh) const {
  EntryInfo e;
  const NamelessRecord& r = in->rec;
  struct stat& st = e.attr;
  st.st_ino = r.id;
  st.st_mode = TypeBits(r.type) | (r.mode & 07777);
  st.st_nlink = in->dir ? 2 + in->dir->subdirs() : (in->linked ? r.nlink() : 0);
  st.st_rdev = static_cast<dev_t>(r.rdev());
  st.st_uid = r.uid;
  st.st_gid = r.gid;
  uint64_t size = in->writing() ? in->writing()->size.load() : r.size();
  // An open handle sees its own view: its session's content, or the version it opened.
  const bool own_view = fh && (fh->session ? fh->session != in->writing() : fh->layout != r.layout);
  if (fh) size = fh->session ? fh->session->size.load() : (fh->layout ? fh->layout->size : 0);
  // While readers of the published version own the page cache, a private writer's size is
  // nobody else's business: the kernel would apply it to their i_size. The writer's handle
  // sees its own size whenever the kernel asks with it.
  if (!fh && in->writing() && in->cache_handles() > 0 &&
      in->open->cache_view != in->writing()->view)
    size = in->open->cache_view_size;
  if (in->dir) size = 4096;
  st.st_size = static_cast<off_t>(size);
  st.st_blksize = 1 << 20;  // a hint for buffered copies (cp, Python); O_DIRECT uses f_bsize
  st.st_blocks = static_cast<blkcnt_t>(AllocatedBytes(*store_, r, size) / 512);
  st.st_atim = ToTimespec(r.atime);
  st.st_mtim = ToTimespec(r.mtime);
  st.st_ctim = ToTimespec(r.ctime);
  // Long attribute caching only when every view open on it is the published one: otherwise
  // the kernel's one i_size serves several views and must be asked again each time.
  e.stable = in->journaled && !in->writing() && !own_view &&
             (in->cache_handles() == 0 || in->open->cache_view == in->open->version);
  return e;
}

Status Namespace::ApplyInOrder(uint64_t ticket, const MetaBatch& batch) {
  {
    std::unique_lock lock(apply_mu_);
    apply_cv_.wait(lock, [&] { return serving_ticket_ == ticket; });
  }
  // Only the submission is serialized (it fixes the journal order); the wait for durability is
  // not, so concurrent publishes share one journal write + fdatasync.
  Result<uint64_t> token = store_->Submit(batch);
  {
    std::lock_guard lock(apply_mu_);
    ++serving_ticket_;
  }
  apply_cv_.notify_all();
  Result<Committed> done = token.ok() ? store_->AwaitCommitted(*token) : token.status();
  if (!done.ok()) {
    // A shared store's refusals (a name taken elsewhere, a conflict, etcd unreachable) are
    // answers, not failures of this node; the store logged what it needs to.
    if (std::string note; !shared_ && OpFailureLog().Allow(&note)) {
      spdlog::error("namespace: journal apply failed: {}{}", done.status().ToString(), note);
    }
    if (shared_) {
      // Which change, for the debug log of a node that ends up apart from the others: a
      // refusal for etcd being unreachable is not described by the store (it never built it).
      if (spdlog::should_log(spdlog::level::debug))
        spdlog::debug("namespace: refused ({}):{}", done.status().ToString(), DescribeBatch(batch));
      EndInFlight(batch.seq, /*refused=*/true);
      ForgetRefusedInKernel(batch);
    }
    return done.status();
  }
  if (done->revision != 0 || !done->layouts.empty()) {
    std::lock_guard lock(mu_);
    for (const ObjectRecord& put : batch.puts) {
      Inode* in = Find(put.id);
      if (in && in->rec.revision < done->revision) in->rec.revision = done->revision;
    }
    for (const Committed::NewLayout& l : done->layouts) {
      Inode* in = Find(l.id);
      if (in && in->rec.layout == l.from) in->rec.layout = l.to;
    }
  }
  if (shared_) EndInFlight(batch.seq);
  return Status::Ok();
}

Result<EntryInfo> Namespace::Lookup(uint64_t parent, std::string_view name) {
  counters_.lookups.fetch_add(1, std::memory_order_relaxed);
  if (name.size() > kNameMax) return Status::Error(ENAMETOOLONG, "name too long");
  std::lock_guard lock(mu_);
  KVFS_ASSIGN_OR_RETURN(Inode * dir, FindDir(parent));
  Inode* child = Child(dir, name);
  if (!child) {
    counters_.misses.fetch_add(1, std::memory_order_relaxed);
    NoteMiss(parent, name);
    return Status::NotFound("no such entry");
  }
  counters_.hits.fetch_add(1, std::memory_order_relaxed);
  ++child->nlookup;
  return MakeEntry(child);
}

namespace {

// The kernel looks a name up right before it creates it or renames onto it, in the same system
// call: microseconds apart. A connector's own existence check comes well before its write.
constexpr int64_t kCreateLookupWindowNs = 50'000'000;

int64_t MonotonicNs() {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1'000'000'000 + ts.tv_nsec;
}

}  // namespace

void Namespace::NoteMiss(uint64_t parent, std::string_view name) {
  counters_.cache_misses.fetch_add(1, std::memory_order_relaxed);
  const int64_t now = MonotonicNs();
  std::erase_if(recent_misses_,
                [&](const RecentMiss& m) { return now - m.at_ns > kCreateLookupWindowNs; });
  if (recent_misses_.size() < 4096) recent_misses_.push_back({parent, std::string(name), now});
}

void Namespace::ForgiveMiss(uint64_t parent, std::string_view name) {
  if (recent_misses_.empty()) return;
  const int64_t now = MonotonicNs();
  for (auto it = recent_misses_.begin(); it != recent_misses_.end(); ++it) {
    if (it->parent == parent && it->name == name) {
      if (now - it->at_ns <= kCreateLookupWindowNs)
        counters_.cache_misses.fetch_sub(1, std::memory_order_relaxed);
      recent_misses_.erase(it);
      return;
    }
  }
}

void Namespace::Forget(uint64_t ino, uint64_t n) {
  std::lock_guard lock(mu_);
  Inode* in = Find(ino);
  if (!in) return;
  in->nlookup = n >= in->nlookup ? 0 : in->nlookup - n;
  MaybeDrop(in);
}

Result<EntryInfo> Namespace::GetAttr(uint64_t ino, const FileHandle* fh) {
  std::lock_guard lock(mu_);
  Inode* in = Find(ino);
  if (!in) return Status::NotFound("no such inode");
  if (!fh && ReachedThroughStaleName(in)) return Status::Error(ESTALE, "file was removed");
  return MakeEntry(in, fh && fh->ino == ino ? fh : nullptr);
}

bool Namespace::ReachedThroughStaleName(const Inode* in) const {
  // A file with no name and no open handle is only reachable through a dentry the kernel has
  // not dropped yet (the store evicted it, or a peer removed it, and the invalidation is on
  // its way). ESTALE makes the VFS look the name up again, which then misses: the name goes
  // away at once, as on a local file system. Directories keep answering (a removed cwd).
  return !in->linked && in->opens() == 0 && !in->dir;
}

Result<ObjectRecord> Namespace::Record(uint64_t ino) {
  std::lock_guard lock(mu_);
  Inode* in = Find(ino);
  if (!in) return Status::NotFound("no such inode");
  return RecordOf(in);
}

bool Namespace::Journaled(uint64_t ino) {
  std::lock_guard lock(mu_);
  Inode* in = Find(ino);
  return in && in->journaled;
}

void Namespace::UndoLookup(uint64_t ino) {
  std::lock_guard lock(mu_);
  Inode* in = Find(ino);
  if (!in || in->nlookup == 0) return;
  --in->nlookup;
  MaybeDrop(in);
}

size_t Namespace::inode_count() {
  std::lock_guard lock(mu_);
  return inodes_.size();
}

size_t Namespace::CountInodesWithOpenState() {
  std::lock_guard lock(mu_);
  size_t n = 0;
  inodes_.ForEach([&](Inode* in) { n += in->open != nullptr; });
  return n;
}

Result<std::string> Namespace::Readlink(uint64_t ino) {
  std::lock_guard lock(mu_);
  Inode* in = Find(ino);
  if (!in) return Status::NotFound("no such inode");
  if (in->rec.type != ObjectType::kSymlink) return Status::Invalid("not a symlink");
  TouchAtime(in);  // POSIX: reading a link marks its atime, as a read of a file does
  return in->rec.symlink_target();
}

Status Namespace::Readdir(
    uint64_t ino, uint64_t offset,
    const std::function<bool(const std::string&, uint64_t, uint32_t, uint64_t)>& emit) {
  std::lock_guard lock(mu_);
  KVFS_ASSIGN_OR_RETURN(Inode * dir, FindDir(ino));
  TouchAtime(dir);  // POSIX: readdir marks the directory's atime (at most once a second)
  if (offset < 1 && !emit(".", dir->rec.id, S_IFDIR, 1)) return Status::Ok();
  if (offset < 2 && !emit("..", dir->rec.parent, S_IFDIR, 2)) return Status::Ok();
  std::string name;  // one buffer for the whole reply
  dir->dir->ForEachAfter(std::max<uint64_t>(offset, 2), [&](const Directory::Item& e) {
    const Inode* child = Find(e.ino);
    uint32_t type = child ? TypeBits(child->rec.type) : S_IFREG;
    name.assign(e.name);
    return emit(name, e.ino, type, e.cookie);
  });
  return Status::Ok();
}

void Namespace::TouchAtime(Inode* in) {
  // At most once a second per inode: each change also invalidates the kernel's cached attrs so
  // stat shows it (external evictors sort by atime), and that should not cost every read.
  Timespec64 now = Now();
  if (now.sec - in->rec.atime.sec < 1 && now.sec >= in->rec.atime.sec) return;
  in->rec.atime = now;
  in->lazy_dirty = true;
  if (sink_) sink_->InvalidateInode(in->rec.id, false);
}

Status Namespace::PersistLazy() {
  // In batches of a bounded size: a shared store commits each as one transaction, and
  // transactions have a size limit.
  constexpr size_t kPerBatch = 64;
  std::vector<ObjectRecord> records;
  {
    std::lock_guard lock(mu_);
    inodes_.ForEach([&](Inode* in) {
      if (!in->lazy_dirty) return;
      in->lazy_dirty = false;
      if (in->journaled && in->linked && in->rec.id != kRootId) records.push_back(RecordOf(in));
    });
  }
  if (records.empty()) return Status::Ok();
  spdlog::info("namespace: persisting times of {} objects", records.size());
  Status first;
  for (size_t i = 0; i < records.size(); i += kPerBatch) {
    MetaBatch batch;
    const size_t end = std::min(records.size(), i + kPerBatch);
    batch.puts.assign(std::make_move_iterator(records.begin() + static_cast<ptrdiff_t>(i)),
                      std::make_move_iterator(records.begin() + static_cast<ptrdiff_t>(end)));
    uint64_t ticket;
    {
      std::lock_guard lock(mu_);
      ticket = TakeTicket(batch);
    }
    // Times are not worth a conflict: an object another node changed meanwhile keeps its own.
    Status st = ApplyInOrder(ticket, batch);
    if (!st.ok() && !st.IsConflict() && first.ok()) first = st;
  }
  return first;
}

}  // namespace kvfs::fs
