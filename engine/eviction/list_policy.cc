#include "list_policy.h"

#include <string>

#include "policy_blob.h"

namespace kvfs::eviction {

void ListPolicy::Track(ObjectId id, uint64_t bytes, const TrackHints&) {
  auto it = entries_.find(id);
  if (it != entries_.end()) {
    // A republish is a new version: it is as recent as a new insert, in both LRU and FIFO.
    bytes_ = bytes_ - it->second.bytes + bytes;
    it->second.bytes = bytes;
    if (!it->second.pinned) order_.MoveToBack(id);
    return;
  }
  Entry e{bytes, pinned_untracked_.erase(id) > 0};
  entries_.emplace(id, e);
  bytes_ += bytes;
  if (!e.pinned) order_.PushBack(id);
}

void ListPolicy::Touch(ObjectId id, const AccessContext&) {
  if (touch_moves_) order_.MoveToBack(id);  // no-op for unknown or pinned ids
}

void ListPolicy::Remove(ObjectId id) {
  pinned_untracked_.erase(id);
  auto it = entries_.find(id);
  if (it == entries_.end()) return;
  bytes_ -= it->second.bytes;
  order_.Erase(id);
  entries_.erase(it);
}

void ListPolicy::SetPinned(ObjectId id, bool pinned) {
  auto it = entries_.find(id);
  if (it == entries_.end()) {
    if (pinned)
      pinned_untracked_.insert(id);
    else
      pinned_untracked_.erase(id);
    return;
  }
  if (it->second.pinned == pinned) return;
  it->second.pinned = pinned;
  if (pinned)
    order_.Erase(id);
  else
    order_.PushBack(id);
}

uint64_t ListPolicy::EvictOne(ObjectId victim) {
  auto it = entries_.find(victim);
  if (it == entries_.end()) return 0;
  uint64_t bytes = it->second.bytes;
  Remove(victim);
  return bytes;
}

std::string ListPolicy::Persist() const {
  // Unpinned ids in eviction order, then pinned ones (their order is irrelevant).
  BlobWriter w;
  w.U64(order_.size());
  for (ObjectId id : order_) {
    w.U64(id);
    w.U64(entries_.at(id).bytes);
  }
  std::vector<std::pair<ObjectId, uint64_t>> pinned;
  for (const auto& [id, e] : entries_) {
    if (e.pinned) pinned.emplace_back(id, e.bytes);
  }
  w.U64(pinned.size());
  for (auto [id, bytes] : pinned) {
    w.U64(id);
    w.U64(bytes);
  }
  w.U64(pinned_untracked_.size());
  for (ObjectId id : pinned_untracked_) w.U64(id);
  return SealPolicyBlob(name(), w.bytes());
}

Status ListPolicy::Recover(std::string_view blob) {
  KVFS_ASSIGN_OR_RETURN(std::string_view payload, OpenPolicyBlob(blob, name()));
  BlobReader r(payload);
  RecencyList order;
  std::unordered_map<ObjectId, Entry> entries;
  std::unordered_set<ObjectId> pinned_untracked;
  uint64_t total = 0;
  for (int pass = 0; pass < 2; ++pass) {
    uint64_t n;
    if (!r.U64(&n)) return Status::Corruption("list policy blob truncated");
    for (uint64_t i = 0; i < n; ++i) {
      uint64_t id, bytes;
      if (!r.U64(&id) || !r.U64(&bytes)) return Status::Corruption("list policy blob truncated");
      if (id == kInvalidId || entries.count(id)) return Status::Corruption("bad id in blob");
      entries[id] = Entry{bytes, pass == 1};
      if (pass == 0) order.PushBack(id);
      total += bytes;
    }
  }
  uint64_t n;
  if (!r.U64(&n)) return Status::Corruption("list policy blob truncated");
  for (uint64_t i = 0; i < n; ++i) {
    uint64_t id;
    if (!r.U64(&id)) return Status::Corruption("list policy blob truncated");
    pinned_untracked.insert(id);
  }
  if (!r.done()) return Status::Corruption("trailing bytes in list policy blob");
  order_ = std::move(order);
  entries_ = std::move(entries);
  pinned_untracked_ = std::move(pinned_untracked);
  bytes_ = total;
  return Status::Ok();
}

}  // namespace kvfs::eviction
