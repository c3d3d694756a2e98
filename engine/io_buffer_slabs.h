// IoBufferSlabs: segment-sized O_DIRECT buffers carved out of 2 MiB slabs of transparent huge
// pages (kvfs/huge_pages.h says why), so that a whole-segment read or write is one physical
// segment for the block layer. Several buffers share a slab when they fit in one huge page;
// freed buffers are reused before a new slab is mapped, and a slab goes back to the kernel with
// its last buffer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "kvfs/huge_pages.h"

namespace kvfs {

class IoBufferSlabs {
 public:
  // Every buffer is `buffer_bytes` (a multiple of 4 KiB), 4 KiB aligned. A slab is 2 MiB or
  // `buffer_bytes` rounded up to 2 MiB, and holds slab / buffer_bytes buffers.
  explicit IoBufferSlabs(size_t buffer_bytes);
  ~IoBufferSlabs();  // unmaps every slab: no buffer may be in use any more
  IoBufferSlabs(const IoBufferSlabs&) = delete;
  IoBufferSlabs& operator=(const IoBufferSlabs&) = delete;

  // A free buffer, or nullptr when no memory could be mapped.
  uint8_t* Allocate();
  // Gives back a buffer Allocate returned; its slab is unmapped once all of its buffers are.
  void Free(uint8_t* buffer);

  size_t buffer_bytes() const { return buffer_bytes_; }
  size_t slab_bytes() const { return slab_bytes_; }
  size_t mapped_slabs() const;

 private:
  struct Slab {
    uint32_t in_use = 0;
  };
  uint8_t* SlabOf(uint8_t* buffer) const;  // the base address of the slab holding `buffer`

  const size_t buffer_bytes_;
  const size_t slab_bytes_;
  const uint32_t per_slab_;
  mutable std::mutex mu_;
  std::unordered_map<uint8_t*, Slab> slabs_;  // by base address
  std::vector<uint8_t*> free_;                // free buffers of mapped slabs
};

}  // namespace kvfs
