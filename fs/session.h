// Session: one FUSE mount and its multithreaded request loop.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "fuse_ops.h"
#include "kvfs/status.h"
#include "mount_info.h"

struct fuse_session;

namespace kvfs::fs {

class Session {
 public:
  // Creates the session and mounts it (shown as fuse.kvfs in /proc/mounts). Installs libfuse's
  // SIGTERM/SIGINT/SIGHUP handlers, which end the loop.
  static Result<std::unique_ptr<Session>> Mount(const std::string& mountpoint,
                                                const std::vector<std::string>& fuse_options,
                                                FsContext* ctx);
  // Whether libfuse takes these -o options (it prints what it refuses), checked before the
  // daemon makes or opens anything: a misspelt option used to fail only after the engine had
  // preallocated its device file.
  static Status CheckOptions(const std::vector<std::string>& fuse_options);
  ~Session();

  // Raises the mount's readahead (bdi read_ahead_kb) so the kernel sends 1 MiB reads. The
  // kernel lowers it again while it processes our INIT reply, so this must run after INIT:
  // TuneReadaheadAfterInit() does it from a helper thread once a stat() of the mountpoint (a
  // request the kernel holds until INIT is done) returns, then calls `then` there (the daemon
  // says it is ready only now: while that stat is under way the mount is busy, and an unmount
  // right after kvfs returned failed with EBUSY). Join with FinishReadahead().
  void TuneReadahead(unsigned kb);
  void TuneReadaheadAfterInit(unsigned kb, std::function<void()> then);
  void FinishReadahead();
  // Serves requests until unmounted or signalled. Returns libfuse's loop status.
  int Loop(unsigned max_threads);
  fuse_session* raw() { return se_; }
  // The FUSE connection's number (the mount's device minor, its name under
  // /sys/fs/fuse/connections), when mountinfo showed the mount.
  std::optional<unsigned> connection() const {
    return mount_ ? std::optional<unsigned>(mount_->minor) : std::nullopt;
  }

 private:
  Session() = default;
  fuse_session* se_ = nullptr;
  std::string mountpoint_;
  bool mounted_ = false;
  bool handlers_ = false;
  // This mount's mountinfo entry, read once right after mounting (the bdi readahead and the
  // connection number come from its device number).
  std::optional<MountEntry> mount_;
  std::thread readahead_thread_;
};

}  // namespace kvfs::fs
