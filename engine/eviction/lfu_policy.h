// LfuPolicy: least-frequently-used with dynamic aging (LFU-DA). An id's priority is
// aging * L + (its hit count), where L is the priority of the last victim: new ids start at the
// current L, so blocks that were hot long ago cannot squat forever (plain LFU's failure). Ties
// go to the least recently used.
#pragma once

#include <set>
#include <tuple>
#include <unordered_map>
#include <unordered_set>

#include "eviction_policy.h"

namespace kvfs::eviction {

class LfuPolicy final : public EvictionPolicy {
 public:
  explicit LfuPolicy(double aging = 1.0) : aging_(aging) {}
  std::string_view name() const override { return "lfu"; }
  void Track(ObjectId id, uint64_t bytes, const TrackHints& hints) override;
  void Touch(ObjectId id, const AccessContext& context) override;
  void Remove(ObjectId id) override;
  void SetPinned(ObjectId id, bool pinned) override;
  std::optional<ObjectId> PickVictim() const override;
  size_t size() const override { return entries_.size(); }
  uint64_t tracked_bytes() const override { return bytes_; }
  std::string Persist() const override;
  Status Recover(std::string_view blob) override;

  uint64_t frequency(ObjectId id) const;  // 0 for unknown ids (tests)

 protected:
  uint64_t EvictOne(ObjectId victim) override;

 private:
  using Key = std::tuple<double, uint64_t, ObjectId>;  // priority, last use, id
  struct Entry {
    uint64_t bytes = 0;
    uint64_t freq = 0;
    double priority = 0;
    uint64_t last_use = 0;
    bool pinned = false;
  };
  void Place(ObjectId id, Entry& e);
  Key KeyOf(ObjectId id, const Entry& e) const { return {e.priority, e.last_use, id}; }

  double aging_;
  double floor_ = 0;  // L: priority of the last victim
  uint64_t clock_ = 0;
  std::set<Key> order_;  // unpinned ids
  std::unordered_map<ObjectId, Entry> entries_;
  std::unordered_set<ObjectId> pinned_untracked_;
  uint64_t bytes_ = 0;
};

}  // namespace kvfs::eviction
