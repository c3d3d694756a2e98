// A baseline server or client the bench starts (iperf3, redis-server): spawned with fork/exec,
// stopped by its PID (SIGTERM, then SIGKILL), never by name. Output goes to a file so a failed
// start can be explained.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "kvfs/status.h"

namespace remotebench {

class ChildProcess {
 public:
  ChildProcess() = default;
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;
  ~ChildProcess() { Stop(); }

  // Starts argv[0] (looked up in PATH) with stdout and stderr into `log_path`.
  kvfs::Status Start(const std::vector<std::string>& argv, const std::string& log_path);
  // Waits for the process to exit on its own; returns its exit status (or ETIMEDOUT).
  kvfs::Result<int> Wait(std::chrono::milliseconds limit);
  // SIGTERM, a short grace period, then SIGKILL; reaps it. Idempotent.
  void Stop();
  pid_t pid() const { return pid_; }
  bool running() const { return pid_ > 0; }
  // User + system CPU seconds the process has used so far (/proc/PID/stat), 0 if unknown.
  double CpuSeconds() const;

 private:
  pid_t pid_ = -1;
};

// True once something accepts TCP connections on 127.0.0.1:port (polled up to `limit`).
bool WaitForPort(uint16_t port, std::chrono::milliseconds limit);
// A port free on 127.0.0.1 a moment ago, below the ephemeral range (FreeLoopbackPort).
kvfs::Result<uint16_t> FreePort();
// Whole file as a string ("" when it cannot be read).
std::string ReadFile(const std::string& path);

}  // namespace remotebench
