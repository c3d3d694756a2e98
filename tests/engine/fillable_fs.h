// FillableFileSystem: the engine's FileSystem over the host's, made full (ENOSPC) or its
// fdatasyncs failing on demand, for the tests of a store whose file system fills up.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "file_system.h"

namespace kvfs::testing {

// The host's file system, except that while `full` every write and fallocate fails with
// ENOSPC, as on a file system with no free block (the journal's reserved blocks used up),
// but for writes that fit in the `room` left; and while `fail_sync` every fdatasync fails with
// EIO (after the write reached the file). FreeBytes says what is left (the room while full)
// when `report_free`, else that it cannot tell. Once `allocations_left` (when not negative)
// reaches 0, each fallocate fails with ENOSPC too, after growing the file to the size it asked
// for, as ext4 keeps the blocks a fallocate that runs out of space took.
class FillableFileSystem : public FileSystem {
 public:
  std::atomic<bool> full{false};
  std::atomic<int64_t> room{0};
  std::atomic<bool> fail_sync{false};
  std::atomic<bool> report_free{true};
  std::atomic<int> allocations_left{-1};
  std::atomic<int> refused{0};     // writes and fallocates failed
  std::atomic<int> free_asked{0};  // FreeBytes calls

  Result<std::unique_ptr<File>> Open(const std::string& path, OpenOptions options) override {
    KVFS_ASSIGN_OR_RETURN(std::unique_ptr<File> f, base_->Open(path, options));
    return std::unique_ptr<File>(new Fillable(std::move(f), this));
  }
  Status Rename(const std::string& from, const std::string& to) override {
    return base_->Rename(from, to);
  }
  Status Unlink(const std::string& path) override { return base_->Unlink(path); }
  Status SyncDir(const std::string& dir) override { return base_->SyncDir(dir); }
  Result<std::vector<std::string>> List(const std::string& dir) override {
    return base_->List(dir);
  }
  Status MakeDirs(const std::string& dir) override { return base_->MakeDirs(dir); }
  Result<std::unique_ptr<FileLock>> Lock(const std::string& path) override {
    return base_->Lock(path);
  }
  Result<uint64_t> FreeBytes(const std::string& dir) override {
    free_asked.fetch_add(1);
    if (!report_free) return FileSystem::FreeBytes(dir);
    return full ? static_cast<uint64_t>(std::max<int64_t>(room.load(), 0)) : uint64_t{1} << 40;
  }

 private:
  class Fillable : public File {
   public:
    Fillable(std::unique_ptr<File> f, FillableFileSystem* fs) : f_(std::move(f)), fs_(fs) {}
    Status ReadAt(void* buf, size_t len, uint64_t offset) override {
      return f_->ReadAt(buf, len, offset);
    }
    Result<size_t> ReadSome(void* buf, size_t len, uint64_t offset) override {
      return f_->ReadSome(buf, len, offset);
    }
    Status WriteAt(const void* buf, size_t len, uint64_t offset) override {
      if (fs_->full && fs_->room.fetch_sub(static_cast<int64_t>(len)) < static_cast<int64_t>(len)) {
        return Refuse();
      }
      return f_->WriteAt(buf, len, offset);
    }
    Status DataSync() override {
      if (fs_->fail_sync) return Status::IoError("fdatasync failed (injected)");
      return f_->DataSync();
    }
    Status Truncate(uint64_t size) override { return f_->Truncate(size); }
    Status Allocate(uint64_t offset, uint64_t len, bool keep_size) override {
      if (fs_->full) return Refuse();
      if (fs_->allocations_left.load() >= 0 && fs_->allocations_left.fetch_sub(1) <= 0) {
        if (!keep_size) KVFS_RETURN_IF_ERROR(f_->Truncate(offset + len));
        return Refuse();
      }
      return f_->Allocate(offset, len, keep_size);
    }
    Result<uint64_t> Size() override { return f_->Size(); }
    bool IsBlockDevice() override { return f_->IsBlockDevice(); }
    int fd() const override { return f_->fd(); }

   private:
    Status Refuse() {
      fs_->refused.fetch_add(1);
      return Status::NoSpace("no space left on device (injected)");
    }
    std::unique_ptr<File> f_;
    FillableFileSystem* fs_;
  };

  std::shared_ptr<FileSystem> base_ = FileSystem::Posix();
};

}  // namespace kvfs::testing
