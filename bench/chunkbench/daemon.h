// A FUSE daemon started by the benchmark (kvfs, or the generic passthrough it is compared
// with): mounts on a fresh directory, unmounted and stopped by PID.
#pragma once

#include <sys/types.h>

#include <functional>
#include <string>
#include <vector>

#include "kvfs/status.h"

namespace kvfs::bench {

class Daemon {
 public:
  ~Daemon() { Stop(); }
  // Starts `kvfs MOUNT --data DATA -f ARGS...` and waits for MOUNT/.kvfs/status.
  Status Start(const std::string& kvfs_bin, const std::string& mount, const std::string& data,
               const std::vector<std::string>& args);
  // Starts `argv` (a FUSE daemon that stays in the foreground and mounts `mount`), its output
  // to `log`, and waits until `mount` is a mount point.
  Status StartFuse(const std::vector<std::string>& argv, const std::string& mount,
                   const std::string& log);
  void Stop();
  pid_t pid() const { return pid_; }
  // user+system CPU seconds the daemon has used so far.
  double CpuSeconds() const;
  // Bytes a kvfs daemon has served to reads so far (`bytes_read` of MOUNT/.kvfs/status); -1
  // when it cannot be read (not kvfs).
  int64_t BytesRead() const;

 private:
  Status Launch(const std::vector<std::string>& argv, const std::string& mount,
                const std::string& log, const std::function<bool()>& ready);
  pid_t pid_ = -1;
  std::string mount_;
};

}  // namespace kvfs::bench
