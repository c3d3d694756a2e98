// LocalEngine: the ChunkStore on local devices. This file holds the engine's life cycle (open,
// recovery into the index, close), Apply with its group-commit thread, and reads. The pieces
// it drives live beside it: Device, IoRing, DeviceSpace/ExtentAllocator, SegmentCodec,
// EngineChunkWriter, Journal, Checkpoint, Recovery, Index.
#include "kvfs/local_engine.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <thread>

#include "byte_io.h"
#include "checkpoint.h"
#include "chunk_writer.h"
#include "engine_context.h"
#include "engine_eviction.h"
#include "index.h"
#include "index_undo.h"
#include "journal.h"
#include "policy_state.h"
#include "read_ahead.h"
#include "record_codec.h"
#include "recovery.h"

namespace kvfs {
namespace {

constexpr uint64_t kIdBlock = 1 << 16;  // ids reserved per watermark record

Status ValidateOptions(const EngineOptions& o) {
  if (o.data_dir.empty()) return Status::Invalid("engine needs a data directory");
  if (o.segment_size < 4096 || o.segment_size % 4096 != 0 || o.segment_size > (64u << 20)) {
    return Status::Invalid("segment size must be a multiple of 4 KiB between 4 KiB and 64 MiB");
  }
  if (o.queue_depth < 1 || o.queue_depth > 1024) {
    return Status::Invalid("queue depth must be between 1 and 1024");
  }
  if (o.devices.size() > 4096) return Status::Invalid("too many devices");
  // Eviction policy and watermarks, before anything is created on disk.
  if (auto ev = EngineEviction::Make(o); !ev.ok()) return ev.status();
  if (o.devices.empty() && o.capacity == 0) {
    // Only a problem for a new engine; an existing device keeps its size.
    struct stat st {};
    if (::stat((o.data_dir + "/device0.kvfs").c_str(), &st) != 0) {
      return Status::Invalid("engine needs a capacity for its default device");
    }
  }
  return Status::Ok();
}

Status MakeDirs(const std::string& dir) {
  std::string path;
  for (size_t i = 0; i <= dir.size(); ++i) {
    if (i == dir.size() || (dir[i] == '/' && i > 0)) {
      path = dir.substr(0, i);
      if (::mkdir(path.c_str(), 0700) != 0 && errno != EEXIST) {
        return Status::Error(errno, "cannot create " + path + ": " + std::strerror(errno));
      }
    }
  }
  return Status::Ok();
}

class LocalEngineImpl final : public LocalEngine {
 public:
  LocalEngineImpl(EngineOptions options, int lock_fd)
      : options_(std::move(options)), lock_fd_(lock_fd) {}
  ~LocalEngineImpl() override;

  Status Start(RecoveredState state, std::vector<std::unique_ptr<Device>> devices);

  std::vector<ObjectRecord> Records() const override;
  ObjectId NewId() override;
  Status Apply(const MetaBatch& batch) override;
  Result<uint64_t> Submit(const MetaBatch& batch) override;
  Status AwaitDurable(uint64_t token) override;
  Result<std::unique_ptr<ChunkWriter>> NewWriter(LayoutRef base) override;
  Result<size_t> Read(const LayoutRef& layout, uint64_t offset, void* out, size_t len) override;
  Status Verify(const LayoutRef& layout) override;
  std::unique_ptr<ChunkReader> NewReader(LayoutRef layout) override;
  void SetListener(StoreListener* listener) override { listener_ = listener; }
  StoreStats Stats() const override;
  Status Sync() override;
  void Touch(ObjectId id, uint64_t stream) override;
  Status Evict(ObjectId id) override;

 private:
  struct PendingCommit {
    uint64_t seq = 0;
    std::string encoded;             // one journal record
    std::vector<LayoutRef> dropped;  // freed once `encoded` is durable
    IndexUndo undo;                  // takes the batch back out of the index if it never is
  };

  Status Validate(const MetaBatch& batch) const;
  Result<size_t> ReadChecked(const LayoutRef& layout, uint64_t offset, void* out, size_t len);
  void DropCorrupt(const LayoutRef& layout, const Status& why);
  uint64_t Enqueue(std::string encoded, std::vector<LayoutRef> dropped,
                   IndexUndo undo = {});  // mu_ held
  // mu_ held: the error every change gets once a journal write has failed.
  Status ReadOnlyError() const;
  // After a failed commit (mu_ held): takes `failed` and everything queued behind it back out
  // of the index, newest first, so the index matches the disk. Returns the ids it changed.
  std::vector<std::pair<ObjectId, std::optional<ObjectRecord>>> RollBack(
      std::vector<PendingCommit>* failed);
  // Bounded cache: journals the removal of evicted files (mu_ held) and tells the listener
  // (no lock held). Reclaim evicts for a writer that found no free extent.
  uint64_t RemoveEvicted(const std::vector<ObjectId>& victims);
  void NotifyEvicted(const std::vector<ObjectId>& victims);
  bool Reclaim();
  void CommitLoop();
  Status CommitRecords(const std::vector<PendingCommit>& batch);
  Status WriteCheckpoint(const std::vector<ObjectRecord>& records, uint64_t next_id);

  const EngineOptions options_;
  int lock_fd_;
  std::shared_ptr<EngineContext> ctx_;

  mutable std::mutex mu_;
  std::condition_variable work_cv_, done_cv_;
  Index index_;
  std::vector<PendingCommit> queue_;
  uint64_t last_seq_ = 0, durable_seq_ = 0;
  Status commit_error_;  // sticky: after a failed journal write nothing more is accepted
  // Set once the failed changes are undone and the listener told: waiters then get EROFS.
  bool failure_reported_ = false;
  uint64_t checkpoint_requests_ = 0, checkpoints_done_ = 0;
  Status checkpoint_status_;
  bool stop_ = false;
  bool flush_requested_ = false;  // commit now even with durability=async (Reclaim waits)
  std::unique_ptr<EngineEviction> eviction_;  // under mu_
  // Ids below this are covered by a journaled watermark; written under mu_, read lock-free.
  std::atomic<uint64_t> id_limit_{0};

  std::atomic<uint64_t> next_id_{kRootId + 1};
  std::atomic<uint64_t> journal_bytes_{0};
  std::atomic<uint64_t> journal_commits_{0};
  std::atomic<uint64_t> corrupt_dropped_{0};
  std::shared_ptr<ReadAheadCounters> read_ahead_ = std::make_shared<ReadAheadCounters>();
  std::atomic<StoreListener*> listener_{nullptr};
  std::unique_ptr<Journal> journal_;  // the committer's, after Start
  std::thread committer_;
};

LocalEngineImpl::~LocalEngineImpl() {
  if (ctx_) ctx_->SetReclaimer(nullptr);  // writers that outlive the engine get ENOSPC
  if (committer_.joinable()) {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    work_cv_.notify_all();
    committer_.join();
  }
  std::vector<LayoutRef> dropped;
  {
    std::lock_guard lock(mu_);
    index_.Clear(&dropped);
  }
  dropped.clear();
  journal_.reset();
  if (ctx_) ctx_->Close();
  if (lock_fd_ >= 0) ::close(lock_fd_);  // releases the flock
}

Status LocalEngineImpl::Start(RecoveredState state, std::vector<std::unique_ptr<Device>> devices) {
  KVFS_ASSIGN_OR_RETURN(eviction_, EngineEviction::Make(options_));
  ctx_ = std::make_shared<EngineContext>(options_, std::move(devices));
  // Rebuild free space from the recovered layouts; a record whose extents are impossible is
  // dropped (and logged) rather than allowed to corrupt others: kvfs is a cache.
  std::vector<LayoutRef> unused;
  size_t dropped_records = 0;
  for (auto& [id, entry] : state.records) {
    ObjectRecord rec = std::move(entry.record);
    if (entry.layout) {
      Status st;
      size_t claimed = 0;
      for (const Segment& seg : entry.layout->segments) {
        st = ctx_->space().Claim(seg);
        if (!st.ok()) break;
        ++claimed;
      }
      if (!st.ok()) {
        for (size_t i = 0; i < claimed; ++i) ctx_->space().Release(entry.layout->segments[i]);
        spdlog::error("engine: dropping recovered object {} ('{}'): {}", id, rec.name,
                      st.message());
        ++dropped_records;
        continue;
      }
      rec.layout = ctx_->space().Adopt(std::make_unique<Layout>(std::move(*entry.layout)));
    }
    index_.Put(std::move(rec), &unused);
  }
  next_id_ = state.next_id;
  id_limit_ = state.next_id;
  eviction_->Recover(options_.data_dir, index_.Snapshot());
  ctx_->SetReclaimer([this] { return Reclaim(); });
  KVFS_ASSIGN_OR_RETURN(journal_, Journal::OpenForAppend(options_.data_dir, state.journal_number,
                                                         state.journal_valid_bytes));
  journal_->set_fault_injector(options_.fault_injector.get());
  KVFS_RETURN_IF_ERROR(SyncDirectory(options_.data_dir));
  journal_bytes_ = journal_->size();
  spdlog::info("engine: opened {} ({} devices, {} objects, {} journal records replayed{}{})",
               options_.data_dir, ctx_->devices().size(), index_.objects(), state.replayed_records,
               state.truncated ? ", torn tail cut" : "",
               dropped_records ? ", some records dropped" : "");
  committer_ = std::thread([this] { CommitLoop(); });
  return Status::Ok();
}

std::vector<ObjectRecord> LocalEngineImpl::Records() const {
  std::lock_guard lock(mu_);
  return index_.Snapshot();
}

ObjectId LocalEngineImpl::NewId() {
  const ObjectId id = next_id_.fetch_add(1);
  if (id < id_limit_.load()) return id;  // the common case: no lock
  std::lock_guard lock(mu_);
  if (id >= id_limit_.load()) {
    // Persist a watermark before ids past it are used, so a restart never hands them out
    // again. Not waited for: an id is only visible through a record journaled after it.
    id_limit_ = id + kIdBlock;
    std::string payload, encoded;
    ByteWriter(&payload).U64(id_limit_.load());
    Journal::EncodeRecord(RecordType::kWatermark, payload, &encoded);
    Enqueue(std::move(encoded), {});
    work_cv_.notify_one();
  }
  return id;
}

Status LocalEngineImpl::Validate(const MetaBatch& batch) const {
  const uint32_t seg = options_.segment_size;
  for (const ObjectRecord& rec : batch.puts) {
    if (rec.id == kInvalidId || rec.id == kRootId) {
      return Status::Invalid("cannot put object id " + std::to_string(rec.id));
    }
    if (rec.type != ObjectType::kFile && rec.type != ObjectType::kDirectory &&
        rec.type != ObjectType::kSymlink) {
      return Status::Invalid("unknown object type");
    }
    if (rec.name.size() > 4096 || rec.symlink_target.size() > 4096) {
      return Status::Invalid("name or symlink target too long");
    }
    if (!rec.layout) continue;
    if (rec.type != ObjectType::kFile) return Status::Invalid("only files have a layout");
    if (!ctx_->space().Owns(rec.layout)) {
      return Status::Invalid("layout of object " + std::to_string(rec.id) +
                             " was not made by this engine");
    }
    if (rec.layout->segments.size() != (rec.layout->size + seg - 1) / seg) {
      return Status::Invalid("layout segment count does not match its size");
    }
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
  done_cv_.wait(lock, [&] { return durable_seq_ >= seq || failure_reported_; });
  if (durable_seq_ >= seq) return Status::Ok();
  return ReadOnlyError();
}

Status LocalEngineImpl::ReadOnlyError() const {
  return Status::Error(EROFS, "kvfs store is read-only: a journal write failed (" +
                                  commit_error_.message() +
                                  "); changes since the last durable commit were undone; "
                                  "restart to recover");
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
    victims = eviction_->OverWatermark(ctx_->space().used_bytes(), ctx_->space().capacity_bytes());
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

bool LocalEngineImpl::Reclaim() {
  std::vector<ObjectId> victims;
  {
    std::unique_lock lock(mu_);
    if (stop_ || !commit_error_.ok()) return false;
    victims = eviction_->ReclaimVictims(ctx_->space().used_bytes(), ctx_->space().capacity_bytes());
    if (victims.empty()) return false;  // everything left is pinned
    const uint64_t seq = RemoveEvicted(victims);
    // The victim's extents are reusable only once the record that freed them is durable.
    flush_requested_ = true;
    work_cv_.notify_one();
    done_cv_.wait(lock, [&] { return durable_seq_ >= seq || !commit_error_.ok(); });
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

Status LocalEngineImpl::Evict(ObjectId id) {
  std::vector<ObjectId> victims{id};
  {
    std::unique_lock lock(mu_);
    if (!commit_error_.ok()) return ReadOnlyError();
    if (stop_) return Status::Error(ESHUTDOWN, "engine is closing");
    if (!eviction_->tracked(id)) return Status::Invalid("not a published file with data");
    if (eviction_->pinned(id)) return Status::Error(EPERM, "file is pinned");
    eviction_->Forget(id);
    const uint64_t seq = RemoveEvicted(victims);
    work_cv_.notify_one();
    if (options_.durability == Durability::kClose) {
      done_cv_.wait(lock, [&] { return durable_seq_ >= seq || !commit_error_.ok(); });
      if (durable_seq_ < seq) return ReadOnlyError();
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
    if (options_.durability == Durability::kAsync) {
      work_cv_.wait_for(lock, interval, wake);
    } else {
      work_cv_.wait(lock, wake);
    }
    const bool stopping = stop_;
    const uint64_t ckpt_request = checkpoint_requests_;
    if (queue_.empty() && ckpt_request == checkpoints_done_ && !stopping) continue;

    flush_requested_ = false;
    std::vector<PendingCommit> batch = std::move(queue_);
    queue_.clear();
    uint64_t batch_bytes = 0, max_seq = 0;
    for (const auto& p : batch) {
      batch_bytes += p.encoded.size();
      max_seq = std::max(max_seq, p.seq);
    }
    const bool checkpoint = stopping || ckpt_request > checkpoints_done_ ||
                            journal_->size() + batch_bytes > options_.journal_checkpoint_bytes;
    std::vector<ObjectRecord> snapshot;
    uint64_t snapshot_next_id = 0;
    PolicyState policy_state;
    if (checkpoint && commit_error_.ok()) {
      policy_state = eviction_->Snapshot();
      // Taken together with the queue swap: the snapshot holds exactly the batches written
      // to the current journal, and later batches go to the next one.
      snapshot = index_.Snapshot();
      snapshot_next_id = std::max<uint64_t>(id_limit_.load(), next_id_.load());
    }
    const bool failed_before = !commit_error_.ok();
    lock.unlock();

    Status st = failed_before ? Status::Ok() : CommitRecords(batch);
    Status ckpt_st = Status::Ok();
    if (failed_before) {
      ckpt_st = Status::IoError("journal failed earlier");
    } else if (st.ok() && checkpoint) {
      ckpt_st = WriteCheckpoint(snapshot, snapshot_next_id);
      if (!ckpt_st.ok()) spdlog::error("engine: checkpoint failed: {}", ckpt_st.ToString());
      // Best effort: without it the policy's order is rebuilt from the index at open.
      if (Status ps = PolicyStateFile::Write(options_.data_dir, policy_state); !ps.ok()) {
        spdlog::warn("engine: cannot save the eviction state: {}", ps.ToString());
      }
    } else if (!st.ok()) {
      ckpt_st = st;
    }
    snapshot.clear();
    if (st.ok() && !failed_before) {
      batch.clear();  // durable: the dropped layouts may now free their extents
    } else if (!st.ok()) {
      spdlog::error("engine: journal commit failed, the store is read-only from now on: {}",
                    st.ToString());
    }

    std::vector<std::pair<ObjectId, std::optional<ObjectRecord>>> rolled_back;
    lock.lock();
    if (st.ok() && !failed_before) {
      durable_seq_ = std::max(durable_seq_, max_seq);
    } else {
      if (commit_error_.ok()) commit_error_ = st;
      rolled_back = RollBack(&batch);
      // Without the lock: layout deleters and the listener (the namespace) take their own.
      // New changes are refused meanwhile (commit_error_ is set).
      lock.unlock();
      batch.clear();
      if (!rolled_back.empty()) {
        spdlog::error("engine: undid {} changes that never became durable", rolled_back.size());
        if (StoreListener* l = listener_.load()) {
          for (const auto& [id, rec] : rolled_back) l->OnRolledBack(id, rec ? &*rec : nullptr);
        }
      }
      lock.lock();
      // Waiters learn of the failure only now, when the in-memory state matches the disk.
      failure_reported_ = true;
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
    KVFS_RETURN_IF_ERROR(ctx_->devices()[d]->DataSync());
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
  KVFS_ASSIGN_OR_RETURN(std::unique_ptr<Journal> next, Journal::Create(dir, old_number + 1));
  KVFS_RETURN_IF_ERROR(SyncDirectory(dir));
  journal_ = std::move(next);
  journal_->set_fault_injector(options_.fault_injector.get());
  journal_bytes_ = journal_->size();
  // If this fails, the old checkpoint plus every journal from it still describe the state.
  KVFS_RETURN_IF_ERROR(Checkpoint::Write(dir, old_number + 1, next_id, records));
  KVFS_ASSIGN_OR_RETURN(std::vector<uint64_t> journals, Journal::List(dir));
  for (uint64_t n : journals) {
    if (n <= old_number) ::unlink((dir + "/" + Journal::FileName(n)).c_str());
  }
  return SyncDirectory(dir);
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

Result<std::unique_ptr<ChunkWriter>> LocalEngineImpl::NewWriter(LayoutRef base) {
  if (base && !ctx_->space().Owns(base)) {
    return Status::Invalid("base layout was not made by this engine");
  }
  return std::unique_ptr<ChunkWriter>(std::make_unique<EngineChunkWriter>(ctx_, std::move(base)));
}

// Bad stored bytes (as opposed to a failed device I/O, which may be transient): the segment
// codec reports them as "checksum mismatch ..." or "corruption: ...".
bool IsBadData(const Status& st) {
  const std::string& m = st.message();
  return m.rfind("checksum mismatch", 0) == 0 || m.rfind("corruption:", 0) == 0;
}

Result<size_t> LocalEngineImpl::Read(const LayoutRef& layout, uint64_t offset, void* out,
                                     size_t len) {
  Result<size_t> r = ReadChecked(layout, offset, out, len);
  if (!r.ok() && IsBadData(r.status())) DropCorrupt(layout, r.status());
  return r;
}

std::unique_ptr<ChunkReader> LocalEngineImpl::NewReader(LayoutRef layout) {
  // 8 segments ahead: enough to keep the device busy (fio peaks at depth 8 here) while the
  // window stays at 12 MiB per sequentially read file.
  constexpr uint32_t kReadAheadDepth = 8;
  if (!layout || !ctx_->space().Owns(layout)) return nullptr;
  return std::make_unique<SegmentReadAhead>(ctx_, std::move(layout), read_ahead_, kReadAheadDepth);
}

Status LocalEngineImpl::Verify(const LayoutRef& layout) {
  if (!layout) return Status::Ok();
  const uint64_t seg = options_.segment_size;
  std::vector<uint8_t> buf(seg);
  for (uint64_t off = 0; off < layout->size; off += seg) {
    Result<size_t> r = Read(layout, off, buf.data(), buf.size());
    if (!r.ok()) return r.status();
  }
  return Status::Ok();
}

void LocalEngineImpl::DropCorrupt(const LayoutRef& layout, const Status& why) {
  ObjectId id = kInvalidId;
  {
    std::lock_guard lock(mu_);
    id = index_.FindByLayout(layout.get());
    if (id == kInvalidId || stop_ || !commit_error_.ok()) {
      // Already dropped (a second reader of the same file) or replaced: nothing to journal.
      id = kInvalidId;
    } else {
      MetaBatch batch;
      batch.removes.push_back(id);
      std::string encoded;
      Journal::EncodeRecord(RecordType::kBatch, RecordCodec::EncodeBatch(batch), &encoded);
      std::vector<LayoutRef> dropped;
      IndexUndo undo = IndexUndo::Capture(index_, batch);
      index_.Apply(batch, &dropped);
      // Not waited for: a crash before the commit only means the next read finds it again.
      Enqueue(std::move(encoded), std::move(dropped), std::move(undo));
      work_cv_.notify_one();
    }
  }
  if (id == kInvalidId) return;
  corrupt_dropped_.fetch_add(1);
  spdlog::error("engine: dropped object {}: {}", id, why.message());
  if (StoreListener* l = listener_.load()) l->OnDropped(id);
}

Result<size_t> LocalEngineImpl::ReadChecked(const LayoutRef& layout, uint64_t offset, void* out,
                                            size_t len) {
  if (!layout || offset >= layout->size || len == 0) return size_t{0};
  if (!ctx_->space().Owns(layout)) return Status::Invalid("layout was not made by this engine");
  const uint64_t seg = options_.segment_size;
  const uint64_t end = std::min<uint64_t>(layout->size, offset + len);
  if (layout->segments.size() != (layout->size + seg - 1) / seg) {
    return Status::Invalid("layout segment count does not match its size");
  }
  std::vector<SegmentRead> reads;
  auto* dst = static_cast<uint8_t*>(out);
  for (uint64_t j = offset / seg; j * seg < end; ++j) {
    const Segment& s = layout->segments[j];
    const uint64_t start = j * seg;
    const uint32_t from = static_cast<uint32_t>(std::max(offset, start) - start);
    const uint32_t to = static_cast<uint32_t>(std::min(end - start, seg));
    if (to > s.raw_len) return Status::Corruption("segment shorter than the layout says");
    reads.push_back({&s, from, to - from, dst + (start + from - offset)});
  }
  ctx_->counters().reads.fetch_add(1);
  KVFS_RETURN_IF_ERROR(ctx_->ReadSegments(reads));
  return static_cast<size_t>(end - offset);
}

StoreStats LocalEngineImpl::Stats() const {
  StoreStats s;
  s.capacity_bytes = ctx_->space().capacity_bytes();
  s.used_bytes = ctx_->space().used_bytes();
  {
    std::lock_guard lock(mu_);
    s.logical_bytes = index_.logical_bytes();
    s.objects = index_.objects();
    s.files = index_.files();
    s.stored_bytes = index_.stored_bytes();
  }
  EngineCounters& c = ctx_->counters();
  s.reads = c.reads.load();
  s.writes = c.writes.load();
  s.bytes_read = c.bytes_read.load();
  s.bytes_written = c.bytes_written.load();
  s.checksum_failures = c.checksum_failures.load();
  s.corrupt_dropped = corrupt_dropped_.load();
  s.evictions = c.evictions.load();
  s.readahead_hits = read_ahead_->hits.load();
  s.readahead_misses = read_ahead_->misses.load();
  s.readahead_wasted = read_ahead_->wasted.load();
  s.eviction_policy = std::string(eviction_->policy_name());
  s.high_watermark = eviction_->high_watermark();
  s.low_watermark = eviction_->low_watermark();
  s.journal_bytes = journal_bytes_.load();
  s.journal_commits = journal_commits_.load();
  s.segment_size = options_.segment_size;
  for (const auto& d : ctx_->devices()) s.devices.push_back(d->path());
  return s;
}

}  // namespace

Result<std::unique_ptr<LocalEngine>> LocalEngine::Open(const EngineOptions& options) {
  KVFS_RETURN_IF_ERROR(ValidateOptions(options));
  KVFS_RETURN_IF_ERROR(MakeDirs(options.data_dir));
  const std::string lock_path = options.data_dir + "/LOCK";
  int lock_fd = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (lock_fd < 0) {
    return Status::Error(errno, "cannot open " + lock_path + ": " + std::strerror(errno));
  }
  if (::flock(lock_fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    ::close(lock_fd);
    if (err == EWOULDBLOCK) {
      return Status::Error(EBUSY, "data directory " + options.data_dir +
                                      " is in use by another kvfs engine (" + lock_path +
                                      " is locked)");
    }
    return Status::Error(err, "cannot lock " + lock_path + ": " + std::strerror(err));
  }
  auto engine = std::make_unique<LocalEngineImpl>(options, lock_fd);
  KVFS_ASSIGN_OR_RETURN(RecoveredState state, Recover(options.data_dir));
  KVFS_ASSIGN_OR_RETURN(auto devices, OpenDevices(options, state.fresh));
  KVFS_RETURN_IF_ERROR(engine->Start(std::move(state), std::move(devices)));
  return std::unique_ptr<LocalEngine>(std::move(engine));
}

}  // namespace kvfs
