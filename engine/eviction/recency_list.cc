#include "recency_list.h"

namespace kvfs::eviction {

void RecencyList::PushBack(ObjectId id) {
  order_.push_back(id);
  pos_[id] = std::prev(order_.end());
}

void RecencyList::InsertBefore(ObjectId id, ObjectId anchor) {
  auto it = pos_.find(anchor);
  if (it == pos_.end()) {
    PushBack(id);
    return;
  }
  pos_[id] = order_.insert(it->second, id);
}

void RecencyList::MoveToBack(ObjectId id) {
  auto it = pos_.find(id);
  if (it == pos_.end()) return;
  order_.splice(order_.end(), order_, it->second);
}

bool RecencyList::Erase(ObjectId id) {
  auto it = pos_.find(id);
  if (it == pos_.end()) return false;
  order_.erase(it->second);
  pos_.erase(it);
  return true;
}

std::optional<ObjectId> RecencyList::Front() const {
  if (order_.empty()) return std::nullopt;
  return order_.front();
}

std::optional<ObjectId> RecencyList::PopFront() {
  if (order_.empty()) return std::nullopt;
  ObjectId id = order_.front();
  Erase(id);
  return id;
}

void RecencyList::Clear() {
  order_.clear();
  pos_.clear();
}

}  // namespace kvfs::eviction
