#include "fault_injection_fs.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>

namespace kvfs::testing {
namespace {

std::string DirOf(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}

uint64_t RealSize(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 ? static_cast<uint64_t>(st.st_size) : 0;
}

bool Exists(const std::string& path) { return ::access(path.c_str(), F_OK) == 0; }

std::string ReadRange(const std::string& path, uint64_t offset, uint64_t len) {
  std::string out(len, '\0');
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return out;
  size_t done = 0;
  while (done < len) {
    ssize_t n = ::pread(fd, out.data() + done, len - done, static_cast<off_t>(offset + done));
    if (n <= 0) break;
    done += static_cast<size_t>(n);
  }
  ::close(fd);
  return out;
}

void WriteRange(const std::string& path, uint64_t offset, const std::string& bytes) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return;
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n =
        ::pwrite(fd, bytes.data() + done, bytes.size() - done, static_cast<off_t>(offset + done));
    if (n <= 0) break;
    done += static_cast<size_t>(n);
  }
  ::fsync(fd);
  ::close(fd);
}

class FaultFile final : public File {
 public:
  FaultFile(std::shared_ptr<FaultInjectionFileSystem> fs, std::unique_ptr<File> base,
            std::string path)
      : fs_(std::move(fs)), base_(std::move(base)), path_(std::move(path)) {}

  Status ReadAt(void* buf, size_t len, uint64_t offset) override {
    KVFS_RETURN_IF_ERROR(fs_->Enter());
    return base_->ReadAt(buf, len, offset);
  }
  Result<size_t> ReadSome(void* buf, size_t len, uint64_t offset) override {
    KVFS_RETURN_IF_ERROR(fs_->Enter());
    return base_->ReadSome(buf, len, offset);
  }
  Status WriteAt(const void* buf, size_t len, uint64_t offset) override {
    KVFS_RETURN_IF_ERROR(fs_->Enter());
    fs_->SaveUnsynced(path_, offset, len);
    return base_->WriteAt(buf, len, offset);
  }
  Status DataSync() override {
    KVFS_RETURN_IF_ERROR(fs_->Enter());
    KVFS_RETURN_IF_ERROR(base_->DataSync());
    fs_->NoteSynced(path_, RealSize(path_));
    return Status::Ok();
  }
  Status Truncate(uint64_t size) override {
    KVFS_RETURN_IF_ERROR(fs_->Enter());
    const uint64_t cur = RealSize(path_);
    if (size < cur) fs_->SaveUnsynced(path_, size, cur - size);
    return base_->Truncate(size);
  }
  Status Allocate(uint64_t offset, uint64_t len, bool keep_size) override {
    KVFS_RETURN_IF_ERROR(fs_->Enter());
    return base_->Allocate(offset, len, keep_size);
  }
  Result<uint64_t> Size() override {
    KVFS_RETURN_IF_ERROR(fs_->Enter());
    return base_->Size();
  }
  bool IsBlockDevice() override { return base_->IsBlockDevice(); }
  int fd() const override { return base_->fd(); }

 private:
  std::shared_ptr<FaultInjectionFileSystem> fs_;
  std::unique_ptr<File> base_;
  std::string path_;
};

class DeviceWriteRecorder final : public IoFaultInjector {
 public:
  DeviceWriteRecorder(std::weak_ptr<FaultInjectionFileSystem> fs, std::vector<std::string> devs)
      : fs_(std::move(fs)), devices_(std::move(devs)) {}
  Status BeforeIo(IoRequest& req) override {
    if (req.journal) return Status::Ok();  // journal appends go through the FileSystem
    auto fs = fs_.lock();
    if (!fs) return Status::Ok();
    if (fs->Crashed()) return Status::IoError("crashed (fault injection)");
    if (req.write && req.device < devices_.size()) {
      fs->SaveUnsynced(devices_[req.device], req.offset, req.len);
    }
    return Status::Ok();
  }

 private:
  std::weak_ptr<FaultInjectionFileSystem> fs_;
  std::vector<std::string> devices_;
};

}  // namespace

std::shared_ptr<IoFaultInjector> FaultInjectionFileSystem::DeviceWrites(
    std::vector<std::string> devices) {
  return std::make_shared<DeviceWriteRecorder>(weak_from_this(), std::move(devices));
}

Status FaultInjectionFileSystem::Enter() {
  std::lock_guard lock(mu_);
  ++calls_;
  if (crashed_ || (crash_at_ != 0 && calls_ >= crash_at_)) {
    crashed_ = true;
    return Status::IoError("crashed at file-system call " + std::to_string(crash_at_) +
                           " (fault injection)");
  }
  return Status::Ok();
}

void FaultInjectionFileSystem::SaveUnsynced(const std::string& path, uint64_t offset,
                                            uint64_t len) {
  std::lock_guard lock(mu_);
  auto [it, fresh] = files_.try_emplace(path);
  FileState& f = it->second;
  if (fresh) f.synced_size = RealSize(path);  // existed (durably) before we saw it
  const uint64_t end = std::min(offset + len, f.synced_size);
  // Save each part of [offset, end) that no earlier unsynced write saved already.
  uint64_t pos = offset;
  while (pos < end) {
    auto next = f.undo.upper_bound(pos);
    if (next != f.undo.begin()) {
      auto prev = std::prev(next);
      if (prev->first + prev->second.size() > pos) {  // covered
        pos = prev->first + prev->second.size();
        continue;
      }
    }
    const uint64_t stop = next == f.undo.end() ? end : std::min(end, next->first);
    f.undo.emplace(pos, ReadRange(path, pos, stop - pos));
    pos = stop;
  }
}

void FaultInjectionFileSystem::NoteSynced(const std::string& path, uint64_t size) {
  std::lock_guard lock(mu_);
  FileState& f = files_[path];
  f.synced_size = size;
  f.undo.clear();
}

std::string FaultInjectionFileSystem::Backup() { return ".faultfs-" + std::to_string(++backups_); }

Result<std::unique_ptr<File>> FaultInjectionFileSystem::Open(const std::string& path,
                                                             OpenOptions options) {
  KVFS_RETURN_IF_ERROR(Enter());
  const bool existed = Exists(path);
  if (existed && options.truncate && options.write) SaveUnsynced(path, 0, RealSize(path));
  KVFS_ASSIGN_OR_RETURN(auto file, base_->Open(path, options));
  if (!existed && options.create) {
    std::lock_guard lock(mu_);
    dirops_[DirOf(path)].push_back({DirOp::kCreated, path, "", ""});
    files_[path] = FileState{};
  }
  return std::unique_ptr<File>(
      std::make_unique<FaultFile>(shared_from_this(), std::move(file), path));
}

Status FaultInjectionFileSystem::Rename(const std::string& from, const std::string& to) {
  KVFS_RETURN_IF_ERROR(Enter());
  std::lock_guard lock(mu_);
  std::string backup;
  if (Exists(to)) {
    backup = DirOf(to) + "/" + Backup();
    if (::link(to.c_str(), backup.c_str()) != 0) return Status::IoError("faultfs: link");
    if (auto it = files_.find(to); it != files_.end()) {
      files_[backup] = std::move(it->second);
      files_.erase(it);
    }
  }
  KVFS_RETURN_IF_ERROR(base_->Rename(from, to));
  if (auto it = files_.find(from); it != files_.end()) {
    files_[to] = std::move(it->second);
    files_.erase(it);
  }
  dirops_[DirOf(to)].push_back({DirOp::kRenamed, from, to, backup});
  return Status::Ok();
}

Status FaultInjectionFileSystem::Unlink(const std::string& path) {
  KVFS_RETURN_IF_ERROR(Enter());
  std::lock_guard lock(mu_);
  if (!Exists(path)) return base_->Unlink(path);  // the base's ENOENT
  const std::string backup = DirOf(path) + "/" + Backup();
  if (::rename(path.c_str(), backup.c_str()) != 0) return Status::IoError("faultfs: rename");
  if (auto it = files_.find(path); it != files_.end()) {
    files_[backup] = std::move(it->second);
    files_.erase(it);
  }
  dirops_[DirOf(path)].push_back({DirOp::kUnlinked, path, "", backup});
  return Status::Ok();
}

Status FaultInjectionFileSystem::SyncDir(const std::string& dir) {
  KVFS_RETURN_IF_ERROR(Enter());
  KVFS_RETURN_IF_ERROR(base_->SyncDir(dir));
  std::lock_guard lock(mu_);
  for (const DirOp& op : dirops_[dir]) {
    if (op.backup.empty()) continue;
    ::unlink(op.backup.c_str());  // the replaced or unlinked file is gone for good now
    files_.erase(op.backup);
  }
  dirops_.erase(dir);
  return Status::Ok();
}

Result<std::vector<std::string>> FaultInjectionFileSystem::List(const std::string& dir) {
  KVFS_RETURN_IF_ERROR(Enter());
  KVFS_ASSIGN_OR_RETURN(std::vector<std::string> names, base_->List(dir));
  std::erase_if(names, [](const std::string& n) { return n.rfind(".faultfs-", 0) == 0; });
  return names;
}

Status FaultInjectionFileSystem::MakeDirs(const std::string& dir) {
  KVFS_RETURN_IF_ERROR(Enter());
  return base_->MakeDirs(dir);
}

Result<std::unique_ptr<FileLock>> FaultInjectionFileSystem::Lock(const std::string& path) {
  KVFS_RETURN_IF_ERROR(Enter());
  return base_->Lock(path);
}

void FaultInjectionFileSystem::PowerLoss() {
  std::lock_guard lock(mu_);
  // Directory changes first, newest first, so the paths are where the content states say.
  for (auto& [dir, ops] : dirops_) {
    for (auto op = ops.rbegin(); op != ops.rend(); ++op) {
      switch (op->kind) {
        case DirOp::kCreated:
          ::unlink(op->path.c_str());
          files_.erase(op->path);
          break;
        case DirOp::kRenamed:
          ::rename(op->to.c_str(), op->path.c_str());
          if (auto it = files_.find(op->to); it != files_.end()) {
            files_[op->path] = std::move(it->second);
            files_.erase(it);
          }
          if (!op->backup.empty()) {
            ::rename(op->backup.c_str(), op->to.c_str());
            if (auto it = files_.find(op->backup); it != files_.end()) {
              files_[op->to] = std::move(it->second);
              files_.erase(it);
            }
          }
          break;
        case DirOp::kUnlinked:
          ::rename(op->backup.c_str(), op->path.c_str());
          if (auto it = files_.find(op->backup); it != files_.end()) {
            files_[op->path] = std::move(it->second);
            files_.erase(it);
          }
          break;
      }
    }
  }
  for (auto& [path, f] : files_) {
    if (!Exists(path)) continue;
    for (const auto& [offset, bytes] : f.undo) WriteRange(path, offset, bytes);
    if (RealSize(path) != f.synced_size) (void)::truncate(path.c_str(), f.synced_size);
  }
  files_.clear();
  dirops_.clear();
  crashed_ = false;
  crash_at_ = 0;
  calls_ = 0;
}

}  // namespace kvfs::testing
