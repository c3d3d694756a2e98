// Memory for O_DIRECT buffers in whole transparent huge pages. Header-only: the engine's
// read and write buffers and the peer server's GET buffers both need it.
//
// A buffer from malloc is 4 KiB pages scattered over physical memory, so a 1 MiB O_DIRECT
// request into it is 256 block-layer segments; a queue that takes fewer (virtio-blk: 254)
// splits it, and the device sees about one request at a time. Inside one 2 MiB huge page the
// same request is one segment (docs/read_path.md, "Huge-page buffers").
#pragma once

#include <sys/mman.h>

#include <cstddef>
#include <cstdint>

namespace kvfs {

inline constexpr size_t kHugePageBytes = 2u << 20;

inline size_t RoundUpToHugePage(size_t bytes) {
  return (bytes + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes;
}

// `bytes` (a multiple of kHugePageBytes) of zeroed anonymous memory at a 2 MiB-aligned address,
// with MADV_HUGEPAGE asked for; nullptr when nothing could be mapped. Without THP ("never", or
// no memory to compact) it is ordinary pages and works the same, only without the benefit.
// Give it back with UnmapHugePages(p, bytes).
inline uint8_t* MapHugePages(size_t bytes) {
  // One huge page more than needed, then keep the aligned part: THP backs aligned 2 MiB only.
  const size_t len = bytes + kHugePageBytes;
  void* p = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return nullptr;
  auto* raw = static_cast<uint8_t*>(p);
  const uintptr_t aligned =
      (reinterpret_cast<uintptr_t>(raw) + kHugePageBytes - 1) & ~uintptr_t{kHugePageBytes - 1};
  auto* base = reinterpret_cast<uint8_t*>(aligned);
  if (base > raw) munmap(raw, static_cast<size_t>(base - raw));
  uint8_t* end = base + bytes;
  if (raw + len > end) munmap(end, static_cast<size_t>(raw + len - end));
  madvise(base, bytes, MADV_HUGEPAGE);  // advice: failure leaves ordinary pages
  return base;
}

inline void UnmapHugePages(uint8_t* p, size_t bytes) {
  if (p) munmap(p, bytes);
}

}  // namespace kvfs
