// The local engine: chunks packed into preallocated device files on local disks, written and
// read with io_uring + O_DIRECT, every segment checksummed (xxh3), the index persisted by a
// checksummed journal plus checkpoints. See docs/engine.md.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kvfs/chunk_store.h"
#include "kvfs/status.h"

namespace kvfs {

class IoFaultInjector;  // engine/io_fault_injector.h: tests inject device faults through it
class FileSystem;       // engine/file_system.h: every host file-system call goes through it

enum class Durability { kClose, kAsync };
enum class Compression { kOff, kLz4, kAuto };

struct DeviceSpec {
  std::string path;   // a file (created and preallocated if missing) or a block device
  uint64_t size = 0;  // 0: the block device's size, or the engine's share of capacity
};

struct EngineOptions {
  std::string data_dir;             // journal, checkpoint, lock file, default device file
  std::vector<DeviceSpec> devices;  // empty: one file "<data_dir>/device0.kvfs" of `capacity`
  uint64_t capacity = 0;            // total data bytes when devices have no explicit size
  Durability durability = Durability::kClose;
  Compression compression = Compression::kOff;
  uint32_t segment_size = 1u << 20;                 // raw bytes per segment
  uint32_t queue_depth = 16;                        // io_uring depth per thread
  uint64_t journal_checkpoint_bytes = 64ull << 20;  // checkpoint when the journal passes this
  uint32_t async_commit_ms = 50;                    // group-commit interval with durability=async
  // After the file system filled (a journal write failed with ENOSPC), the store is read-only
  // and tries to resume after this long, doubling up to 4x between tries.
  uint32_t no_space_retry_ms = 1000;
  // Bounded cache (DESIGN §6): when used bytes pass high_watermark x capacity after a publish,
  // files are evicted in `eviction` policy order ("lru", "lfu", "fifo", "prefix") down to
  // low_watermark x capacity. Pinned files (kFlagPinned) are never evicted.
  std::string eviction = "lru";
  double high_watermark = 0.90;
  double low_watermark = 0.80;
  // Memory writers may fill with segments that found the devices full, before any file is
  // evicted for them (EngineContext::TryReserveOverflow): a write larger than what eviction
  // can free fails with ENOSPC without evicting anything, as long as it fits in here.
  uint64_t overflow_bytes = 256ull << 20;
  std::shared_ptr<IoFaultInjector> fault_injector;  // tests only: sees every device I/O
  std::shared_ptr<FileSystem> file_system;          // null: the host's (POSIX)
};

class LocalEngine : public ChunkStore {
 public:
  // Opens (or creates) the engine: takes the data directory's lock, opens or creates the
  // devices, loads the checkpoint and replays the journal to its last valid record.
  static Result<std::unique_ptr<LocalEngine>> Open(const EngineOptions& options);
};

}  // namespace kvfs
