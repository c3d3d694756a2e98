// A kvfs daemon started by the benchmark: mounts on a fresh directory, stopped by PID.
#pragma once

#include <sys/types.h>

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
  void Stop();
  pid_t pid() const { return pid_; }
  // user+system CPU seconds the daemon has used so far.
  double CpuSeconds() const;

 private:
  pid_t pid_ = -1;
  std::string mount_;
};

}  // namespace kvfs::bench
