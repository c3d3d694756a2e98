#include "lfu_policy.h"

#include <string>

#include "policy_blob.h"

namespace kvfs::eviction {

void LfuPolicy::Place(ObjectId id, Entry& e) {
  e.priority = aging_ * floor_ + static_cast<double>(e.freq);
  e.last_use = ++clock_;
  if (!e.pinned) order_.insert(KeyOf(id, e));
}

void LfuPolicy::Track(ObjectId id, uint64_t bytes, const TrackHints&) {
  auto it = entries_.find(id);
  if (it != entries_.end()) {
    // A republish counts as a use of the same block.
    Entry& e = it->second;
    if (!e.pinned) order_.erase(KeyOf(id, e));
    bytes_ = bytes_ - e.bytes + bytes;
    e.bytes = bytes;
    ++e.freq;
    Place(id, e);
    return;
  }
  Entry e;
  e.bytes = bytes;
  e.freq = 1;
  e.pinned = pinned_untracked_.erase(id) > 0;
  bytes_ += bytes;
  Place(id, entries_[id] = e);
}

void LfuPolicy::Touch(ObjectId id, const AccessContext&) {
  auto it = entries_.find(id);
  if (it == entries_.end()) return;
  Entry& e = it->second;
  if (!e.pinned) order_.erase(KeyOf(id, e));
  ++e.freq;
  Place(id, e);
}

void LfuPolicy::Remove(ObjectId id) {
  pinned_untracked_.erase(id);
  auto it = entries_.find(id);
  if (it == entries_.end()) return;
  if (!it->second.pinned) order_.erase(KeyOf(id, it->second));
  bytes_ -= it->second.bytes;
  entries_.erase(it);
}

void LfuPolicy::SetPinned(ObjectId id, bool pinned) {
  auto it = entries_.find(id);
  if (it == entries_.end()) {
    if (pinned)
      pinned_untracked_.insert(id);
    else
      pinned_untracked_.erase(id);
    return;
  }
  Entry& e = it->second;
  if (e.pinned == pinned) return;
  if (pinned)
    order_.erase(KeyOf(id, e));
  else
    order_.insert(KeyOf(id, e));
  e.pinned = pinned;
}

std::optional<ObjectId> LfuPolicy::PickVictim() const {
  if (order_.empty()) return std::nullopt;
  return std::get<2>(*order_.begin());
}

uint64_t LfuPolicy::EvictOne(ObjectId victim) {
  auto it = entries_.find(victim);
  if (it == entries_.end()) return 0;
  floor_ = it->second.priority;  // aging: everything placed from now on starts here
  uint64_t bytes = it->second.bytes;
  Remove(victim);
  return bytes;
}

uint64_t LfuPolicy::frequency(ObjectId id) const {
  auto it = entries_.find(id);
  return it == entries_.end() ? 0 : it->second.freq;
}

std::string LfuPolicy::Persist() const {
  BlobWriter w;
  w.F64(floor_);
  w.U64(clock_);
  w.U64(entries_.size());
  for (const auto& [id, e] : entries_) {
    w.U64(id);
    w.U64(e.bytes);
    w.U64(e.freq);
    w.F64(e.priority);
    w.U64(e.last_use);
    w.U8(e.pinned ? 1 : 0);
  }
  w.U64(pinned_untracked_.size());
  for (ObjectId id : pinned_untracked_) w.U64(id);
  return SealPolicyBlob(name(), w.bytes());
}

Status LfuPolicy::Recover(std::string_view blob) {
  KVFS_ASSIGN_OR_RETURN(std::string_view payload, OpenPolicyBlob(blob, name()));
  BlobReader r(payload);
  double floor;
  uint64_t clock, n;
  if (!r.F64(&floor) || !r.U64(&clock) || !r.U64(&n)) return Status::Corruption("lfu blob");
  std::set<Key> order;
  std::unordered_map<ObjectId, Entry> entries;
  uint64_t total = 0;
  for (uint64_t i = 0; i < n; ++i) {
    uint64_t id;
    Entry e;
    uint8_t pinned;
    if (!r.U64(&id) || !r.U64(&e.bytes) || !r.U64(&e.freq) || !r.F64(&e.priority) ||
        !r.U64(&e.last_use) || !r.U8(&pinned) || pinned > 1) {
      return Status::Corruption("lfu blob entry");
    }
    if (id == kInvalidId || entries.count(id)) return Status::Corruption("lfu blob bad id");
    e.pinned = pinned;
    if (!e.pinned) order.insert(KeyOf(id, e));
    total += e.bytes;
    entries[id] = e;
  }
  std::unordered_set<ObjectId> pinned_untracked;
  if (!r.U64(&n)) return Status::Corruption("lfu blob truncated");
  for (uint64_t i = 0; i < n; ++i) {
    uint64_t id;
    if (!r.U64(&id)) return Status::Corruption("lfu blob truncated");
    pinned_untracked.insert(id);
  }
  if (!r.done()) return Status::Corruption("trailing bytes in lfu blob");
  floor_ = floor;
  clock_ = clock;
  order_ = std::move(order);
  entries_ = std::move(entries);
  pinned_untracked_ = std::move(pinned_untracked);
  bytes_ = total;
  return Status::Ok();
}

}  // namespace kvfs::eviction
