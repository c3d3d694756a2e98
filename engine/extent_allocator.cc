#include "extent_allocator.h"

#include <algorithm>
#include <string>

namespace kvfs {

ExtentAllocator::ExtentAllocator(uint64_t begin, uint64_t end) : begin_(begin), end_(end) {
  if (end_ > begin_) {
    free_[begin_] = end_ - begin_;
    free_bytes_ = end_ - begin_;
  }
}

Result<uint64_t> ExtentAllocator::Allocate(uint64_t bytes) {
  const uint64_t need = RoundUp(std::max<uint64_t>(bytes, 1));
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    if (it->second < need) continue;
    const uint64_t offset = it->first;
    const uint64_t rest = it->second - need;
    free_.erase(it);
    if (rest > 0) free_[offset + need] = rest;
    free_bytes_ -= need;
    return offset;
  }
  return Status::NoSpace("no free extent of " + std::to_string(need) + " bytes (" +
                         std::to_string(free_bytes_) + " bytes free in " +
                         std::to_string(free_.size()) + " extents)");
}

Status ExtentAllocator::Free(uint64_t offset, uint64_t bytes) {
  const uint64_t len = RoundUp(std::max<uint64_t>(bytes, 1));
  if (offset % kUnit != 0 || offset < begin_ || offset + len > end_ || offset + len < offset) {
    return Status::Invalid("free of an extent outside the device: " + std::to_string(offset));
  }
  auto next = free_.lower_bound(offset);
  if (next != free_.end() && next->first < offset + len) {
    return Status::Invalid("double free of extent at " + std::to_string(offset));
  }
  auto prev = next == free_.begin() ? free_.end() : std::prev(next);
  if (prev != free_.end() && prev->first + prev->second > offset) {
    return Status::Invalid("double free of extent at " + std::to_string(offset));
  }
  uint64_t start = offset, length = len;
  if (prev != free_.end() && prev->first + prev->second == offset) {
    start = prev->first;
    length += prev->second;
    free_.erase(prev);
  }
  if (next != free_.end() && next->first == offset + len) {
    length += next->second;
    free_.erase(next);
  }
  free_[start] = length;
  free_bytes_ += len;
  return Status::Ok();
}

Status ExtentAllocator::Reserve(uint64_t offset, uint64_t bytes) {
  const uint64_t len = RoundUp(std::max<uint64_t>(bytes, 1));
  auto it = free_.upper_bound(offset);
  if (it == free_.begin()) {
    return Status::Invalid("extent at " + std::to_string(offset) + " is not free");
  }
  --it;
  const uint64_t fstart = it->first, flen = it->second;
  if (offset % kUnit != 0 || offset + len > fstart + flen || offset + len < offset) {
    return Status::Invalid("extent at " + std::to_string(offset) + " is not free");
  }
  free_.erase(it);
  if (offset > fstart) free_[fstart] = offset - fstart;
  if (fstart + flen > offset + len) free_[offset + len] = fstart + flen - (offset + len);
  free_bytes_ -= len;
  return Status::Ok();
}

uint64_t ExtentAllocator::largest_free_extent() const {
  uint64_t best = 0;
  for (const auto& [off, len] : free_) best = std::max(best, len);
  return best;
}

}  // namespace kvfs
