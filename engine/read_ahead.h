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

namespace kvfs {

struct ReadAheadCounters {
  std::atomic<uint64_t> hits{0};    // segment asked for was ready or already in flight
  std::atomic<uint64_t> misses{0};  // segment had to be read on demand
  std::atomic<uint64_t> wasted{0};  // read ahead, then dropped without being asked for
  // Bytes of window buffers over all readers of the engine, against budget_bytes.
  std::atomic<uint64_t> buffered_bytes{0};
  uint64_t budget_bytes = 256ull << 20;
};

class SegmentReadAhead final : public ChunkReader {
 public:
  // `depth`: segments kept in flight ahead of a sequential reader (the window holds depth + 2).
  SegmentReadAhead(std::shared_ptr<EngineContext> ctx, LayoutRef layout,
                   std::shared_ptr<ReadAheadCounters> counters, uint32_t depth);
  ~SegmentReadAhead() override;

  // A corrupt segment is reported to the engine (EngineContext::ReportCorruption), which drops
  // the record; the read fails with that Corruption status.
  Result<ReadView> Read(uint64_t offset, size_t len) override;

 private:
  Result<ReadView> ReadLocked(uint64_t offset, size_t len);
  struct Slot;
  Slot* Find(uint64_t segment);
  // A slot to read into: unused, behind the reader [first, last] or new while the window has
  // room; for a `demand` read also the read-ahead slot furthest ahead. Null when every
  // candidate is in flight.
  Slot* Claim(uint64_t first, uint64_t last, bool demand);
  Status Start(uint64_t segment, Slot* slot);  // submits the device read (holes: ready at once)
  Status WaitFor(Slot* slot);                  // reaps until `slot` completed
  void Complete(uint64_t token, Status st);    // verifies and decodes a finished read
  Status EnsureRing();

  const std::shared_ptr<EngineContext> ctx_;
  const LayoutRef layout_;
  const std::shared_ptr<ReadAheadCounters> counters_;
  const uint32_t depth_;
  const uint32_t seg_size_;

  std::mutex mu_;
  std::unique_ptr<IoRing> ring_;  // created at the first read ahead
  std::vector<std::unique_ptr<Slot>> slots_;
  uint64_t next_expected_ = 0;  // segment after the last one asked for
  uint32_t sequential_ = 0;     // consecutive reads that continued the previous one
  uint64_t buffered_ = 0;       // this reader's share of counters_->buffered_bytes
};

}  // namespace kvfs
