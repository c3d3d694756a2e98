// IoBufferSlabs: segment-sized O_DIRECT buffers carved out of 2 MiB slabs that ask for
// transparent huge pages (madvise(MADV_HUGEPAGE)).
//
// Why: a buffer from malloc is physically 4 KiB pages scattered over memory, so a 1 MiB
// O_DIRECT read or write into it is 256 segments in the block layer. A queue with fewer
// (virtio-blk here: max_segments 254) splits every such request in two and, with the ring
// full of descriptors, keeps about one request in flight: the engine's read-ahead at depth 8
// measured like depth 1 (24 x 32 MiB cold reads through the mount: 0.94-1.06 GB/s with malloc
// buffers, 1.16-1.22 GB/s from huge-page slabs; docs/fs.md "Read path"). A buffer inside one
// huge page is one physical segment. Where THP is off ("never") the slabs are ordinary pages
// and everything works as before.
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace kvfs {

class IoBufferSlabs {
 public:
  static constexpr size_t kHugePage = 2u << 20;

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
  uint8_t* MapSlab();  // 2 MiB aligned, MADV_HUGEPAGE asked for; nullptr on failure
  uint8_t* SlabOf(uint8_t* buffer) const;  // the base address of the slab holding `buffer`

  const size_t buffer_bytes_;
  const size_t slab_bytes_;
  const uint32_t per_slab_;
  mutable std::mutex mu_;
  std::unordered_map<uint8_t*, Slab> slabs_;  // by base address
  std::vector<uint8_t*> free_;                // free buffers of mapped slabs
};

}  // namespace kvfs
