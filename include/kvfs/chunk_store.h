// ChunkStore: what the fs layer needs from storage. The local engine implements it; the cluster
// store (later) implements it over many nodes. Thread-safe: the FUSE loop calls it from many
// threads at once.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kvfs/object.h"
#include "kvfs/status.h"

namespace kvfs {

// A batch of namespace changes persisted atomically (one journal record): e.g. a rename over an
// existing file is {put(moved), remove(replaced)}.
struct MetaBatch {
  std::vector<ObjectRecord> puts;  // insert or replace by id (the full record)
  std::vector<ObjectId> removes;   // drop the record; its layout is freed when unreferenced
};

// Staging for one new version of one file. Private to its writer until Finish() returns a
// Layout, which becomes visible only when a MetaBatch puts it into a record. Not thread-safe:
// the fs layer serialises calls per open file.
class ChunkWriter {
 public:
  virtual ~ChunkWriter() = default;
  // Writes at any offset; a hole reads as zeros. Sequentially completed segments may be sealed
  // and written to the device before Finish(), so a large write streams.
  virtual Status Write(uint64_t offset, const void* data, size_t len) = 0;
  // Reads the staged content (the writer's own view: base version plus its writes).
  virtual Result<size_t> Read(uint64_t offset, void* out, size_t len) = 0;
  virtual Status Truncate(uint64_t size) = 0;
  virtual uint64_t size() const = 0;
  // True when the content differs from the base layout given at creation.
  virtual bool dirty() const = 0;
  // Seals every segment, waits for the device writes, and (durability=close) makes the data
  // durable. The writer stays usable: later writes start a further version from this one.
  virtual Result<LayoutRef> Finish() = 0;
};

struct StoreStats {
  uint64_t capacity_bytes = 0;  // usable data bytes over all devices
  uint64_t used_bytes = 0;      // allocated extents (incl. not yet freed)
  uint64_t logical_bytes = 0;   // sum of published file sizes
  uint64_t objects = 0;
  uint64_t files = 0;
  uint64_t reads = 0, writes = 0;  // chunk read calls, published versions
  uint64_t bytes_read = 0, bytes_written = 0;
  uint64_t checksum_failures = 0;
  uint64_t evictions = 0;
  uint64_t journal_bytes = 0;
  uint64_t segment_size = 0;
  std::vector<std::string> devices;
};

class ChunkStore {
 public:
  virtual ~ChunkStore() = default;

  // The records recovered at open (every journaled object except the root), for building the
  // namespace. Called once at mount.
  virtual std::vector<ObjectRecord> Records() const = 0;
  // A fresh object id, never handed out before (persisted across restarts).
  virtual ObjectId NewId() = 0;
  // Persists a batch atomically. With durability=close it returns once the batch is on stable
  // storage; with durability=async once it is in memory and queued.
  virtual Status Apply(const MetaBatch& batch) = 0;

  // A writer for a new version. `base` (may be null) is the content it starts from: the
  // published version for an overwrite without O_TRUNC, null for a new or truncated file.
  virtual Result<std::unique_ptr<ChunkWriter>> NewWriter(LayoutRef base) = 0;
  // Reads published content; every byte returned was checksum-verified. A mismatch gives EIO.
  virtual Result<size_t> Read(const LayoutRef& layout, uint64_t offset, void* out,
                              size_t len) = 0;

  virtual StoreStats Stats() const = 0;
  // Flushes the journal and writes a checkpoint (clean shutdown, kvfsctl).
  virtual Status Sync() = 0;
};

}  // namespace kvfs
