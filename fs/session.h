// Session: one FUSE mount and its multithreaded request loop.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "fuse_ops.h"
#include "kvfs/status.h"

struct fuse_session;

namespace kvfs::fs {

class Session {
 public:
  // Creates the session and mounts it (shown as fuse.kvfs in /proc/mounts). Installs libfuse's
  // SIGTERM/SIGINT/SIGHUP handlers, which end the loop.
  static Result<std::unique_ptr<Session>> Mount(const std::string& mountpoint,
                                                const std::vector<std::string>& fuse_options,
                                                FsContext* ctx);
  ~Session();

  // Raises the mount's readahead (bdi read_ahead_kb) so the kernel sends 1 MiB reads.
  void TuneReadahead(unsigned kb);
  // Serves requests until unmounted or signalled. Returns libfuse's loop status.
  int Loop(unsigned max_threads);
  fuse_session* raw() { return se_; }

 private:
  Session() = default;
  fuse_session* se_ = nullptr;
  std::string mountpoint_;
  bool mounted_ = false;
  bool handlers_ = false;
};

}  // namespace kvfs::fs
