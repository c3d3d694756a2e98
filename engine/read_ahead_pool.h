// ReadAheadPool: what the engine's read-ahead readers share. Opening a file for reading costs
// no allocation: window buffers and io_uring instances come from here and go back when a reader
// (or the last FUSE reply splicing from a buffer) is done with them. It also holds the readers'
// counters and the memory budget over all of them.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "io_buffer_slabs.h"
#include "io_ring.h"

namespace kvfs {

class ReadAheadPool : public std::enable_shared_from_this<ReadAheadPool> {
 public:
  // `buffer_bytes`: every buffer's size (the engine's segment size rounded up to 4 KiB).
  explicit ReadAheadPool(uint32_t buffer_bytes)
      : buffer_bytes_(buffer_bytes), slabs_(std::make_shared<IoBufferSlabs>(buffer_bytes)) {}
  ~ReadAheadPool();
  ReadAheadPool(const ReadAheadPool&) = delete;
  ReadAheadPool& operator=(const ReadAheadPool&) = delete;

  // A 4 KiB-aligned buffer of buffer_bytes() (O_DIRECT target) inside a huge-page slab
  // (io_buffer_slabs.h). It returns to the pool when its last holder lets go, or to the slabs
  // if the pool is gone or holds enough idle ones.
  std::shared_ptr<uint8_t> Buffer();
  // An owned ring on the engine's devices, reused from a reader that finished.
  Result<std::unique_ptr<IoRing>> TakeRing(const RingConfig& config);
  // One buffer of zeros, shared by every hole of every reader; never written.
  std::shared_ptr<uint8_t> Zeros();
  // Gives a ring back; it must have nothing in flight.
  void ReturnRing(std::unique_ptr<IoRing> ring);
  // Frees the idle rings (the engine closes) and takes no more back.
  void DropIdleRings();

  uint32_t buffer_bytes() const { return buffer_bytes_; }
  size_t idle_buffers() const;

  std::atomic<uint64_t> hits{0};    // segment asked for was ready or already in flight
  std::atomic<uint64_t> misses{0};  // segment had to be read on demand
  std::atomic<uint64_t> wasted{0};  // read ahead, then dropped without being asked for
  // Bytes of window buffers over all readers of the engine, against budget_bytes.
  std::atomic<uint64_t> buffered_bytes{0};
  uint64_t budget_bytes = 256ull << 20;

 private:
  void Recycle(uint8_t* buffer);

  // Idle buffers kept for the next readers: enough for a few files' windows, not the budget
  // (memory a quiet daemon holds for nothing).
  static constexpr uint64_t kIdleBufferBytes = 32ull << 20;
  static constexpr size_t kIdleRings = 16;

  const uint32_t buffer_bytes_;
  // Shared with every buffer handed out: a reply may still splice from one after the pool
  // (and the engine) is gone.
  const std::shared_ptr<IoBufferSlabs> slabs_;
  mutable std::mutex mu_;
  std::vector<uint8_t*> idle_buffers_;
  std::vector<std::unique_ptr<IoRing>> idle_rings_;
  std::shared_ptr<uint8_t> zeros_;
  bool rings_closed_ = false;
};

}  // namespace kvfs
