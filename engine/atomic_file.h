// Small whole files the engine replaces in one step (checkpoints, the eviction state): written
// under a temporary name, synced, renamed over the old file and the directory synced, so a
// crash at any point leaves the old file or the new one, never a mix.
#pragma once

#include <string>
#include <string_view>

#include "file_system.h"
#include "kvfs/status.h"

namespace kvfs {

// Replaces dir/name with `bytes` (via dir/name.tmp). ENOSPC stays ENOSPC; other failures EIO.
// A failed write leaves no temporary file behind.
Status WriteFileAtomically(FileSystem& fs, const std::string& dir, const std::string& name,
                           std::string_view bytes);
// The whole content of `path`; ENOENT when it does not exist, EIO when it cannot be read.
Result<std::string> ReadWholeFile(FileSystem& fs, const std::string& path);

}  // namespace kvfs
