#include "io_buffer_slabs.h"

#include <algorithm>

namespace kvfs {
namespace {

size_t RoundUp(size_t n, size_t to) { return (n + to - 1) / to * to; }

}  // namespace

IoBufferSlabs::IoBufferSlabs(size_t buffer_bytes)
    : buffer_bytes_(RoundUp(std::max<size_t>(buffer_bytes, 1), 4096)),
      slab_bytes_(RoundUpToHugePage(buffer_bytes_)),
      per_slab_(static_cast<uint32_t>(slab_bytes_ / buffer_bytes_)) {}

IoBufferSlabs::~IoBufferSlabs() {
  for (auto& [base, slab] : slabs_) UnmapHugePages(base, slab_bytes_);
}

uint8_t* IoBufferSlabs::Allocate() {
  std::lock_guard lock(mu_);
  if (free_.empty()) {
    uint8_t* base = MapHugePages(slab_bytes_);
    if (!base) return nullptr;
    slabs_.emplace(base, Slab{});
    // Handed out from the lowest address up (the back of the vector first).
    for (uint32_t i = per_slab_; i-- > 0;) free_.push_back(base + size_t{i} * buffer_bytes_);
  }
  uint8_t* b = free_.back();
  free_.pop_back();
  ++slabs_.at(SlabOf(b)).in_use;
  return b;
}

uint8_t* IoBufferSlabs::SlabOf(uint8_t* buffer) const {
  // A slab of several buffers is one huge page; a larger one holds a single buffer.
  if (per_slab_ == 1) return buffer;
  return reinterpret_cast<uint8_t*>(reinterpret_cast<uintptr_t>(buffer) &
                                    ~uintptr_t{kHugePageBytes - 1});
}

void IoBufferSlabs::Free(uint8_t* buffer) {
  if (!buffer) return;
  uint8_t* base = SlabOf(buffer);
  std::lock_guard lock(mu_);
  auto it = slabs_.find(base);
  if (it == slabs_.end()) return;  // not ours: ignore rather than corrupt the free list
  if (--it->second.in_use > 0) {
    free_.push_back(buffer);
    return;
  }
  // The slab's last buffer: its siblings are on the free list; take them off and unmap.
  std::erase_if(free_, [&](uint8_t* b) { return b >= base && b < base + slab_bytes_; });
  UnmapHugePages(base, slab_bytes_);
  slabs_.erase(it);
}

size_t IoBufferSlabs::mapped_slabs() const {
  std::lock_guard lock(mu_);
  return slabs_.size();
}

}  // namespace kvfs
