#include "belady_oracle.h"

#include "policy_blob.h"

namespace kvfs::eviction {

BeladyOracle::BeladyOracle(std::vector<ObjectId> references) : refs_(std::move(references)) {
  next_use_.assign(refs_.size(), kNever);
  std::unordered_map<ObjectId, uint64_t> seen_at;
  for (size_t i = refs_.size(); i-- > 0;) {
    auto [it, inserted] = seen_at.try_emplace(refs_[i], i);
    if (!inserted) {
      next_use_[i] = it->second;
      it->second = i;
    }
  }
}

void BeladyOracle::Reference(ObjectId id, const uint64_t* bytes) {
  uint64_t next = kNever;
  if (cursor_ < refs_.size() && refs_[cursor_] == id) {
    next = next_use_[cursor_++];
  } else {
    ++mismatches_;
  }
  auto it = entries_.find(id);
  if (it == entries_.end()) {
    if (!bytes) return;  // a read of an id we do not hold: nothing to update
    it = entries_.emplace(id, Entry{*bytes, next}).first;
    bytes_ += *bytes;
  } else {
    order_.erase({it->second.next, id});
    if (bytes) {
      bytes_ = bytes_ - it->second.bytes + *bytes;
      it->second.bytes = *bytes;
    }
    it->second.next = next;
  }
  if (!pinned_.count(id)) order_.insert({next, id});
}

void BeladyOracle::Track(ObjectId id, uint64_t bytes, const TrackHints&) { Reference(id, &bytes); }
void BeladyOracle::Touch(ObjectId id, const AccessContext&) { Reference(id, nullptr); }

void BeladyOracle::Remove(ObjectId id) {
  auto it = entries_.find(id);
  if (it == entries_.end()) return;
  order_.erase({it->second.next, id});
  bytes_ -= it->second.bytes;
  entries_.erase(it);
}

void BeladyOracle::SetPinned(ObjectId id, bool pinned) {
  auto it = entries_.find(id);
  if (pinned) {
    pinned_.insert(id);
    if (it != entries_.end()) order_.erase({it->second.next, id});
  } else if (pinned_.erase(id) && it != entries_.end()) {
    order_.insert({it->second.next, id});
  }
}

std::optional<ObjectId> BeladyOracle::PickVictim() const {
  if (order_.empty()) return std::nullopt;
  return order_.rbegin()->second;
}

uint64_t BeladyOracle::EvictOne(ObjectId victim) {
  auto it = entries_.find(victim);
  if (it == entries_.end()) return 0;
  uint64_t bytes = it->second.bytes;
  Remove(victim);
  return bytes;
}

std::string BeladyOracle::Persist() const { return SealPolicyBlob(name(), {}); }

Status BeladyOracle::Recover(std::string_view) {
  return Status::Error(ENOTSUP, "the offline optimum has no persistent state");
}

}  // namespace kvfs::eviction
