// LocalEngineImpl, the LocalEngine behind LocalEngine::Open. Internal to the engine: the class
// is declared here so its member functions can live in several files, each with one job:
// local_engine.cc (open, recovery into the index, close, stats), local_engine_commit.cc (Apply,
// the group-commit thread, checkpoints, eviction's journaled removals) and local_engine_read.cc
// (writers, reads, verification, dropping corrupt records).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "engine_context.h"
#include "engine_eviction.h"
#include "file_system.h"
#include "index.h"
#include "index_undo.h"
#include "journal.h"
#include "kvfs/local_engine.h"
#include "read_ahead.h"
#include "recovery.h"

namespace kvfs {

class LocalEngineImpl final : public LocalEngine {
 public:
  LocalEngineImpl(EngineOptions options, std::shared_ptr<FileSystem> fs,
                  std::unique_ptr<FileLock> lock)
      : options_(std::move(options)), fs_(std::move(fs)), lock_(std::move(lock)) {}
  ~LocalEngineImpl() override;

  Status Start(RecoveredState state, std::vector<std::unique_ptr<Device>> devices);

  std::vector<ObjectRecord> Records() const override;
  ObjectId NewId() override;
  Status Apply(const MetaBatch& batch) override;
  Result<uint64_t> Submit(const MetaBatch& batch) override;
  Status AwaitDurable(uint64_t token) override;
  Result<std::unique_ptr<ChunkWriter>> NewWriter(LayoutRef base) override;
  Result<size_t> Read(const LayoutRef& layout, uint64_t offset, void* out, size_t len) override;
  Result<size_t> ReadForPeer(const LayoutRef& layout, uint64_t offset, void* out, size_t len,
                             std::vector<DataDigest>* digests) override;
  Status Verify(const LayoutRef& layout) override;
  Result<uint64_t> ContentChecksum(const LayoutRef& layout) const override;
  uint64_t DiskBytes(const Layout& layout) const override;
  Result<std::unique_ptr<ChunkReader>> NewReader(LayoutRef layout) override;
  void SetListener(StoreListener* listener) override { listener_ = listener; }
  StoreStats Stats() const override;
  Status Sync() override;
  void Touch(ObjectId id, uint64_t stream) override;
  Status Evict(ObjectId id) override;
  void SetWriting(ObjectId id, bool writing) override;

 private:
  struct PendingCommit {
    uint64_t seq = 0;
    std::string encoded;             // one journal record
    std::vector<LayoutRef> dropped;  // freed once `encoded` is durable
    IndexUndo undo;                  // takes the batch back out of the index if it never is
  };

  Status Validate(const MetaBatch& batch) const;
  // Read, and ReadForPeer when `digests` is set.
  Result<size_t> ReadChecked(const LayoutRef& layout, uint64_t offset, void* out, size_t len,
                             std::vector<DataDigest>* digests = nullptr);
  void DropCorrupt(const LayoutRef& layout, const Status& why);
  uint64_t Enqueue(std::string encoded, std::vector<LayoutRef> dropped,
                   IndexUndo undo = {});  // mu_ held
  // mu_ held: the error every change gets once a journal write has failed.
  Status ReadOnlyError() const;
  // mu_ held: whether change `seq` was undone by a failed commit (its waiters get EROFS).
  bool Undone(uint64_t seq) const;
  // mu_ held: waits until change `seq` is durable (true) or undone (false).
  bool WaitDurable(std::unique_lock<std::mutex>& lock, uint64_t seq);
  // The store is read-only because the file system was full (ENOSPC, EDQUOT): the committer
  // retries (TryResume) and the store turns writable again once a checkpoint fits. Any other
  // journal failure (EIO) stays until a restart: the disk, not a full file system, failed.
  static bool NoSpace(const Status& st);
  // Committer thread, mu_ held on entry and exit: one try to leave the read-only state by
  // writing a checkpoint of the index (which equals the disk's state after the rollback) and
  // starting a new journal after it, so nothing of the failed journal's tail is replayed.
  void TryResume(std::unique_lock<std::mutex>& lock);
  Status ResumeJournal(const std::vector<ObjectRecord>& records, uint64_t next_id);
  static constexpr uint64_t kResumeMargin = 1u << 20;
  // After a failed commit (mu_ held): takes `failed` and everything queued behind it back out
  // of the index, newest first, so the index matches the disk. Returns the ids it changed.
  std::vector<std::pair<ObjectId, std::optional<ObjectRecord>>> RollBack(
      std::vector<PendingCommit>* failed);
  // Bounded cache: journals the removal of evicted files (mu_ held) and tells the listener
  // (no lock held). Reclaim evicts for a writer that found no free extent.
  uint64_t RemoveEvicted(const std::vector<ObjectId>& victims);
  void NotifyEvicted(const std::vector<ObjectId>& victims);
  bool Reclaim(uint64_t needed, bool may_evict);
  // mu_ held: extents that queued (not yet durable) commits free once written: the layouts
  // they dropped that nobody else holds. FreeBytesOf: the same for one group of commits.
  uint64_t QueuedFreeBytes() const { return FreeBytesOf(queue_); }
  uint64_t FreeBytesOf(const std::vector<PendingCommit>& commits) const;
  void CommitLoop();
  Status CommitRecords(const std::vector<PendingCommit>& batch);
  Status WriteCheckpoint(const std::vector<ObjectRecord>& records, uint64_t next_id);
  // What a checkpoint writes, taken under mu_ (with the queue swap, or while nothing is queued)
  // and written without it: the index, the next id, and the eviction policy's order.
  struct CheckpointImage {
    std::vector<ObjectRecord> records;
    uint64_t next_id = 0;
    PolicyState policy;
  };
  CheckpointImage TakeCheckpointImage();  // mu_ held
  // Best effort: without it the policy's order is rebuilt from the index at open.
  void SavePolicyState(const PolicyState& state);
  // Committer thread: appends go to `next` from now on (a checkpoint named it first to replay).
  void AdoptJournal(std::unique_ptr<Journal> next);

  const EngineOptions options_;
  const std::shared_ptr<FileSystem> fs_;
  std::unique_ptr<FileLock> lock_;  // the data directory's, released last
  RecoveryDamage damage_;           // what the recovery at open skipped
  std::shared_ptr<EngineContext> ctx_;

  mutable std::mutex mu_;
  std::condition_variable work_cv_, done_cv_;
  Index index_;
  std::vector<PendingCommit> queue_;
  uint64_t last_seq_ = 0, durable_seq_ = 0;
  // Set by a failed journal write: nothing more is accepted until TryResume clears it (only
  // for NoSpace; any other failure is sticky). last_failure_ keeps the last one for messages.
  Status commit_error_, last_failure_;
  // (first, last] ranges of change seqs a failed commit undid, recorded once they are undone
  // and the listener told: their waiters then get EROFS, even after the store resumed.
  std::vector<std::pair<uint64_t, uint64_t>> undone_;
  std::chrono::steady_clock::time_point next_resume_;  // when the committer tries again
  uint32_t resume_tries_ = 0;
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
  // FreeBytesOf the group the committer is writing now (out of queue_, not yet freed).
  std::atomic<uint64_t> committing_free_{0};
  std::atomic<uint64_t> corrupt_dropped_{0};
  std::shared_ptr<ReadAheadPool> read_ahead_;  // made with ctx_, at Open
  std::atomic<StoreListener*> listener_{nullptr};
  std::unique_ptr<Journal> journal_;  // the committer's, after Start
  std::thread committer_;
};

}  // namespace kvfs
