#include "io_buffer_slabs.h"

#include <sys/mman.h>

#include <algorithm>

namespace kvfs {
namespace {

size_t RoundUp(size_t n, size_t to) { return (n + to - 1) / to * to; }

}  // namespace

IoBufferSlabs::IoBufferSlabs(size_t buffer_bytes)
    : buffer_bytes_(RoundUp(std::max<size_t>(buffer_bytes, 1), 4096)),
      slab_bytes_(RoundUp(buffer_bytes_, kHugePage)),
      per_slab_(static_cast<uint32_t>(slab_bytes_ / buffer_bytes_)) {}

IoBufferSlabs::~IoBufferSlabs() {
  for (auto& [base, slab] : slabs_) munmap(base, slab_bytes_);
}

uint8_t* IoBufferSlabs::MapSlab() {
  // Map one huge page more than needed and keep the 2 MiB-aligned part: THP backs only
  // aligned 2 MiB ranges.
  const size_t len = slab_bytes_ + kHugePage;
  void* p = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return nullptr;
  auto* raw = static_cast<uint8_t*>(p);
  auto* base = reinterpret_cast<uint8_t*>(RoundUp(reinterpret_cast<uintptr_t>(raw), kHugePage));
  if (base > raw) munmap(raw, static_cast<size_t>(base - raw));
  uint8_t* end = base + slab_bytes_;
  if (raw + len > end) munmap(end, static_cast<size_t>(raw + len - end));
  // Advice only: without THP ("never", or no memory to compact) the slab is 4 KiB pages.
  madvise(base, slab_bytes_, MADV_HUGEPAGE);
  return base;
}

uint8_t* IoBufferSlabs::Allocate() {
  std::lock_guard lock(mu_);
  if (free_.empty()) {
    uint8_t* base = MapSlab();
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
                                    ~uintptr_t{kHugePage - 1});
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
  munmap(base, slab_bytes_);
  slabs_.erase(it);
}

size_t IoBufferSlabs::mapped_slabs() const {
  std::lock_guard lock(mu_);
  return slabs_.size();
}

}  // namespace kvfs
