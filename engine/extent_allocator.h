// ExtentAllocator: free space of one device in 4 KiB units, as a map of free extents that
// coalesce on free. It is never persisted: at open the engine rebuilds it by reserving every
// extent named by a recovered layout (DESIGN.md §5).
#pragma once

#include <cstdint>
#include <map>

#include "kvfs/status.h"

namespace kvfs {

class ExtentAllocator {
 public:
  static constexpr uint64_t kUnit = 4096;

  // Manages [begin, end) bytes; both must be multiples of kUnit.
  ExtentAllocator(uint64_t begin, uint64_t end);

  // First fit: the lowest free extent of at least `bytes` (rounded up to kUnit). ENOSPC if none.
  Result<uint64_t> Allocate(uint64_t bytes);
  // Returns an extent; EINVAL if it is not wholly allocated (a double free or a bad range).
  Status Free(uint64_t offset, uint64_t bytes);
  // Marks a specific extent used (recovery). EINVAL if any part is already used or out of range.
  Status Reserve(uint64_t offset, uint64_t bytes);

  uint64_t capacity_bytes() const { return end_ - begin_; }
  uint64_t free_bytes() const { return free_bytes_; }
  uint64_t largest_free_extent() const;
  size_t free_extent_count() const { return free_.size(); }

 private:
  static uint64_t RoundUp(uint64_t bytes) { return (bytes + kUnit - 1) / kUnit * kUnit; }

  uint64_t begin_, end_;
  uint64_t free_bytes_ = 0;
  std::map<uint64_t, uint64_t> free_;  // offset -> length, non-overlapping, never adjacent
};

}  // namespace kvfs
