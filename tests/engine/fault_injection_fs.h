// FaultInjectionFileSystem: the engine's FileSystem over a real directory, for crash tests (in
// the spirit of RocksDB's FaultInjectionTestFS). It numbers every call and can
//  - crash at the n-th call: that call and every later one fail with EIO, so nothing more
//    becomes durable;
//  - lose power: every byte written to a file since its last DataSync is put back as it was,
//    files are cut back to their synced size, and creates, renames and unlinks made since
//    their directory's last SyncDir are undone.
// Device data moves through io_uring, not through the FileSystem: DeviceWrites() is an
// IoFaultInjector for the engine's options that records those writes (so a power loss takes
// them back too) and fails them after the crash.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "file_system.h"
#include "io_fault_injector.h"

namespace kvfs::testing {

class FaultInjectionFileSystem : public FileSystem,
                                 public std::enable_shared_from_this<FaultInjectionFileSystem> {
 public:
  FaultInjectionFileSystem() : base_(FileSystem::Posix()) {}

  // Calls are numbered from 1; 0 never crashes.
  void CrashAtCall(uint64_t n) {
    std::lock_guard lock(mu_);
    crash_at_ = n;
  }
  uint64_t calls() const {
    std::lock_guard lock(mu_);
    return calls_;
  }
  bool crashed() const {
    std::lock_guard lock(mu_);
    return crashed_;
  }
  // Undoes everything not synced (see above) and forgets the crash: the directory looks as
  // it would after a power loss at the crash point.
  void PowerLoss();

  // For EngineOptions::fault_injector. `devices` are the engine's device paths by index.
  std::shared_ptr<IoFaultInjector> DeviceWrites(std::vector<std::string> devices);

  // FileSystem
  Result<std::unique_ptr<File>> Open(const std::string& path, OpenOptions options) override;
  Status Rename(const std::string& from, const std::string& to) override;
  Status Unlink(const std::string& path) override;
  Status SyncDir(const std::string& dir) override;
  Result<std::vector<std::string>> List(const std::string& dir) override;
  Status MakeDirs(const std::string& dir) override;
  Result<std::unique_ptr<FileLock>> Lock(const std::string& path) override;

  // Called by its files and by DeviceWrites (mu_ not held).
  Status Enter();  // counts a call; EIO from the crash on
  void SaveUnsynced(const std::string& path, uint64_t offset, uint64_t len);
  void NoteSynced(const std::string& path, uint64_t size);
  bool Crashed() {
    std::lock_guard lock(mu_);
    return crashed_;
  }

 private:
  struct FileState {
    uint64_t synced_size = 0;
    std::map<uint64_t, std::string> undo;  // offset -> the synced bytes there, no overlaps
  };
  struct DirOp {
    enum Kind { kCreated, kRenamed, kUnlinked } kind;
    std::string path, to, backup;
  };
  std::string Backup();  // a fresh hidden name for a file a power loss may need back

  std::shared_ptr<FileSystem> base_;
  mutable std::mutex mu_;
  uint64_t calls_ = 0, crash_at_ = 0;
  bool crashed_ = false;
  uint64_t backups_ = 0;
  std::map<std::string, FileState> files_;            // by path
  std::map<std::string, std::vector<DirOp>> dirops_;  // by directory, oldest first
};

}  // namespace kvfs::testing
