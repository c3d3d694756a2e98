// Index: the in-memory map object id -> record (with its LayoutRef) that the journal and
// checkpoints persist. Applying a batch hands back the layouts it no longer holds, so the
// engine can keep them alive until the journal record that dropped them is durable.
#pragma once

#include <cstdint>
#include <unordered_map>
#include <vector>

#include "kvfs/chunk_store.h"

namespace kvfs {

class Index {
 public:
  // Removes first, then puts (a batch may remove and re-put one id).
  void Apply(const MetaBatch& batch, std::vector<LayoutRef>* dropped);
  void Put(ObjectRecord rec, std::vector<LayoutRef>* dropped);
  std::vector<ObjectRecord> Snapshot() const;
  void Clear(std::vector<LayoutRef>* dropped);

  size_t objects() const { return records_.size(); }
  uint64_t files() const { return files_; }
  uint64_t logical_bytes() const { return logical_bytes_; }
  uint64_t stored_bytes() const { return stored_bytes_; }
  // The id of the record holding this layout, or kInvalidId. A linear scan: only the rare
  // corruption path needs it, so no reverse map is kept on the hot path.
  ObjectId FindByLayout(const Layout* layout) const;
  // The record of `id`, or null (IndexUndo captures the state a batch replaces).
  const ObjectRecord* Find(ObjectId id) const {
    auto it = records_.find(id);
    return it == records_.end() ? nullptr : &it->second;
  }

 private:
  void Account(const ObjectRecord& rec, int sign);
  std::unordered_map<ObjectId, ObjectRecord> records_;
  uint64_t files_ = 0;
  uint64_t logical_bytes_ = 0;
  uint64_t stored_bytes_ = 0;
};

}  // namespace kvfs
