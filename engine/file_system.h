// FileSystem: every call the engine makes to the host file system: the device files, the
// journal, checkpoints, recovery, the small files it replaces atomically and the data
// directory's lock. PosixFileSystem (FileSystem::Posix()) is the real one; crash tests put a
// fault-injecting one in its place (tests/engine/fault_injection_fs.h) that fails the n-th
// call and, at a simulated power loss, drops every byte and every directory change that was
// never synced. Device data itself moves through io_uring on File::fd(); its writes pass the
// IoFaultInjector instead.
#pragma once

#include <sys/types.h>

#include <cerrno>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kvfs/status.h"

namespace kvfs {

struct OpenOptions {
  bool write = false;      // O_RDWR, else O_RDONLY
  bool create = false;     // O_CREAT (mode 0600)
  bool truncate = false;   // O_TRUNC
  bool exclusive = false;  // O_EXCL
  bool direct = false;     // O_DIRECT
};

class File {
 public:
  virtual ~File() = default;
  // Exactly `len` bytes at `offset`; EIO when the file ends first.
  virtual Status ReadAt(void* buf, size_t len, uint64_t offset) = 0;
  // Up to `len` bytes at `offset`; fewer only where the file ends.
  virtual Result<size_t> ReadSome(void* buf, size_t len, uint64_t offset) = 0;
  // All `len` bytes at `offset` (ENOSPC stays ENOSPC, other failures are EIO).
  virtual Status WriteAt(const void* buf, size_t len, uint64_t offset) = 0;
  // fdatasync: the data and the size, durable.
  virtual Status DataSync() = 0;
  virtual Status Truncate(uint64_t size) = 0;
  // fallocate; with `keep_size` the blocks are reserved past the end without growing the size.
  virtual Status Allocate(uint64_t offset, uint64_t len, bool keep_size) = 0;
  // The size of a regular file, or of a block device.
  virtual Result<uint64_t> Size() = 0;
  virtual bool IsBlockDevice() = 0;
  // The descriptor, for io_uring's registered files (device data).
  virtual int fd() const = 0;
};

// Held while it lives: an exclusive flock on a file.
class FileLock {
 public:
  virtual ~FileLock() = default;
};

class FileSystem {
 public:
  virtual ~FileSystem() = default;
  // The process-wide POSIX file system.
  static const std::shared_ptr<FileSystem>& Posix();

  virtual Result<std::unique_ptr<File>> Open(const std::string& path, OpenOptions options) = 0;
  // rename(2): replaces `to`. Durable once the directory is synced.
  virtual Status Rename(const std::string& from, const std::string& to) = 0;
  virtual Status Unlink(const std::string& path) = 0;
  // fsync of a directory: creates, renames and unlinks in it become durable.
  virtual Status SyncDir(const std::string& dir) = 0;
  // Names in `dir` (no "." or "..").
  virtual Result<std::vector<std::string>> List(const std::string& dir) = 0;
  // mkdir -p with mode 0700.
  virtual Status MakeDirs(const std::string& dir) = 0;
  // An exclusive, non-blocking flock of `path` (created if missing); EBUSY when another holds it.
  virtual Result<std::unique_ptr<FileLock>> Lock(const std::string& path) = 0;
  // Bytes an unprivileged writer may still use on the file system holding `dir` (statvfs
  // f_bavail); ENOTSUP where the file system cannot say.
  virtual Result<uint64_t> FreeBytes(const std::string& dir) {
    return Status::Error(ENOTSUP, "free space of " + dir + " unknown");
  }
};

}  // namespace kvfs
