// Namespace::SetAttr: chmod, chown, utimens and truncate of one object. A size change goes
// to the open write session when there is one, or publishes a new version of a closed file at
// once; every other attribute is journaled (or committed to etcd) as a record change.
#include <sys/stat.h>

#include "namespace.h"

namespace kvfs::fs {

Result<EntryInfo> Namespace::SetAttr(uint64_t ino, const SetAttrRequest& req, FileHandle* fh) {
  return RetryConflicts([&] { return SetAttrOnce(ino, req, fh); });
}

Result<EntryInfo> Namespace::SetAttrOnce(uint64_t ino, const SetAttrRequest& req, FileHandle* fh) {
  if (fh && fh->ino != ino) fh = nullptr;
  // One time for every time this change moves (ext4's are equal after a truncate too).
  const Timespec64 now = Now();
  // A size change goes to the open writer when there is one; on a closed file it publishes a
  // new version at once (a truncate has no close to wait for).
  std::shared_ptr<WriteSession> session;
  LayoutRef base;
  bool after_close = false;  // a truncate by path of a session whose writers closed
  bool same_size = false;    // a truncate of a closed file to the size it has
  if (req.size) {
    std::lock_guard lock(mu_);
    Inode* in = Find(ino);
    if (!in) return Status::NotFound("no such inode");
    if (in->dir) return Status::Error(EISDIR, "is a directory");
    if (in->rec.type != ObjectType::kFile) return Status::Invalid("not a regular file");
    session = (fh && fh->session) ? fh->session : in->writing();
    base = in->rec.layout;
    same_size = !session && (base ? base->size : 0) == *req.size;
  }
  if (req.size && session) {
    std::lock_guard wl(session->mu);
    // The writers closed (their RELEASE, sent after close(2) returned, is on its way) and left
    // nothing private: the truncate is published at once, as on a closed file. It went into
    // the session unseen until that RELEASE (`close; truncate; read` read the old bytes).
    after_close = !(fh && fh->session == session) && session->closed && !session->dirty;
    KVFS_RETURN_IF_ERROR(session->writer->Truncate(*req.size));
    session->size = session->writer->size();
    session->dirty = true;
    session->closed = after_close;  // published below: still nothing private
    {
      std::lock_guard lock(mu_);  // under the session's lock, as Write sets it
      if (Inode* in = Find(ino)) in->rec.mtime = now;
    }
    if (after_close) KVFS_RETURN_IF_ERROR(PublishLocked(*session, ino));
  } else if (req.size && !same_size) {
    KVFS_ASSIGN_OR_RETURN(auto writer, store_->NewWriter(base));
    KVFS_RETURN_IF_ERROR(writer->Truncate(*req.size));
    KVFS_ASSIGN_OR_RETURN(LayoutRef layout, writer->Finish());
    MetaBatch batch;
    uint64_t ticket;
    bool journal = false;
    {
      std::lock_guard lock(mu_);
      Inode* in = Find(ino);
      if (!in) return Status::NotFound("no such inode");
      SetLayout(in, layout);
      in->rec.mtime = in->rec.ctime = now;
      if (in->linked) {
        NameLedger names;
        NoteNames(names, in);
        in->journaled = true;
        batch.puts.push_back(RecordOf(in));
        FinishNames(names, &batch);
        ticket = TakeTicket(batch);
        journal = true;
      }
    }
    if (journal) KVFS_RETURN_IF_ERROR(ApplyInOrder(ticket, batch));
    if (sink_) sink_->InvalidateInode(ino, true);
  }

  MetaBatch batch;
  uint64_t ticket = 0;
  EntryInfo entry;
  {
    std::lock_guard lock(mu_);
    Inode* in = Find(ino);
    if (!in) return Status::NotFound("no such inode");
    bool changed = false;
    if (req.mode) {
      in->rec.mode = *req.mode & 07777, changed = true;
      // This node's chmod after a write's drop decides (Namespace::Write).
      if (const auto& writing = in->writing()) writing->setid_dropped = 0;
    }
    if (req.uid) in->rec.uid = *req.uid, changed = true;
    if (req.gid) in->rec.gid = *req.gid, changed = true;
    if (req.atime != SetAttrRequest::Time::kKeep) {
      in->rec.atime = req.atime == SetAttrRequest::Time::kNow ? now : req.atime_value;
      changed = true;
    }
    if (req.mtime != SetAttrRequest::Time::kKeep) {
      in->rec.mtime = req.mtime == SetAttrRequest::Time::kNow ? now : req.mtime_value;
      changed = true;
    }
    // The kernel sends an O_TRUNC open's truncate (no atomic O_TRUNC) as a size alone, like
    // truncate(2)'s: one that changes no size still moves mtime, as open(2) requires of
    // O_TRUNC and as ext4 does for both (`: > empty` and `touch` agree).
    if (same_size) in->rec.mtime = now, changed = true;
    if (req.touch) changed = true;
    if (req.size) {
      if (uint32_t drop = SetIdBitsDropped(in->rec.mode, in->rec.gid, req.who)) {
        in->rec.mode &= ~drop;
        changed = true;
      }
    }
    if (changed || req.size) in->rec.ctime = now;
    if (changed && in->journaled && in->rec.id != kRootId) {
      batch.puts.push_back(RecordOf(in));
      in->lazy_dirty = false;
      ticket = TakeTicket(batch);
    }
    entry = MakeEntry(in);
    // A truncate of a private writer's view while readers of a published version own the page
    // cache (O_TRUNC comes here without a handle): the kernel sets i_size from this reply and
    // cuts its cached pages to it, so the reply carries the owner's size and their pages stay
    // intact. The writer's own fstat gets that size too while they own it (this kernel sends
    // fstat's getattr without a handle; docs/fs.md, "Sizes while writing").
    if (req.size && session && !after_close && in->cache_handles() > 0 &&
        in->open->cache_view != session->view) {
      entry.attr.st_size = static_cast<off_t>(in->open->cache_view_size);
      entry.stable = false;
    }
  }
  if (!batch.puts.empty()) KVFS_RETURN_IF_ERROR(ApplyInOrder(ticket, batch));
  return entry;
}

}  // namespace kvfs::fs
