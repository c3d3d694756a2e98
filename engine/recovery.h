// Recovery: rebuilds the index from the checkpoint plus the journals after it. Replay stops at
// the first record that does not verify (a torn tail after a crash, or corruption): the
// journal is cut there and any later journal is deleted, so the state is exactly the prefix
// of batches that were durable.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "kvfs/object.h"
#include "kvfs/status.h"

namespace kvfs {

struct RecoveredState {
  struct Entry {
    ObjectRecord record;             // layout null: see `layout`
    std::shared_ptr<Layout> layout;  // plain, not yet owned by an engine
  };
  std::unordered_map<ObjectId, Entry> records;
  uint64_t next_id = 0;              // above every id seen or handed out
  uint64_t journal_number = 0;       // the journal to append to
  uint64_t journal_valid_bytes = 0;  // 0: create it
  bool fresh = true;                 // no checkpoint and no journal existed
  uint64_t replayed_records = 0;
  bool truncated = false;  // a torn or corrupt tail was cut off
};

// Reads the checkpoint and journals of `dir` (fixing a torn tail on disk).
Result<RecoveredState> Recover(const std::string& dir);

}  // namespace kvfs
