// EngineChunkWriter: stages one new version of a file. Unchanged segments stay where the base
// layout has them (copy-on-write: a base segment is read in only when a write touches it);
// touched segments live in aligned buffers. A segment filled by sequential writes is sealed
// (compressed, checksummed) and written to its device at once, so a streaming writer keeps
// about one segment in memory and Finish() only writes the tail.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <map>
#include <memory>
#include <vector>

#include "engine_context.h"
#include "kvfs/chunk_store.h"
#include "read_ahead_pool.h"

namespace kvfs {

class EngineChunkWriter : public ChunkWriter {
 public:
  // `base` must be null or a layout of this engine. Segment buffers come from `buffers` (the
  // engine's pool, shared with its readers) when given: a small file then costs no allocation
  // of a whole segment and no page faults on fresh memory.
  EngineChunkWriter(std::shared_ptr<EngineContext> ctx, LayoutRef base,
                    std::shared_ptr<ReadAheadPool> buffers = nullptr);
  ~EngineChunkWriter() override;

  Status Write(uint64_t offset, const void* data, size_t len) override;
  Result<size_t> Read(uint64_t offset, void* out, size_t len) override;
  Status Truncate(uint64_t size) override;
  uint64_t size() const override { return size_; }
  bool dirty() const override { return dirty_; }
  Result<LayoutRef> Finish() override;

 private:
  // A segment buffer (buf_bytes_, 4 KiB aligned): the pool's, or the writer's own.
  using Buffer = std::shared_ptr<uint8_t>;

  struct FreeDeleter {
    void operator()(uint8_t* p) const { std::free(p); }
  };
  enum class Kind : uint8_t {
    kHole,      // never written: zeros, no extent
    kBase,      // a segment of base_, shared, not ours to free
    kOwned,     // sealed by this writer, unpublished: its extent is ours
    kDirty,     // in memory
    kInFlight,  // sealed, its device write submitted on window_ and not yet reaped
  };
  struct Slot {
    Kind kind = Kind::kHole;
    Segment seg;
    Buffer buf;
    std::unique_ptr<uint8_t, FreeDeleter> enc;  // lz4 output of an in-flight write
    uint32_t filled = 0;  // bytes from the segment start written contiguously (dirty only)
    // Bytes of buf from its start that hold data or zeros; those past it were never set and
    // read as zeros (zeroed when written around or sealed, not when the buffer is taken: a
    // 4 KiB file does not clear a whole segment).
    uint32_t valid = 0;
    bool overflow = false;  // dirty because the devices were full (EngineContext overflow)
  };

  uint32_t RawLen(size_t index) const;
  uint64_t SegmentCount() const { return (size_ + seg_size_ - 1) / seg_size_; }
  Buffer TakeBuffer();
  void GiveBuffer(Buffer buf);
  Status Load(size_t index);  // makes slot `index` dirty
  // Seals segments. `async`: their writes go out on window_ and complete later (streaming);
  // otherwise Seal waits for them.
  Status Seal(const std::vector<size_t>& indexes, bool async);
  void OnWritten(uint64_t index, Status st);
  // Waits for every in-flight write. A failed one leaves its segment dirty (sealed again later).
  void Drain();
  void Resize(uint64_t new_size);
  // The devices are full while streaming: keeps slots indexes[from..] dirty in memory, within
  // the engine's overflow budget, instead of evicting for them. False when over budget.
  bool KeepInMemory(const std::vector<size_t>& indexes, size_t from);
  void ClearOverflow(Slot& s);
  // Device bytes (at most) that slots indexes[from..] still need.
  uint64_t NeedFrom(const std::vector<size_t>& indexes, size_t from) const;

  std::shared_ptr<EngineContext> ctx_;
  LayoutRef base_;
  const uint32_t seg_size_;
  const uint32_t buf_bytes_;
  uint16_t first_device_;
  uint64_t size_ = 0;
  bool dirty_ = false;
  // A write failed with ENOSPC: at close this version is stored only if it fits without
  // evicting anything (a failed write must not empty the cache for a partial file).
  bool no_evict_ = false;
  // By segment index; only segments the base stores or this writer touched have a slot, so a
  // sparse file (truncate -s 8T) costs nothing for its holes.
  std::map<uint64_t, Slot> slots_;
  std::vector<Buffer> spare_;                                   // reusable segment buffers
  std::vector<std::unique_ptr<uint8_t, FreeDeleter>> scratch_;  // lz4 output buffers, reusable
  std::shared_ptr<ReadAheadPool> buffers_;                      // may be null
  // The streaming writes' own ring: FUSE calls a file from several threads, one at a time, so
  // in-flight writes cannot live on a per-thread ring.
  std::unique_ptr<IoRing> window_;
  bool window_failed_ = false;
};

}  // namespace kvfs
