// MemoryStore: a ChunkStore that keeps everything in memory and persists nothing. It exists so
// the fs layer can be tested on its own; the daemon always runs the LocalEngine.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "kvfs/chunk_store.h"

namespace kvfs {

class MemoryStore : public ChunkStore {
 public:
  std::vector<ObjectRecord> Records() const override;
  ObjectId NewId() override { return next_id_.fetch_add(1); }
  Status Apply(const MetaBatch& batch) override;
  Result<std::unique_ptr<ChunkWriter>> NewWriter(LayoutRef base) override;
  Result<size_t> Read(const LayoutRef& layout, uint64_t offset, void* out, size_t len) override;
  Result<std::unique_ptr<ChunkReader>> NewReader(LayoutRef layout) override;
  Result<uint64_t> ContentChecksum(const LayoutRef& layout) const override;
  StoreStats Stats() const override;
  Status Sync() override { return Status::Ok(); }

 private:
  mutable std::mutex mu_;
  std::map<ObjectId, ObjectRecord> records_;
  std::atomic<ObjectId> next_id_{kRootId + 1};
};

// The bytes of a MemoryStore layout live beside it: a Layout subclass would be sliced by
// copies, so the store keeps the data in a derived object reachable through the LayoutRef.
struct MemoryLayout : Layout {
  std::string data;
};

}  // namespace kvfs
