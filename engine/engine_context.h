// EngineContext: what the engine and its writers share: options, devices, free space, the
// per-thread rings and the counters. Writers hold it by shared_ptr, so a writer that outlives
// its engine fails cleanly (ESHUTDOWN) instead of touching closed devices.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "device.h"
#include "device_space.h"
#include "io_fault_injector.h"
#include "io_ring.h"
#include "kvfs/local_engine.h"
#include "kvfs/status.h"

namespace kvfs {

struct EngineCounters {
  std::atomic<uint64_t> reads{0}, writes{0}, bytes_read{0}, bytes_written{0};
  std::atomic<uint64_t> checksum_failures{0}, evictions{0};
};

// Part of one segment wanted by a read: raw bytes [from, from + len) into out.
struct SegmentRead {
  const Segment* seg = nullptr;
  uint32_t from = 0;
  uint32_t len = 0;
  uint8_t* out = nullptr;
  // A whole segment stored raw, going to a peer with seg->checksum: copied out unchecked, the
  // receiver's check is the only one (ChunkStore::ReadForPeer). Only for WholeRaw() reads.
  bool peer_checks = false;

  // The whole segment, stored as its raw bytes: what the device holds is what the caller wants.
  bool WholeRaw() const {
    return seg->codec == Codec::kNone && from == 0 && len == seg->raw_len &&
           seg->stored_len == seg->raw_len;
  }
};

// One stored payload going to the device (len a multiple of 4 KiB, data 4 KiB aligned).
struct SegmentWrite {
  uint16_t device = 0;
  uint64_t offset = 0;
  const uint8_t* data = nullptr;
  uint32_t len = 0;
};

class EngineContext {
 public:
  EngineContext(EngineOptions options, std::vector<std::unique_ptr<Device>> devices);
  ~EngineContext();

  const EngineOptions& options() const { return options_; }
  uint32_t segment_size() const { return options_.segment_size; }
  const std::vector<std::unique_ptr<Device>>& devices() const { return devices_; }
  DeviceSpace& space() { return *space_; }
  const std::shared_ptr<DeviceSpace>& space_ptr() const { return space_; }
  EngineCounters& counters() { return counters_; }

  // Reads (verifying every checksum) and writes segments through this thread's ring.
  Status ReadSegments(const std::vector<SegmentRead>& reads);
  // Every stored segment read from a device goes through here: SegmentCodec::Open (verify,
  // decode lz4 into `decode_buf`), and a corruption is counted and logged once.
  Result<const uint8_t*> OpenSegment(const Segment& seg, const uint8_t* stored,
                                     uint8_t* decode_buf);

  // Readers that find corrupt stored bytes report the version here; the engine drops its
  // record (the next lookup misses) and tells the fs. Cleared before the engine goes away.
  using CorruptionHandler = std::function<void(const LayoutRef& layout, const Status& why)>;
  void SetCorruptionHandler(CorruptionHandler handler) {
    std::lock_guard lock(corrupt_mu_);
    on_corrupt_ = std::move(handler);
  }
  void ReportCorruption(const LayoutRef& layout, const Status& why) {
    std::lock_guard lock(corrupt_mu_);
    if (on_corrupt_) on_corrupt_(layout, why);
  }
  Status WriteSegments(const std::vector<SegmentWrite>& writes);

  // The device of a new chunk's first segment (round robin), so stripes start evenly.
  uint16_t NextFirstDevice() {
    return static_cast<uint16_t>(next_first_.fetch_add(1) % devices_.size());
  }
  // Devices that received data since the last call (for the committer's fdatasync).
  std::vector<uint16_t> TakeDirtyDevices();

  // For writers that submit on their own ring: the config, and the bookkeeping of a completed
  // device write (the device needs a sync before the next commit).
  const RingConfig& ring_config() const { return ring_config_; }
  void MarkWritten(uint16_t device, uint64_t bytes);
  bool closed() const { return closed_; }

  // Stops all further I/O (the engine is closing); rings of this generation are retired.
  void Close();

  // A writer that found no free extent asks the engine to make room for the `needed` bytes it
  // still has to place (bounded cache) and retries while this returns true. The engine evicts
  // nothing when eviction cannot make that much room (pinned files, other writers) or when
  // `may_evict` is false. Serialised, so concurrent writers do not evict one file each for the
  // same shortfall; the engine clears the hook before it goes away.
  using Reclaimer = std::function<bool(uint64_t needed, bool may_evict)>;
  void SetReclaimer(Reclaimer reclaim) {
    std::lock_guard lock(reclaim_mu_);
    reclaim_ = std::move(reclaim);
  }
  bool Reclaim(uint64_t needed, bool may_evict = true) {
    std::lock_guard lock(reclaim_mu_);
    return reclaim_ && !closed_ && reclaim_(needed, may_evict);
  }

  // Memory a writer may use to keep segments that found the devices full (all writers
  // together, EngineOptions::overflow_bytes): a streaming writer cannot know its final size,
  // so instead of evicting for every segment it keeps them in memory and decides at close,
  // when the size is known, whether eviction can make room at all.
  bool TryReserveOverflow(uint64_t bytes);
  void ReleaseOverflow(uint64_t bytes) { overflow_used_.fetch_sub(bytes); }

 private:
  EngineOptions options_;
  std::vector<std::unique_ptr<Device>> devices_;
  std::shared_ptr<DeviceSpace> space_;
  RingConfig ring_config_;
  std::unique_ptr<std::atomic<bool>[]> dirty_;
  std::atomic<uint32_t> next_first_{0};
  std::atomic<bool> closed_{false};
  EngineCounters counters_;
  std::mutex reclaim_mu_;
  Reclaimer reclaim_;
  std::mutex corrupt_mu_;
  CorruptionHandler on_corrupt_;
  std::atomic<uint64_t> overflow_used_{0};
};

}  // namespace kvfs
