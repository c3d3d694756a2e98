// Checkpoint: a snapshot of the whole index, so recovery replays only the journals written
// after it. File "checkpoint" in the data directory:
//   u64 magic | u32 version | u32 0 | u64 first journal to replay | u64 next object id |
//   u64 record count | u64 payload length | u64 xxh3(payload) | u64 xxh3(header so far) | payload
// It is written to checkpoint.tmp, fsynced and renamed over the old one, so a crash leaves
// either the old or the new checkpoint, never a torn one.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kvfs/object.h"
#include "kvfs/status.h"
#include "record_codec.h"

namespace kvfs {

struct CheckpointData {
  uint64_t first_journal = 0;
  uint64_t next_id = 0;
  std::vector<DecodedRecord> records;
};

class Checkpoint {
 public:
  static constexpr const char* kFileName = "checkpoint";
  // Writes and installs a checkpoint (tmp + fsync + rename + directory fsync).
  static Status Write(const std::string& dir, uint64_t first_journal, uint64_t next_id,
                      const std::vector<ObjectRecord>& records);
  // Loads it. ENOENT when there is none; EIO (corruption) when it does not verify.
  static Result<CheckpointData> Load(const std::string& dir);
};

}  // namespace kvfs
