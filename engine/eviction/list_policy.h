// ListPolicy: the shared body of LruPolicy and FifoPolicy, which differ only in whether a read
// hit moves the id to the back of the eviction order. Pinned ids leave the order (so eviction
// never walks over them) and rejoin it at the back when unpinned.
#pragma once

#include <string>
#include <unordered_map>
#include <unordered_set>

#include "eviction_policy.h"
#include "recency_list.h"

namespace kvfs::eviction {

class ListPolicy : public EvictionPolicy {
 public:
  void Track(ObjectId id, uint64_t bytes, const TrackHints& hints) override;
  void Touch(ObjectId id, const AccessContext& context) override;
  void Remove(ObjectId id) override;
  void SetPinned(ObjectId id, bool pinned) override;
  std::optional<ObjectId> PickVictim() const override { return order_.Front(); }
  size_t size() const override { return entries_.size(); }
  uint64_t tracked_bytes() const override { return bytes_; }
  std::string Persist() const override;
  Status Recover(std::string_view blob) override;

 protected:
  explicit ListPolicy(bool touch_moves) : touch_moves_(touch_moves) {}
  uint64_t EvictOne(ObjectId victim) override;

 private:
  struct Entry {
    uint64_t bytes = 0;
    bool pinned = false;
  };
  const bool touch_moves_;
  RecencyList order_;  // unpinned tracked ids, victim first
  std::unordered_map<ObjectId, Entry> entries_;
  std::unordered_set<ObjectId> pinned_untracked_;  // pinned before Track()
  uint64_t bytes_ = 0;
};

}  // namespace kvfs::eviction
