// EngineEviction: the local engine's bounded-cache bookkeeping. It feeds the configured
// EvictionPolicy (kvfs_eviction) from the batches the engine applies, decides when used bytes
// passed the high watermark and which files go to reach the low one, and saves/restores the
// policy's state beside the checkpoint. Not locked: the engine calls it under its index lock.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "eviction_policy.h"
#include "kvfs/chunk_store.h"
#include "kvfs/local_engine.h"
#include "policy_state.h"

namespace kvfs {

class EngineEviction {
 public:
  // EINVAL for an unknown policy or watermarks outside 0 < low < high <= 1.
  static Result<std::unique_ptr<EngineEviction>> Make(const EngineOptions& options);

  // Rebuilds the policy at open: the persisted state when it is valid and written by the same
  // policy, reconciled with the index's records (files it lacks are tracked oldest mtime
  // first, ids the index lost are removed); otherwise from the records alone (logged).
  void Recover(FileSystem& fs, const std::string& data_dir,
               const std::vector<ObjectRecord>& records);

  // Keeps the policy in step with an applied batch: a newly published layout is tracked,
  // a pin flag change pins/unpins, removed or emptied files are forgotten.
  void OnApply(const MetaBatch& batch);
  // A read hit. Every access the engine reports (publishes and read hits) is one stream to
  // the policy: a publish does not say which client made it, and a connector's request reads
  // its cached prefix and then writes the rest, which only one stream can chain together.
  // `stream` (the reader) is therefore not used to split chains.
  void Touch(ObjectId id, uint64_t stream, uint64_t now_ms);
  bool tracked(ObjectId id) const { return entries_.count(id) != 0; }
  bool pinned(ObjectId id) const;
  // A write session is open on `id` (ChunkStore::SetWriting): never a victim meanwhile, like a
  // pinned file, but not persisted. Untracked ids are remembered for when they are published.
  void SetWriting(ObjectId id, bool writing);
  bool writing(ObjectId id) const { return writing_.count(id) != 0; }

  // When `used` passed the high watermark of `capacity`: the victims (policy order) that bring
  // it to the low watermark. Bytes of earlier victims whose extents are not free yet (commit
  // pending, or an open reader) are not counted again, so one eviction is not repeated.
  // `spared`: ids never chosen (the versions being published by the batch that asks).
  std::vector<ObjectId> OverWatermark(uint64_t used, uint64_t capacity,
                                      const std::vector<ObjectId>& spared = {});
  // Up to `n` victims regardless of watermarks (a writer hit ENOSPC). Empty: nothing evictable.
  std::vector<ObjectId> Victims(size_t n);
  // For a writer that hit ENOSPC: victims down to the low watermark of `capacity` (at least
  // one), so one journal commit frees room for many writes instead of one file per commit.
  // `shortfall`: bytes the writer still lacks beyond free space (evicted even past the low
  // watermark).
  std::vector<ObjectId> ReclaimVictims(uint64_t used, uint64_t capacity, uint64_t shortfall);
  // Bytes eviction could free now: unpinned tracked files plus earlier victims not yet free.
  uint64_t ReclaimableBytes();
  // Takes one id out of the policy for an explicit eviction (user.kvfs.evict).
  void Forget(ObjectId id);

  PolicyState Snapshot() const;
  std::string_view policy_name() const { return policy_->name(); }
  double high_watermark() const { return high_; }
  double low_watermark() const { return low_; }

 private:
  struct Entry {
    std::weak_ptr<const Layout> layout;  // the tracked version: a republish is a new one
    uint64_t bytes = 0;
    bool pinned = false;           // the record's flag (user.kvfs.pin)
    bool policy_pinned = false;    // what the policy was told: pinned or being written
    ObjectId parent = kInvalidId;  // the record's prefix_parent the policy was last told
  };
  EngineEviction(std::unique_ptr<eviction::EvictionPolicy> policy, double high, double low)
      : policy_(std::move(policy)), high_(high), low_(low) {}
  void TrackRecord(const ObjectRecord& rec);
  void Untrack(ObjectId id);
  // Tells the policy whether `id` may be a victim: not when pinned or being written.
  void SyncPin(ObjectId id, Entry& e);
  void NoteVictims(const std::vector<ObjectId>& victims);
  uint64_t PendingFree();
  static eviction::AccessContext Context(uint64_t now_ms);

  std::unique_ptr<eviction::EvictionPolicy> policy_;
  double high_, low_;
  std::unordered_map<ObjectId, Entry> entries_;
  std::unordered_set<ObjectId> writing_;  // ids with an open write session
  // Victims whose extents may still be allocated: (layout, bytes).
  std::vector<std::pair<std::weak_ptr<const Layout>, uint64_t>> pending_;
};

// Bytes a layout holds on the devices (each segment's extent is its stored length rounded up
// to 4 KiB).
uint64_t AllocatedBytes(const Layout& layout);

}  // namespace kvfs
