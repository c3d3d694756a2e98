// An ordered set of ids with O(1) insert at either end or before a member, move and erase:
// front = next victim, back = most recently placed. The building block of the list policies.
#pragma once

#include <cstddef>
#include <list>
#include <optional>
#include <unordered_map>

#include "kvfs/object.h"

namespace kvfs::eviction {

class RecencyList {
 public:
  bool Contains(ObjectId id) const { return pos_.count(id) != 0; }
  size_t size() const { return order_.size(); }
  bool empty() const { return order_.empty(); }

  void PushBack(ObjectId id);  // id must not be a member
  // Places `id` right before `anchor` (so it is evicted first); at the back when `anchor` is not
  // a member.
  void InsertBefore(ObjectId id, ObjectId anchor);
  void MoveToBack(ObjectId id);  // a member
  bool Erase(ObjectId id);
  std::optional<ObjectId> Front() const;
  std::optional<ObjectId> PopFront();
  void Clear();

  // Front to back.
  std::list<ObjectId>::const_iterator begin() const { return order_.begin(); }
  std::list<ObjectId>::const_iterator end() const { return order_.end(); }

 private:
  std::list<ObjectId> order_;
  std::unordered_map<ObjectId, std::list<ObjectId>::iterator> pos_;
};

}  // namespace kvfs::eviction
