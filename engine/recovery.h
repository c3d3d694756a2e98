// Recovery: rebuilds the index from the newest checkpoint that verifies plus the journals after
// it. What it could not use is skipped, never trusted, and reported (RecoveryDamage):
//  - a checkpoint that is not whole (a block or its header fails its checksum): the newest
//    whole one before it is used, with more journal; when none is whole, the verified blocks
//    of each are laid over the journals before it (Salvage), so only records damaged in
//    every kept copy are lost;
//  - a damaged record in the middle of a journal: only that record is lost;
//  - a torn tail of the last journal (a crash during an append): cut off, as expected.
// So one flipped bit costs at most the changes one record described, and the engine starts.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "file_system.h"
#include "kvfs/object.h"
#include "kvfs/status.h"

namespace kvfs {

// What recovery found damaged and skipped (all zero after a clean start or a crash).
struct RecoveryDamage {
  uint64_t journal_records = 0;  // damaged records skipped in the middle of journals
  uint64_t journal_bytes = 0;    // their bytes
  uint64_t checkpoints = 0;      // checkpoint files that did not verify
  uint64_t superblocks = 0;      // device superblocks repaired from their backup copy
  std::vector<std::string> notes;
  bool any() const { return journal_records || checkpoints || superblocks; }
};

struct RecoveredState {
  struct Entry {
    ObjectRecord record;             // layout null: see `layout`
    std::shared_ptr<Layout> layout;  // plain, not yet owned by an engine
    uint64_t sequence = 0;           // order of the change that made it (checkpoint: 0)
  };
  std::unordered_map<ObjectId, Entry> records;
  uint64_t next_id = 0;              // above every id seen or handed out
  uint64_t journal_number = 0;       // the journal to append to
  uint64_t journal_valid_bytes = 0;  // 0: create it
  bool fresh = true;                 // no checkpoint and no journal existed
  uint64_t replayed_records = 0;
  bool truncated = false;  // a torn tail was cut off
  RecoveryDamage damage;
};

// Reads the checkpoints and journals of `dir` (cutting a torn tail on disk).
Result<RecoveredState> Recover(FileSystem& fs, const std::string& dir);

}  // namespace kvfs
