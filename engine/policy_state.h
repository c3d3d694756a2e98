// PolicyState: the eviction policy's persisted state beside the checkpoint
// ("<data_dir>/eviction.state"). It holds the policy's own blob plus the ids the engine had
// tracked, so recovery can reconcile the policy with the index (drop ids the index lost, track
// files the blob never saw) without asking the policy to enumerate itself.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "file_system.h"
#include "kvfs/object.h"
#include "kvfs/status.h"

namespace kvfs {

struct PolicyState {
  std::string policy;         // policy name that wrote the blob
  std::vector<ObjectId> ids;  // ids tracked when the blob was taken
  std::string blob;           // EvictionPolicy::Persist()
};

class PolicyStateFile {
 public:
  static constexpr const char* kFileName = "eviction.state";
  // Written to a temporary file, fsynced and renamed over the old one.
  static Status Write(FileSystem& fs, const std::string& dir, const PolicyState& state);
  // ENOENT when there is none; EIO when it is corrupt or truncated (checksummed).
  static Result<PolicyState> Load(FileSystem& fs, const std::string& dir);
};

}  // namespace kvfs
