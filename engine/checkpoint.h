// Checkpoint: a snapshot of the whole index, so recovery replays only the journals written
// after it. Files "checkpoint-<first journal to replay, 16 digits>" in the data directory:
//   header (64 bytes): u64 magic | u32 version 2 | u32 0 | u64 first journal to replay |
//     u64 next object id | u64 record count | u64 payload length | u64 block count |
//     u64 xxh3(header so far)
//   payload: blocks of whole records, each
//     u64 block magic | u32 record count | u32 body length | u64 xxh3(body) |
//     u64 xxh3(block header so far) | body (records, about kBlockBytes); both sums seeded with
//     the first journal, so a block of another generation does not verify here
// Each block verifies on its own, so a flipped bit costs the records of one block, not the
// whole checkpoint; a block whose header is damaged is stepped over by finding the next block
// magic. Version 1 (one checksum over the whole payload) is still read.
// Each file is written under a temporary name, synced and renamed into place, so a crash
// leaves it whole or absent. The newest two are kept, with every journal from the older one's
// first journal on: when the newest does not verify (a flipped bit, a bad sector), recovery
// takes the one before and replays more journal to the same state. kvfs before generations
// wrote a single file named "checkpoint"; it is read as the oldest generation.
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
  std::vector<DecodedRecord> records;  // the records of every block that verifies
  uint64_t lost_records = 0;           // records in blocks that do not (0: the file is whole)
  uint64_t damaged_bytes = 0;          // the bytes of those blocks
  uint64_t first_damage = 0;           // file offset of the first of them
  bool whole() const { return lost_records == 0 && damaged_bytes == 0; }
};

class Checkpoint {
 public:
  static constexpr const char* kLegacyName = "checkpoint";
  static constexpr size_t kKeep = 2;           // generations kept
  static constexpr size_t kBlockBytes = 4096;  // records per block: what one flipped bit costs

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
  // Loads dir/name: ENOENT when there is none; EIO (corruption) when its header does not
  // verify. A damaged block is not an error: its records are left out and counted
  // (CheckpointData::whole() is false).
  static Result<CheckpointData> Load(FileSystem& fs, const std::string& dir,
                                     const std::string& name);
  // After a new checkpoint: keeps the newest kKeep checkpoints and the journals from the
  // oldest kept one's first journal; deletes older ones. The directory is synced.
  static Status Prune(FileSystem& fs, const std::string& dir);
};

}  // namespace kvfs
