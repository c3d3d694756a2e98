// Small whole files the engine replaces in one step (the checkpoint, the eviction state):
// written under a temporary name, fsync'ed, renamed over the old file and the directory
// fsync'ed, so a crash at any point leaves the old file or the new one, never a mix.
#pragma once

#include <string>
#include <string_view>

#include "kvfs/status.h"

namespace kvfs {

// Replaces dir/name with `bytes` (via dir/name.tmp). ENOSPC stays ENOSPC; other failures EIO.
Status WriteFileAtomically(const std::string& dir, const std::string& name, std::string_view bytes);
// The whole content of `path`; ENOENT when it does not exist, EIO when it cannot be read.
Result<std::string> ReadWholeFile(const std::string& path);

}  // namespace kvfs
