// BeladyOracle: the offline optimum (Belady's MIN) for a known reference sequence: evict the id
// whose next reference lies furthest in the future; ids never referenced again go first. It is
// an EvictionPolicy so the same replay loop measures it, but it must see exactly the sequence
// it was built from: every Track() or Touch() consumes the next reference. A call that does not
// match the expected id is treated as an id never used again (the result is then no longer
// optimal; mismatches() counts them so a simulator can assert zero).
#pragma once

#include <cstdint>
#include <set>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "eviction_policy.h"

namespace kvfs::eviction {

class BeladyOracle final : public EvictionPolicy {
 public:
  explicit BeladyOracle(std::vector<ObjectId> references);
  std::string_view name() const override { return "optimum"; }
  void Track(ObjectId id, uint64_t bytes, const TrackHints& hints) override;
  void Touch(ObjectId id, const AccessContext& context) override;
  void Remove(ObjectId id) override;
  void SetPinned(ObjectId id, bool pinned) override;
  std::optional<ObjectId> PickVictim() const override;
  size_t size() const override { return entries_.size(); }
  uint64_t tracked_bytes() const override { return bytes_; }
  // The optimum needs the future; there is no state worth keeping across a restart.
  std::string Persist() const override;
  Status Recover(std::string_view blob) override;

  uint64_t mismatches() const { return mismatches_; }

 protected:
  uint64_t EvictOne(ObjectId victim) override;

 private:
  static constexpr uint64_t kNever = UINT64_MAX;
  void Reference(ObjectId id, const uint64_t* bytes);

  std::vector<ObjectId> refs_;
  std::vector<uint64_t> next_use_;  // for each reference, the index of the id's next one
  size_t cursor_ = 0;
  uint64_t mismatches_ = 0;
  struct Entry {
    uint64_t bytes = 0;
    uint64_t next = kNever;
  };
  std::unordered_map<ObjectId, Entry> entries_;
  std::set<std::pair<uint64_t, ObjectId>> order_;  // (next use, id); victim = last
  std::unordered_set<ObjectId> pinned_;
  uint64_t bytes_ = 0;
};

}  // namespace kvfs::eviction
