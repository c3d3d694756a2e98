// MountTest: runs the real kvfs daemon (-f) on a fresh temporary mountpoint and data dir for
// each test, and unmounts and stops it (by PID) afterwards. KVFS_FS_TEST_STORE=memory runs the
// daemon over the in-memory store instead of the local engine.
#pragma once

#include <gtest/gtest.h>
#include <sys/types.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace kvfs::fs::testing {

class MountTest : public ::testing::Test {
 protected:
  void SetUp() override;
  void TearDown() override;

  // Starts the daemon with the default test options plus `extra`; waits for .kvfs/status.
  void Start(const std::vector<std::string>& extra = {});
  // Unmounts with fusermount3 -u and waits for the daemon; returns its exit status (or -1).
  int Stop();
  bool memory_store() const;

  std::string P(const std::string& rel) const { return mnt_ + "/" + rel; }

  static void WriteFile(const std::string& path, const std::string& data,
                        int flags = 0101 /* O_WRONLY|O_CREAT */ | 01000 /* O_TRUNC */);
  static std::string ReadFile(const std::string& path);
  static std::string RandomBytes(size_t n, unsigned seed);
  // Runs a shell command, returns its exit status; output in *out when given.
  static int Shell(const std::string& cmd, std::string* out = nullptr);
  std::string DaemonLog() const;
  // Each thread of a process: name, wait channel and kernel stack (/proc, root).
  static std::string ThreadsOf(pid_t pid);
  // .kvfs/stats as numbers.
  std::map<std::string, uint64_t> Stats() const;
  // RELEASE comes after close(2) returns: waits until the daemon holds no open file.
  void WaitNoOpenFiles() const;

  std::string base_, mnt_, data_;
  pid_t pid_ = -1;
  std::vector<std::string> extra_;
};

}  // namespace kvfs::fs::testing
