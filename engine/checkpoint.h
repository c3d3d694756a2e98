// Checkpoint: a snapshot of the whole index, so recovery replays only the journals written
// after it. Files "checkpoint-<first journal to replay, 16 digits>" in the data directory:
//   u64 magic | u32 version | u32 0 | u64 first journal to replay | u64 next object id |
//   u64 record count | u64 payload length | u64 xxh3(payload) | u64 xxh3(header so far) | payload
// Each is written under a temporary name, synced and renamed into place, so a crash leaves it
// whole or absent. The newest two are kept, with every journal from the older one's first
// journal on: when the newest does not verify (a flipped bit, a bad sector), recovery takes
// the one before and replays more journal to the same state. kvfs before generations wrote a
// single file named "checkpoint"; it is read as the oldest generation.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "file_system.h"
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
  static constexpr const char* kLegacyName = "checkpoint";
  static constexpr size_t kKeep = 2;  // generations kept

  static std::string FileName(uint64_t first_journal);
  // Checkpoint file names in `dir`, newest first (the legacy one last).
  static Result<std::vector<std::string>> List(FileSystem& fs, const std::string& dir);
  // Writes and installs a checkpoint (tmp + sync + rename + directory sync): Install(Encode()).
  static Status Write(FileSystem& fs, const std::string& dir, uint64_t first_journal,
                      uint64_t next_id, const std::vector<ObjectRecord>& records);
  // The whole checkpoint file, and its installation.
  static std::string Encode(uint64_t first_journal, uint64_t next_id,
                            const std::vector<ObjectRecord>& records);
  static Status Install(FileSystem& fs, const std::string& dir, uint64_t first_journal,
                        const std::string& file);
  // Loads dir/name. ENOENT when there is none; EIO (corruption) when it does not verify.
  static Result<CheckpointData> Load(FileSystem& fs, const std::string& dir,
                                     const std::string& name);
  // After a new checkpoint: keeps the newest kKeep checkpoints and the journals from the
  // oldest kept one's first journal; deletes older ones. The directory is synced.
  static Status Prune(FileSystem& fs, const std::string& dir);
};

}  // namespace kvfs
