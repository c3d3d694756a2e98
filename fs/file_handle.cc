// The open-file half of Namespace: create/open, the data path, and publish at close.
//
// A file open for writing has one WriteSession (a ChunkWriter) shared by all its writable
// handles; a read-only handle pins the LayoutRef that was published when it opened, so it keeps
// reading that version whatever happens to the name. Flush (every close(2)) publishes the session
// if it changed; Release publishes what mmap writeback may have added after the last close.
#include <fcntl.h>
#include <linux/falloc.h>
#include <spdlog/spdlog.h>

#include <cstring>
#include <memory>

#include "namespace.h"
#include "op_failure_log.h"

namespace kvfs::fs {

namespace {

int64_t MonotonicSeconds() {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + 1;  // never 0, which means "never rewritten"
}

// A writer opened the published file in place within the last kRewriteQuietSeconds.
bool RewrittenLately(const Inode* in) {
  return in->open && in->open->rewritten_at != 0 &&
         MonotonicSeconds() - in->open->rewritten_at < kRewriteQuietSeconds;
}

// What a reader is asked to fetch at open: the kernel's first readahead window (about 2 MiB
// with the read_ahead_kb of docs/operations.md), two engine segments, one peer piece.
constexpr size_t kOpenPrefetchBytes = 2u << 20;

}  // namespace

void Namespace::ChooseCacheMode(Inode* in, FileHandle* fh, uint64_t view) {
  // Another view owns the kernel's page cache and i_size: this handle goes around them, so
  // neither a reader of an old version nor a private writer can show its bytes or its size
  // to the other (a short read of an old version would shrink the kernel's i_size under an
  // appending writer; a writer's pages would be read by readers of the published version).
  OpenState& open = Opened(in);
  if (open.cache_handles > 0 && open.cache_view != view) {
    fh->direct_io = true;
    return;
  }
  // A reader of a file that is being rewritten in place again and again: the kernel's one
  // i_size would follow the next writer's writes under this reader (FUSE cannot give the two
  // views two sizes), so it reads around the cache until rewrites have been quiet for a while.
  if (!fh->session && RewrittenLately(in)) {
    fh->direct_io = true;
    return;
  }
  // Cached pages are trusted only when they are known to hold this very view; otherwise the
  // open drops them (keep_cache off), synchronously, before any read.
  fh->keep_cache = open.cache_view == view && !fh->session && in->journaled;
  fh->page_cache = true;
  fh->view = view;
  open.cache_view = view;
  if (!fh->session) open.cache_view_size = fh->layout ? fh->layout->size : 0;
  ++open.cache_handles;
}

void Namespace::CloseHandleOf(Inode* in, const FileHandle& fh) {
  if (fh.session && fh.session->handles > 0) --fh.session->handles;
  if (!in->open) return;
  OpenState& open = *in->open;
  if (open.opens > 0) --open.opens;
  if (fh.page_cache && open.cache_handles > 0) --open.cache_handles;
  // The session's last handle: the next writer starts a new one.
  if (fh.session && fh.session->handles == 0 && open.writing == fh.session) {
    open.writing.reset();
    store_->SetWriting(in->rec.id, false);
  }
  if (open.opens == 0 && open.cache_handles == 0 && !open.writing && !RewrittenLately(in)) {
    in->cache_current = open.cache_view == open.version;
    in->open.reset();
  }
}

Result<std::pair<EntryInfo, FileHandle*>> Namespace::Create(uint64_t parent, std::string_view name,
                                                            uint32_t mode, int flags, uint32_t uid,
                                                            uint32_t gid) {
  uint64_t existing = 0;
  FileHandle* created = nullptr;  // O_EXCL on a shared namespace, committed below
  MetaBatch batch;
  uint64_t ticket = 0;
  {
    std::lock_guard lock(mu_);
    KVFS_RETURN_IF_ERROR(CheckName(name));
    KVFS_ASSIGN_OR_RETURN(Inode * dir, FindDir(parent));
    if (Inode* found = Child(dir, name)) {
      // Another creator won the race since the kernel's lookup.
      if (flags & O_EXCL) return Status::Error(EEXIST, "file exists");
      if (found->dir) return Status::Error(EISDIR, "is a directory");
      existing = found->rec.id;
      ++found->nlookup;
    } else {
      KVFS_ASSIGN_OR_RETURN(auto writer, store_->NewWriter(nullptr));
      KVFS_ASSIGN_OR_RETURN(Inode * in, NewChild(parent, name, ObjectType::kFile, mode, uid, gid));
      auto session = std::make_shared<WriteSession>();
      session->writer = std::move(writer);
      session->dirty = true;  // even an empty new file is published at its first close
      session->handles = 1;
      session->view = ++next_view_;
      OpenState& open = Opened(in);
      open.writing = session;
      store_->SetWriting(in->rec.id, true);
      open.opens = 1;
      ++in->nlookup;
      auto* fh = new FileHandle;
      fh->ino = in->rec.id;
      fh->can_write = true;
      fh->session = std::move(session);
      fh->append = (flags & O_APPEND) != 0;
      fh->direct_io = (flags & O_DIRECT) != 0 || fh->append;
      if (!fh->direct_io) ChooseCacheMode(in, fh, fh->session->view);
      if (!(shared_ && (flags & O_EXCL))) return std::make_pair(MakeEntry(in), fh);
      // O_EXCL across nodes: the name is taken in the shared namespace (an empty record)
      // before open returns, so that one creator of all the nodes succeeds.
      NameLedger names;
      NoteNames(names, in);
      in->journaled = true;
      batch.puts.push_back(RecordOf(in));
      FinishNames(names, &batch);
      batch.exclusive = true;
      ticket = TakeTicket(batch);
      created = fh;
    }
  }
  if (created) {
    Status st = ApplyInOrder(ticket, batch);
    std::lock_guard lock(mu_);
    Inode* in = Find(created->ino);
    if (st.ok() && in) return std::make_pair(MakeEntry(in), created);
    // Another node has the name (the store gave it back to its holder): nothing was opened.
    std::unique_ptr<FileHandle> owned(created);
    if (in) {
      if (in->nlookup > 0) --in->nlookup;
      CloseHandleOf(in, *created);
      if (in->linked) {
        // The store kept it out of the shared namespace but it is still in the tree here.
        Inode* dir = Find(in->rec.parent);
        if (dir && dir->dir) RemoveName(in, dir, std::string(FirstName(in)));
        in->journaled = false;
      }
      MaybeDrop(in);
    }
    return st.ok() ? Status::NotFound("file vanished") : st;
  }
  auto fh = Open(existing, flags);
  std::lock_guard lock(mu_);
  Inode* in = Find(existing);
  if (!fh.ok() || !in) {
    if (in) {
      --in->nlookup;
      MaybeDrop(in);
    }
    return fh.ok() ? Status::NotFound("file vanished") : fh.status();
  }
  return std::make_pair(MakeEntry(in), *fh);
}

Result<FileHandle*> Namespace::Open(uint64_t ino, int flags) {
  std::shared_ptr<WriteSession> truncate_session;
  FileHandle* fh = nullptr;
  {
    std::unique_lock lock(mu_);
    int acc = flags & O_ACCMODE;
    if (acc == O_RDONLY && !(flags & (O_TRUNC | O_DIRECT))) {
      // A writer closed a moment ago and its RELEASE, which the kernel sends after close(2)
      // returns, is on its way: its session still counts as a writer, and this reader would go
      // around the page cache (direct_io), where a MAP_SHARED mapping fails with ENODEV
      // (`write; close; mmap` failed so 2-8 times in 2,000 here). Its session ends in a moment:
      // wait for that, within kReleaseWait (a descriptor dup'd before the close, or a mapping,
      // keeps the session longer: then the reader goes around the cache as before).
      sessions_cv_.wait_for(lock, kReleaseWait, [&] {
        const Inode* in = Find(ino);
        return !in || !in->writing() || !in->writing()->closed;
      });
    }
    Inode* in = Find(ino);
    if (!in) return Status::NotFound("no such inode");
    if (in->dir) return Status::Error(EISDIR, "is a directory");
    if (in->rec.type != ObjectType::kFile) return Status::Error(ELOOP, "not a regular file");
    if (!in->linked) return Status::Error(ESTALE, "file was removed");  // see GetAttr
    auto handle = std::make_unique<FileHandle>();
    handle->ino = ino;
    if (acc == O_RDONLY && !(flags & O_TRUNC)) {
      handle->layout = in->rec.layout;
      if (handle->layout) {
        KVFS_ASSIGN_OR_RETURN(handle->reader, store_->NewReader(handle->layout));
      }
      // While a writer is active the page cache may hold its unpublished pages: a reader of
      // the published version bypasses it.
      handle->direct_io = (flags & O_DIRECT) || in->writing();
      if (!handle->direct_io) ChooseCacheMode(in, handle.get(), Opened(in).version);
      if (in->journaled) counters_.read_hits.fetch_add(1, std::memory_order_relaxed);
      handle->noatime = (flags & O_NOATIME) != 0;
      if (!handle->noatime) TouchAtime(in);
    } else {
      std::shared_ptr<WriteSession> session = in->writing();
      if (!session) {
        LayoutRef base = (flags & O_TRUNC) ? nullptr : in->rec.layout;
        KVFS_ASSIGN_OR_RETURN(auto writer, store_->NewWriter(base));
        session = std::make_shared<WriteSession>();
        session->size = writer->size();
        session->writer = std::move(writer);
        session->dirty = ((flags & O_TRUNC) && in->rec.size() > 0) || !in->journaled;
        session->view = ++next_view_;
        OpenState& open = Opened(in);
        open.writing = session;
        store_->SetWriting(in->rec.id, true);
        if (in->journaled && in->rec.layout) open.rewritten_at = MonotonicSeconds();
      } else if (flags & O_TRUNC) {
        truncate_session = session;
      }
      session->closed = false;  // an open writer again (an O_TRUNC open's setattr follows)
      ++session->handles;
      handle->session = std::move(session);
      handle->can_write = acc != O_RDONLY;
      handle->append = (flags & O_APPEND) != 0;
      // O_APPEND goes around the page cache: the daemon places each append at the end of the
      // session (Write), and the kernel's idea of the end must not matter.
      handle->direct_io = (flags & O_DIRECT) != 0 || handle->append;
      if (!handle->direct_io) ChooseCacheMode(in, handle.get(), handle->session->view);
    }
    ++Opened(in).opens;
    fh = handle.release();
  }
  if (truncate_session) {
    Status st;
    {
      std::lock_guard wl(truncate_session->mu);
      st = truncate_session->writer->Truncate(0);
      truncate_session->size = truncate_session->writer->size();
      truncate_session->dirty = true;
    }
    if (!st.ok()) {
      (void)Release(fh);
      return st;
    }
  }
  // A reader whose pages the kernel does not have (an open without keep_cache drops them,
  // O_DIRECT goes around them) will READ from the start: the store begins now, while the
  // open's reply and the application's first read(2) are on their way. With keep_cache the
  // pages are likely cached, and a fetch would be device or network traffic for nothing.
  if (fh->reader && (fh->direct_io || !fh->keep_cache)) fh->reader->Prefetch(0, kOpenPrefetchBytes);
  return fh;
}

Result<size_t> Namespace::Read(FileHandle* fh, uint64_t offset, void* out, size_t len) {
  KVFS_ASSIGN_OR_RETURN(ReadView view, ReadSpans(fh, offset, len));
  auto* dst = static_cast<uint8_t*>(out);
  for (const iovec& span : view.spans) {
    std::memcpy(dst, span.iov_base, span.iov_len);
    dst += span.iov_len;
  }
  return view.size;
}

void Namespace::NoteRead(FileHandle* fh) {
  if (fh->noatime) return;
  // atime moves at most once a second per inode (TouchAtime); a handle checks that second
  // first without the namespace lock, so a stream of reads takes it about once a second.
  const int64_t second = Now().sec;
  if (fh->atime_second.exchange(second, std::memory_order_relaxed) == second) return;
  std::lock_guard lock(mu_);
  if (Inode* in = Find(fh->ino)) TouchAtime(in);
}

Result<ReadView> Namespace::ReadSpans(FileHandle* fh, uint64_t offset, size_t len) {
  ReadView view;
  if (fh->session) {
    // A writer's own view (its base version plus its writes) lives in the writer's staging:
    // copied out into a buffer of this reply's own.
    auto buf = std::make_shared_for_overwrite<uint8_t[]>(len);
    std::lock_guard wl(fh->session->mu);
    KVFS_ASSIGN_OR_RETURN(view.size, fh->session->writer->Read(offset, buf.get(), len));
    if (view.size > 0) view.spans.push_back({buf.get(), view.size});
    view.holds.push_back(std::move(buf));
  } else if (fh->reader) {
    // Published data: the store's reader owns every error (a corrupt chunk is dropped and
    // counted there; another replica is tried there); what it says is final.
    KVFS_ASSIGN_OR_RETURN(view, fh->reader->Read(offset, len));
  }
  NoteRead(fh);
  return view;
}

uint32_t Namespace::SetIdBitsDropped(uint32_t mode, uint32_t gid, const Caller& who) {
  if (who.uid == 0 || !(mode & (S_ISUID | S_ISGID))) return 0;
  uint32_t drop = mode & S_ISUID;
  // Without S_IXGRP, S_ISGID stays for a member of the file's group (VFS
  // setattr_should_drop_sgid).
  if ((mode & S_ISGID) &&
      ((mode & S_IXGRP) || (who.gid != gid && !(who.in_group && who.in_group(gid))))) {
    drop |= S_ISGID;
  }
  return drop;
}

Status Namespace::Write(FileHandle* fh, uint64_t offset, const void* data, size_t len,
                        const Caller& who) {
  if (!fh->can_write || !fh->session) return Status::Error(EBADF, "not open for writing");
  std::lock_guard wl(fh->session->mu);
  if (fh->append) offset = fh->session->writer->size();
  KVFS_RETURN_IF_ERROR(fh->session->writer->Write(offset, data, len));
  fh->session->size = fh->session->writer->size();
  fh->session->dirty = true;
  fh->session->closed = false;
  // Still under the session's lock: a flush of another handle of the session (which publishes
  // holding it) either sees these bytes and this time, or neither. Set after the lock, the
  // time could miss the publish that took the bytes, and the tree kept a time the journal (or
  // etcd) never had: the session was clean, so no publish followed.
  uint32_t mode = 0, gid = 0;
  {
    std::lock_guard lock(mu_);
    Inode* in = Find(fh->ino);
    if (!in) return Status::Ok();
    in->rec.mtime = in->rec.ctime = Now();
    mode = in->rec.mode;
    gid = in->rec.gid;
  }
  // Outside the namespace lock: the decision may read the caller's groups from /proc.
  const uint32_t drop = SetIdBitsDropped(mode, gid, who);
  if (drop == 0) return Status::Ok();
  fh->session->setid_dropped.fetch_or(drop);
  {
    std::lock_guard lock(mu_);
    Inode* in = Find(fh->ino);
    if (!in) return Status::Ok();
    in->rec.mode &= ~drop;  // published with the data: the session is dirty
  }
  if (sink_) sink_->InvalidateInode(fh->ino, false);  // the kernel's cached mode is stale
  return Status::Ok();
}

Status Namespace::Fallocate(FileHandle* fh, int mode, uint64_t offset, uint64_t len) {
  if (mode != 0) return Status::Error(EOPNOTSUPP, "only fallocate mode 0 is supported");
  if (!fh->can_write || !fh->session) return Status::Error(EBADF, "not open for writing");
  std::lock_guard wl(fh->session->mu);
  if (offset + len > fh->session->writer->size()) {
    KVFS_RETURN_IF_ERROR(fh->session->writer->Truncate(offset + len));
    fh->session->size = offset + len;
  }
  // Times move as for a write (ext4 moves them for any fallocate, inside the size too); dirty
  // so that the publish carries them.
  fh->session->dirty = true;
  fh->session->closed = false;
  std::lock_guard lock(mu_);  // under the session's lock, as Write sets them
  if (Inode* in = Find(fh->ino)) in->rec.mtime = in->rec.ctime = Now();
  return Status::Ok();
}

Status Namespace::PublishLocked(WriteSession& s, uint64_t ino) {
  if (!s.dirty) return Status::Ok();
  KVFS_ASSIGN_OR_RETURN(LayoutRef layout, s.writer->Finish());
  s.dirty = false;
  // A shared namespace may refuse the publish because another node changed the record
  // meanwhile (its attributes, its name): the tree then holds that change, and the new version
  // goes on top of it (last writer wins, as for two local writers).
  Status st;
  std::vector<kvfs::Link> first_names;  // its names when the first attempt was built
  for (int attempt = 1;; ++attempt) {
    MetaBatch batch;
    uint64_t ticket;
    {
      std::lock_guard lock(mu_);
      Inode* in = Find(ino);
      if (!in) return Status::Ok();
      // Refused up front (a cluster node cut off from etcd): the new version is not shown,
      // not even until etcd is back. The batch still goes to the store, which only notes what
      // it touches for a reset (the times the writes moved, a name etcd never had).
      batch.refused_up_front = in->linked && !store_->CheckWritable().ok();
      if (!batch.refused_up_front) SetLayout(in, layout);
      // No time moves here: the writes, truncates and fallocates moved mtime and ctime as they
      // came, and close(2) moves neither (on ext4 neither does; ctime moved at every publish
      // before, so after `write; close` it was later than mtime).
      in->rec.mode &= ~s.setid_dropped.load();
      // An unlinked file publishes nowhere: its holders keep their own view until they close
      // (also when another node's unlink, or rename over it, came first).
      if (!in->linked) {
        // But a directory that another node put under its name first holds it for good (a
        // file cannot displace it): this version is lost, and its writer hears so. Locally,
        // creating a file where a directory is fails with EISDIR.
        if (HeldByDirectoryLocked(first_names))
          return Status::Error(EISDIR, "another node put a directory under the file's name");
        return Status::Ok();
      }
      if (attempt == 1) first_names = NamesOf(in);
      NameLedger names;
      NoteNames(names, in);
      // Its last change was refused and no commit of it reached this node: etcd may hold none
      // of its names, so this publish gives them (one etcd holds after all fails the compare,
      // and a reset follows). Trusting them instead, a publish built after the refusal of the
      // file's first one and sent after the reset of that committed the record without its
      // name key (every etcd restart under load left some; nodes then disagreed on them).
      if (!names.empty() && in->rec.revision == 0 && LastChangeRefusedLocked(in->rec.id))
        names.front().second.clear();
      in->journaled = true;
      in->lazy_dirty = false;
      batch.puts.push_back(RecordOf(in));
      FinishNames(names, &batch);
      ticket = TakeTicket(batch);
    }
    st = ApplyInOrder(ticket, batch);
    if (!st.IsConflict() || attempt == kConflictAttempts) break;
    BeforeRetry(attempt);
  }
  // Pages cached from the previous version are stale now (O_DIRECT writes never touched them).
  if (sink_) sink_->InvalidateInode(ino, true);
  return st;
}

bool Namespace::HeldByDirectoryLocked(const std::vector<kvfs::Link>& names) {
  for (const kvfs::Link& l : names) {
    Inode* dir = Find(l.parent);
    Inode* holder = dir && dir->dir ? Child(dir, l.name) : nullptr;
    if (holder && holder->dir) return true;
  }
  return false;
}

Status Namespace::Flush(FileHandle* fh) {
  if (!fh->session) return Status::Ok();
  std::lock_guard wl(fh->session->mu);
  Status st = PublishLocked(*fh->session, fh->ino);
  // Nothing private is left and no open came since: until another handle opens or writes, a
  // truncate by path is a truncate of the closed file (SetAttrOnce).
  if (st.ok()) fh->session->closed = true;
  return st;
}

Status Namespace::Release(FileHandle* fh) {
  std::unique_ptr<FileHandle> owned(fh);
  Status st;
  if (fh->session) {
    // Only the session's last handle publishes here (what mmap writeback added after the last
    // close). While another handle is open it publishes at its own close: a late RELEASE of
    // an earlier writer must not publish the state a newer writer of the same session has
    // just truncated. Holding the session's lock, no joiner can change it meanwhile.
    std::lock_guard wl(fh->session->mu);
    bool last;
    {
      std::lock_guard lock(mu_);
      last = fh->session->handles <= 1;
    }
    if (last) st = PublishLocked(*fh->session, fh->ino);
    if (std::string note; !st.ok() && OpFailureLog().Allow(&note)) {
      spdlog::warn("publish at release of inode {} failed: {}{}", fh->ino, st.ToString(), note);
    }
  }
  std::optional<ResetOrigin> reset;
  {
    std::lock_guard lock(mu_);
    Inode* in = Find(fh->ino);
    if (!in) return st;
    CloseHandleOf(in, *fh);
    if (fh->session && fh->session->handles == 0) sessions_cv_.notify_all();
    reset = ResetAfterWriterLocked(in);
    ReleaseUnreachableData(in);
    MaybeDrop(in);
  }
  if (reset) RestoreStoreRecord(fh->ino, nullptr, *reset);
  return st;
}

std::optional<ResetOrigin> Namespace::ResetAfterWriterLocked(const Inode* in) {
  if (in->writing()) return std::nullopt;
  auto it = resets_behind_writer_.find(in->rec.id);
  if (it == resets_behind_writer_.end()) return std::nullopt;
  const ResetOrigin origin = it->second;
  resets_behind_writer_.erase(it);
  // The writer published: that change commits (and etcd holds the object) or is refused and
  // gets its own reset. Either way newer than this one.
  auto last = last_change_.find(in->rec.id);
  if (in->rec.revision != 0 || (last != last_change_.end() && last->second.seq > origin.seq))
    return std::nullopt;
  return origin;
}

}  // namespace kvfs::fs
