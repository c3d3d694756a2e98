// LocalEngineImpl's write side: Apply/Submit (validate, update the index, queue a journal
// record), the group-commit thread that makes queued records durable (and rolls the index back
// when a journal write fails), checkpoints and Sync, and the bounded cache's journaled
// removals (eviction, Reclaim, Touch, Evict). Split out of local_engine.cc to keep each file to
// one job.
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <unordered_map>

#include "checkpoint.h"
#include "local_engine_impl.h"
#include "policy_state.h"
#include "record_codec.h"
#include "segment_codec.h"

namespace kvfs {

Status LocalEngineImpl::Validate(const MetaBatch& batch) const {
  const uint32_t seg = options_.segment_size;
  for (const ObjectRecord& rec : batch.puts) {
    if (rec.id == kInvalidId || rec.id == kRootId) {
      return Status::Invalid("cannot put object id " + std::to_string(rec.id));
    }
    const auto type = static_cast<uint8_t>(rec.type);
    if (type < 1 || type > kMaxObjectType) return Status::Invalid("unknown object type");
    if (rec.name.size() > 4096 || rec.symlink_target().size() > 4096) {
      return Status::Invalid("name or symlink target too long");
    }
    if (rec.extra_links.size() >= kMaxLinks) return Status::Invalid("too many links");
    if (!rec.extra_links.empty() && rec.type == ObjectType::kDirectory) {
      return Status::Invalid("a directory cannot have hard links");
    }
    for (const Link& l : rec.extra_links) {
      if (l.name.size() > 4096) return Status::Invalid("link name too long");
    }
    // What the decoder would refuse at the next start must not reach the journal.
    if (!ValidXattrs(rec.xattrs())) return Status::Invalid("malformed xattrs");
    if (!rec.layout) continue;
    if (rec.type != ObjectType::kFile) return Status::Invalid("only files have a layout");
    if (!ctx_->space().Owns(rec.layout)) {
      return Status::Invalid("layout of object " + std::to_string(rec.id) +
                             " was not made by this engine");
    }
    KVFS_RETURN_IF_ERROR(CheckLayoutShape(*rec.layout, seg));
  }
  for (ObjectId id : batch.removes) {
    if (id == kInvalidId || id == kRootId) return Status::Invalid("cannot remove the root");
  }
  return Status::Ok();
}

uint64_t LocalEngineImpl::Enqueue(std::string encoded, std::vector<LayoutRef> dropped,
                                  IndexUndo undo) {
  const uint64_t seq = ++last_seq_;
  queue_.push_back({seq, std::move(encoded), std::move(dropped), std::move(undo)});
  return seq;
}

Status LocalEngineImpl::Apply(const MetaBatch& batch) {
  KVFS_ASSIGN_OR_RETURN(uint64_t seq, Submit(batch));
  return AwaitDurable(seq);
}

Status LocalEngineImpl::AwaitDurable(uint64_t seq) {
  if (options_.durability != Durability::kClose) return Status::Ok();
  std::unique_lock lock(mu_);
  if (WaitDurable(lock, seq)) return Status::Ok();
  return ReadOnlyError();
}

bool LocalEngineImpl::Undone(uint64_t seq) const {
  for (const auto& [after, last] : undone_) {
    if (seq > after && seq <= last) return true;
  }
  return false;
}

bool LocalEngineImpl::WaitDurable(std::unique_lock<std::mutex>& lock, uint64_t seq) {
  // Undone first: once the store resumed, durable_seq_ passes the seqs a failure undid.
  done_cv_.wait(lock, [&] { return Undone(seq) || durable_seq_ >= seq; });
  return !Undone(seq);
}

bool LocalEngineImpl::NoSpace(const Status& st) { return st.err() == ENOSPC || st.err() == EDQUOT; }

Status LocalEngineImpl::ReadOnlyError() const {
  const Status& why = commit_error_.ok() ? last_failure_ : commit_error_;
  return Status::Error(EROFS, "kvfs store is read-only: a journal write failed (" + why.message() +
                                  "); changes since the last durable commit were undone; " +
                                  (NoSpace(why) ? "writable again by itself once the file "
                                                  "system holding the data directory has room"
                                                : "restart to recover"));
}

Result<uint64_t> LocalEngineImpl::Submit(const MetaBatch& batch) {
  KVFS_RETURN_IF_ERROR(Validate(batch));
  std::string encoded;
  Journal::EncodeRecord(RecordType::kBatch, RecordCodec::EncodeBatch(batch), &encoded);
  if (encoded.size() > Journal::kMaxRecord) return Status::Invalid("batch too large");
  uint64_t published = 0, max_id = 0;
  for (const ObjectRecord& rec : batch.puts) {
    if (rec.layout) ++published;
    max_id = std::max(max_id, rec.id);
  }
  // Ids the caller made up itself must not be handed out later either.
  uint64_t cur = next_id_.load();
  while (cur <= max_id && !next_id_.compare_exchange_weak(cur, max_id + 1)) {
  }
  std::unique_lock lock(mu_);
  if (!commit_error_.ok()) return ReadOnlyError();
  if (stop_) return Status::Error(ESHUTDOWN, "engine is closing");
  std::vector<LayoutRef> dropped;
  IndexUndo undo = IndexUndo::Capture(index_, batch);
  index_.Apply(batch, &dropped);
  eviction_->OnApply(batch);
  const uint64_t seq = Enqueue(std::move(encoded), std::move(dropped), std::move(undo));
  ctx_->counters().writes.fetch_add(published);
  std::vector<ObjectId> victims;
  if (published > 0) {
    // Never the versions this batch publishes: their writer's session is still open (the fs
    // publishes at close, before the release), and an eviction never takes a name from under
    // its writer, so the name would stay while the engine forgot the file, its space held and
    // never evictable again: one file over the high watermark left every later write ENOSPC.
    // A version over the watermark goes at the next publish or the next writer's reclaim.
    std::vector<ObjectId> publishing;
    for (const ObjectRecord& rec : batch.puts)
      if (rec.layout) publishing.push_back(rec.id);
    victims = eviction_->OverWatermark(ctx_->space().used_bytes(), ctx_->space().capacity_bytes(),
                                       publishing);
    if (!victims.empty()) RemoveEvicted(victims);
  }
  work_cv_.notify_one();
  lock.unlock();
  NotifyEvicted(victims);
  return seq;
}

uint64_t LocalEngineImpl::RemoveEvicted(const std::vector<ObjectId>& victims) {
  MetaBatch batch;
  batch.removes = victims;
  std::string encoded;
  Journal::EncodeRecord(RecordType::kBatch, RecordCodec::EncodeBatch(batch), &encoded);
  std::vector<LayoutRef> dropped;
  IndexUndo undo = IndexUndo::Capture(index_, batch);
  index_.Apply(batch, &dropped);
  ctx_->counters().evictions.fetch_add(victims.size());
  return Enqueue(std::move(encoded), std::move(dropped), std::move(undo));
}

void LocalEngineImpl::NotifyEvicted(const std::vector<ObjectId>& victims) {
  if (victims.empty()) return;
  spdlog::debug("engine: evicted {} files", victims.size());
  if (StoreListener* l = listener_.load()) {
    for (ObjectId id : victims) l->OnEvicted(id);
  }
}

uint64_t LocalEngineImpl::FreeBytesOf(const std::vector<PendingCommit>& commits) const {
  // A dropped layout frees on commit when every reference to it is the queue's own (the
  // dropped list and undo images); an open reader or writer holds one more.
  std::unordered_map<const Layout*, std::pair<LayoutRef, long>> held;
  for (const PendingCommit& p : commits) {
    for (const LayoutRef& layout : p.dropped) {
      if (layout) ++held.try_emplace(layout.get(), layout, 0).first->second.second;
    }
  }
  if (held.empty()) return 0;
  for (const PendingCommit& p : commits) {
    p.undo.ForEachLayout([&](const LayoutRef& layout) {
      if (auto it = held.find(layout.get()); it != held.end()) ++it->second.second;
    });
  }
  uint64_t bytes = 0;
  for (const auto& [raw, ref] : held) {
    // +1: the copy in `held` itself.
    if (ref.first.use_count() == ref.second + 1) bytes += ctx_->space().ExclusiveBytes(*raw);
  }
  return bytes;
}

bool LocalEngineImpl::Reclaim(uint64_t needed, bool may_evict) {
  std::vector<ObjectId> victims;
  {
    std::unique_lock lock(mu_);
    if (stop_ || !commit_error_.ok()) return false;
    if (QueuedFreeBytes() > 0) {
      // Unlinks and replaced versions waiting for their commit (durability=async) free room
      // without evicting anything: commit them now and let the writer try again.
      const uint64_t seq = last_seq_;
      flush_requested_ = true;
      work_cv_.notify_one();
      return WaitDurable(lock, seq);
    }
    if (!may_evict) return false;
    const uint64_t used = ctx_->space().used_bytes();
    const uint64_t capacity = ctx_->space().capacity_bytes();
    const uint64_t free_now = capacity > used ? capacity - used : 0;
    if (free_now + eviction_->ReclaimableBytes() < needed) {
      // Pinned files, open readers of evicted files and unpublished writers hold the rest:
      // evicting would destroy cached data and still not make room.
      spdlog::warn(
          "engine: a writer needs {} bytes; {} are free and at most {} could be evicted: "
          "nothing evicted, ENOSPC",
          needed, free_now, eviction_->ReclaimableBytes());
      return false;
    }
    victims = eviction_->ReclaimVictims(used, capacity, needed > free_now ? needed - free_now : 0);
    if (victims.empty()) return false;  // everything left is pinned
    const uint64_t seq = RemoveEvicted(victims);
    // The victim's extents are reusable only once the record that freed them is durable.
    flush_requested_ = true;
    work_cv_.notify_one();
    if (!WaitDurable(lock, seq)) return false;  // undone: the victims are back
  }
  NotifyEvicted(victims);
  return true;
}

void LocalEngineImpl::Touch(ObjectId id, uint64_t stream) {
  const auto now = std::chrono::duration_cast<std::chrono::milliseconds>(
      std::chrono::system_clock::now().time_since_epoch());
  std::lock_guard lock(mu_);
  eviction_->Touch(id, stream, static_cast<uint64_t>(now.count()));
}

void LocalEngineImpl::SetWriting(ObjectId id, bool writing) {
  std::lock_guard lock(mu_);
  eviction_->SetWriting(id, writing);
}

Status LocalEngineImpl::Evict(ObjectId id) {
  std::vector<ObjectId> victims{id};
  {
    std::unique_lock lock(mu_);
    if (!commit_error_.ok()) return ReadOnlyError();
    if (stop_) return Status::Error(ESHUTDOWN, "engine is closing");
    if (!eviction_->tracked(id)) return Status::Invalid("not a published file with data");
    if (eviction_->pinned(id)) return Status::Error(EPERM, "file is pinned");
    if (eviction_->writing(id)) return Status::Error(EBUSY, "file is open for writing");
    eviction_->Forget(id);
    const uint64_t seq = RemoveEvicted(victims);
    work_cv_.notify_one();
    if (options_.durability == Durability::kClose && !WaitDurable(lock, seq)) {
      return ReadOnlyError();
    }
  }
  NotifyEvicted(victims);
  return Status::Ok();
}

void LocalEngineImpl::CommitLoop() {
  const auto interval = std::chrono::milliseconds(std::max<uint32_t>(1, options_.async_commit_ms));
  std::unique_lock lock(mu_);
  for (;;) {
    auto wake = [&] {
      return stop_ || checkpoint_requests_ > checkpoints_done_ || flush_requested_ ||
             (!queue_.empty() && options_.durability == Durability::kClose);
    };
    const bool resuming = NoSpace(commit_error_);  // false while the store is writable
    if (options_.durability == Durability::kAsync) {
      work_cv_.wait_for(lock, interval, wake);
    } else if (resuming) {
      work_cv_.wait_until(lock, next_resume_, wake);
    } else {
      work_cv_.wait(lock, wake);
    }
    if (resuming && !stop_ && std::chrono::steady_clock::now() >= next_resume_) {
      TryResume(lock);
      continue;
    }
    const bool stopping = stop_;
    const uint64_t ckpt_request = checkpoint_requests_;
    if (queue_.empty() && ckpt_request == checkpoints_done_ && !stopping) continue;

    flush_requested_ = false;
    std::vector<PendingCommit> batch = std::move(queue_);
    queue_.clear();
    // Still counted free while it is written (Stats): out of the queue, not yet freed.
    committing_free_ = FreeBytesOf(batch);
    uint64_t batch_bytes = 0, max_seq = 0;
    for (const auto& p : batch) {
      batch_bytes += p.encoded.size();
      max_seq = std::max(max_seq, p.seq);
    }
    const bool checkpoint = stopping || ckpt_request > checkpoints_done_ ||
                            journal_->size() + batch_bytes > options_.journal_checkpoint_bytes;
    // Taken together with the queue swap: the image holds exactly the batches written to the
    // current journal, and later batches go to the next one.
    CheckpointImage image;
    if (checkpoint && commit_error_.ok()) image = TakeCheckpointImage();
    const bool failed_before = !commit_error_.ok();
    lock.unlock();

    Status st = failed_before ? Status::Ok() : CommitRecords(batch);
    Status ckpt_st = Status::Ok();
    if (failed_before) {
      ckpt_st = Status::IoError("journal failed earlier");
    } else if (st.ok() && checkpoint) {
      ckpt_st = WriteCheckpoint(image.records, image.next_id);
      if (!ckpt_st.ok()) spdlog::error("engine: checkpoint failed: {}", ckpt_st.ToString());
      SavePolicyState(image.policy);
    } else if (!st.ok()) {
      ckpt_st = st;
    }
    image = {};
    if (st.ok() && !failed_before) {
      batch.clear();  // durable: the dropped layouts may now free their extents
      committing_free_ = 0;
    } else if (!st.ok()) {
      spdlog::error("engine: journal commit failed, the store is read-only {}: {}",
                    NoSpace(st) ? "until the file system has room again" : "until a restart",
                    st.ToString());
    }

    std::vector<std::pair<ObjectId, std::optional<ObjectRecord>>> rolled_back;
    lock.lock();
    if (st.ok() && !failed_before) {
      durable_seq_ = std::max(durable_seq_, max_seq);
    } else {
      if (commit_error_.ok()) {
        commit_error_ = st;
        last_failure_ = st;
        resume_tries_ = 0;
        next_resume_ = std::chrono::steady_clock::now() +
                       std::chrono::milliseconds(options_.no_space_retry_ms);
      }
      rolled_back = RollBack(&batch);
      // Without the lock: layout deleters and the listener (the namespace) take their own.
      // New changes are refused meanwhile (commit_error_ is set).
      lock.unlock();
      batch.clear();
      committing_free_ = 0;
      if (!rolled_back.empty()) {
        spdlog::error("engine: undid {} changes that never became durable", rolled_back.size());
        if (StoreListener* l = listener_.load()) {
          for (const auto& [id, rec] : rolled_back) l->OnRolledBack(id, rec ? &*rec : nullptr, {});
        }
      }
      lock.lock();
      // Waiters learn of the failure only now, when the in-memory state matches the disk.
      // (No change was accepted meanwhile: last_seq_ is the last one undone.)
      if (last_seq_ > durable_seq_) undone_.emplace_back(durable_seq_, last_seq_);
    }
    if (checkpoint) {
      checkpoints_done_ = ckpt_request;
      checkpoint_status_ = ckpt_st;
    }
    done_cv_.notify_all();
    if (stopping && queue_.empty()) return;
  }
}

std::vector<std::pair<ObjectId, std::optional<ObjectRecord>>> LocalEngineImpl::RollBack(
    std::vector<PendingCommit>* failed) {
  // Everything queued after the failed group was applied on top of it: undo newest first.
  std::vector<PendingCommit> all = std::move(*failed);
  for (auto& p : queue_) all.push_back(std::move(p));
  queue_.clear();
  std::vector<std::pair<ObjectId, std::optional<ObjectRecord>>> changed;
  for (auto it = all.rbegin(); it != all.rend(); ++it) {
    // The layouts a batch dropped are back in the index now (restored from its undo); the
    // ones its puts added are never durable and may free their extents.
    it->undo.Restore(&index_, &it->dropped, &changed);
  }
  // Freed outside mu_ by the caller (layout deleters take the space lock).
  *failed = std::move(all);
  return changed;
}

Status LocalEngineImpl::CommitRecords(const std::vector<PendingCommit>& batch) {
  // Data before metadata: the devices written since the last commit are synced first, so a
  // durable record never names extents whose data could still be lost.
  for (uint16_t d : ctx_->TakeDirtyDevices()) {
    if (Status st = ctx_->devices()[d]->DataSync(); !st.ok()) {
      // Never NoSpace, whatever its errno: device data may be lost (fsyncgate), and a resumed
      // store would go on as if it were not.
      return Status::IoError("device sync failed: " + st.ToString());
    }
  }
  std::string all;
  for (const auto& p : batch) all += p.encoded;
  if (all.empty()) return Status::Ok();
  journal_commits_.fetch_add(1);
  Status st = journal_->AppendDurable(all);
  journal_bytes_ = journal_->size();
  return st;
}

Status LocalEngineImpl::WriteCheckpoint(const std::vector<ObjectRecord>& records,
                                        uint64_t next_id) {
  const std::string& dir = options_.data_dir;
  const uint64_t old_number = journal_->number();
  KVFS_ASSIGN_OR_RETURN(std::unique_ptr<Journal> next, Journal::Create(*fs_, dir, old_number + 1));
  KVFS_RETURN_IF_ERROR(fs_->SyncDir(dir));
  AdoptJournal(std::move(next));
  // If this fails, the older checkpoints plus every journal from them still describe the
  // state (the new, empty journal only continues it).
  KVFS_RETURN_IF_ERROR(Checkpoint::Write(*fs_, dir, old_number + 1, next_id, records));
  return Checkpoint::Prune(*fs_, dir);
}

void LocalEngineImpl::TryResume(std::unique_lock<std::mutex>& lock) {
  // Nothing is queued (every change is refused while read-only): the index is the state the
  // disk holds, and a checkpoint of it is a clean start for a new journal.
  CheckpointImage image = TakeCheckpointImage();
  lock.unlock();
  Status st = ResumeJournal(image.records, image.next_id);
  if (st.ok()) SavePolicyState(image.policy);
  image = {};
  lock.lock();
  if (st.ok()) {
    spdlog::warn("engine: the store is writable again after {} tries: a checkpoint fits now ({})",
                 resume_tries_ + 1, last_failure_.ToString());
    commit_error_ = Status::Ok();
    return;
  }
  ++resume_tries_;
  if (!NoSpace(st)) {
    // The disk failed in another way on the way out: stay read-only until a restart.
    spdlog::error("engine: the store stays read-only until a restart: {}", st.ToString());
    commit_error_ = st;
    return;
  }
  const uint32_t factor = 1u << std::min<uint32_t>(resume_tries_, 2);
  next_resume_ = std::chrono::steady_clock::now() +
                 std::chrono::milliseconds(uint64_t{options_.no_space_retry_ms} * factor);
  if (resume_tries_ == 1 || resume_tries_ % 16 == 0) {
    spdlog::warn("engine: still read-only: try {} to write a checkpoint failed: {}", resume_tries_,
                 st.ToString());
  }
}

LocalEngineImpl::CheckpointImage LocalEngineImpl::TakeCheckpointImage() {
  return {index_.Snapshot(), std::max<uint64_t>(id_limit_.load(), next_id_.load()),
          eviction_->Snapshot()};
}

void LocalEngineImpl::SavePolicyState(const PolicyState& state) {
  if (Status st = PolicyStateFile::Write(*fs_, options_.data_dir, state); !st.ok()) {
    spdlog::warn("engine: cannot save the eviction state: {}", st.ToString());
  }
}

void LocalEngineImpl::AdoptJournal(std::unique_ptr<Journal> next) {
  journal_ = std::move(next);
  journal_->set_fault_injector(options_.fault_injector.get());
  journal_bytes_ = journal_->size();
}

Status LocalEngineImpl::ResumeJournal(const std::vector<ObjectRecord>& records, uint64_t next_id) {
  const std::string& dir = options_.data_dir;
  const uint64_t number = journal_->number() + 1;
  const std::string checkpoint = Checkpoint::Encode(number, next_id, records);
  // Not even tried without room for it and a little journal after it (kResumeMargin): a try
  // that fails fills the file system to the last block for a moment, for every other program
  // on it too.
  if (Result<uint64_t> free = fs_->FreeBytes(dir);
      free.ok() && *free < checkpoint.size() + kResumeMargin) {
    return Status::NoSpace(std::to_string(*free) + " bytes free in " + dir + ", a checkpoint of " +
                           std::to_string(checkpoint.size()) + " bytes and the journal need more");
  }
  KVFS_ASSIGN_OR_RETURN(std::unique_ptr<Journal> next, Journal::Create(*fs_, dir, number));
  if (Status st = Checkpoint::Install(*fs_, dir, number, checkpoint); !st.ok()) {
    // Gone again, with the blocks it reserved: a full file system must not fill up with the
    // empty journals of failed tries.
    next.reset();
    (void)fs_->Unlink(dir + "/" + Journal::FileName(number));
    return st;
  }
  AdoptJournal(std::move(next));
  if (Status st = Checkpoint::Prune(*fs_, dir); !st.ok()) {
    spdlog::warn("engine: cannot delete old checkpoints and journals: {}", st.ToString());
  }
  return Status::Ok();
}

Status LocalEngineImpl::Sync() {
  std::unique_lock lock(mu_);
  if (!commit_error_.ok()) return commit_error_;
  const uint64_t request = ++checkpoint_requests_;
  work_cv_.notify_one();
  done_cv_.wait(lock, [&] { return checkpoints_done_ >= request || !commit_error_.ok(); });
  if (checkpoints_done_ >= request) return checkpoint_status_;
  return commit_error_;
}

}  // namespace kvfs
