// The FUSE low-level op table: each handler translates one request into a Namespace or Control
// call and maps the Status to an errno. Nothing here throws; no request can crash the daemon.
#pragma once

#include <fuse_lowlevel.h>

#include "control.h"
#include "kvfs/chunk_store.h"
#include "namespace.h"

namespace kvfs::fs {

// Cache lifetimes handed to the kernel (docs/fs.md explains the choice).
constexpr double kStableTimeout = 3600.0;  // published, not being written: names and attrs
constexpr double kNegativeTimeout = 1.0;   // "no such name"
constexpr double kVolatileTimeout = 0.0;   // files being written, control files

struct FsContext {
  Namespace* ns = nullptr;
  Control* control = nullptr;
  ChunkStore* store = nullptr;
  // The session's max_read option, which init must repeat (libfuse ends the session at INIT
  // otherwise): kvfs's own, or a smaller one the user gave (Session::Mount sets it).
  uint32_t max_read = 0;
};

const fuse_lowlevel_ops& KvfsOperations();

}  // namespace kvfs::fs
