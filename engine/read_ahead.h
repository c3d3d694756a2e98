// SegmentReadAhead: the engine's ChunkReader. It serves FUSE READs of one open published file
// from whole verified segments kept in a small window, and when the file is read sequentially
// keeps the next segments' O_DIRECT reads in flight on its own io_uring, so each 1 MiB READ
// finds its segment read (or at least started) instead of waiting for a fresh device round trip.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "engine_context.h"
#include "kvfs/chunk_reader.h"
#include "kvfs/object.h"
#include "read_ahead_pool.h"

namespace kvfs {

class SegmentReadAhead final : public ChunkReader {
 public:
  // `depth`: segments kept in flight ahead of a sequential reader (the window holds depth + 2).
  SegmentReadAhead(std::shared_ptr<EngineContext> ctx, LayoutRef layout,
                   std::shared_ptr<ReadAheadPool> pool, uint32_t depth);
  ~SegmentReadAhead() override;

  // A corrupt segment is reported to the engine (EngineContext::ReportCorruption), which drops
  // the record; the read fails with that Corruption status.
  Result<ReadView> Read(uint64_t offset, size_t len) override;
  // Starts the device reads of up to depth_ segments of the range, within the window and the
  // pool's budget; the first Read finds them in flight (a hit, not a miss).
  void Prefetch(uint64_t offset, size_t len) override;

 private:
  Result<ReadView> ReadLocked(uint64_t offset, size_t len);
  struct Slot;
  Slot* Find(uint64_t segment);
  // A slot to read into: unused, behind the reader [first, last] or new while the window has
  // room; for a `demand` read also the read-ahead slot furthest ahead. Null when every
  // candidate is in flight.
  Slot* Claim(uint64_t first, uint64_t last, bool demand);
  Slot* AddSlot();
  Slot* Prepare(Slot* pick);  // resets a claimed slot for a new segment
  // Submits the device read (holes: ready at once). Without a ring (io_uring refused one) a
  // `demand` read is done at once through the engine's per-thread ring instead.
  Status Start(uint64_t segment, Slot* slot, bool demand);
  // Starts the reads of segments [from, to] not in the window yet, while the budget and the
  // window (for a request [first, last], see Claim) allow; stops at the first that fails.
  void StartAhead(uint64_t from, uint64_t to, uint64_t first, uint64_t last);
  Status WaitFor(Slot* slot);                // reaps until `slot` completed
  void Complete(uint64_t token, Status st);  // verifies and decodes a finished read
  Status EnsureRing();

  const std::shared_ptr<EngineContext> ctx_;
  const LayoutRef layout_;
  const std::shared_ptr<ReadAheadPool> pool_;
  const uint32_t depth_;
  const uint32_t seg_size_;

  std::mutex mu_;
  std::unique_ptr<IoRing> ring_;  // taken from the pool at the first read
  std::vector<std::unique_ptr<Slot>> slots_;
  uint64_t next_expected_ = 0;  // segment after the last one asked for
  uint32_t sequential_ = 0;     // consecutive reads that continued the previous one
  uint64_t buffered_ = 0;       // this reader's share of pool_->buffered_bytes
};

}  // namespace kvfs
