// PosixFileSystem: FileSystem over the host's system calls.
#include <dirent.h>
#include <fcntl.h>
#include <linux/fs.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "file_system.h"

namespace kvfs {
namespace {

// ENOSPC, EBUSY and the like keep their errno; what is unexpected is EIO with the reason.
Status Errno(int err, const std::string& what) {
  const int code = err == ENOSPC || err == ENOENT || err == EEXIST || err == EBUSY ||
                           err == EACCES || err == EPERM || err == ENOTDIR || err == EINVAL ||
                           err == EROFS || err == EFBIG
                       ? err
                       : EIO;
  return Status::Error(code, what + ": " + std::strerror(err));
}

class PosixFile final : public File {
 public:
  PosixFile(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  ~PosixFile() override { ::close(fd_); }

  Status ReadAt(void* buf, size_t len, uint64_t offset) override {
    KVFS_ASSIGN_OR_RETURN(size_t got, ReadSome(buf, len, offset));
    if (got < len) return Status::IoError("read " + path_ + ": unexpected end of file");
    return Status::Ok();
  }
  Result<size_t> ReadSome(void* buf, size_t len, uint64_t offset) override {
    size_t done = 0;
    while (done < len) {
      ssize_t n = ::pread(fd_, static_cast<uint8_t*>(buf) + done, len - done,
                          static_cast<off_t>(offset + done));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return Errno(errno, "read " + path_);
      if (n == 0) break;
      done += static_cast<size_t>(n);
    }
    return done;
  }
  Status WriteAt(const void* buf, size_t len, uint64_t offset) override {
    size_t done = 0;
    while (done < len) {
      ssize_t n = ::pwrite(fd_, static_cast<const uint8_t*>(buf) + done, len - done,
                           static_cast<off_t>(offset + done));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return Errno(errno, "write " + path_);
      done += static_cast<size_t>(n);
    }
    return Status::Ok();
  }
  Status DataSync() override {
    if (::fdatasync(fd_) != 0) return Errno(errno, "fdatasync " + path_);
    return Status::Ok();
  }
  Status Truncate(uint64_t size) override {
    if (::ftruncate(fd_, static_cast<off_t>(size)) != 0) return Errno(errno, "truncate " + path_);
    return Status::Ok();
  }
  Status Allocate(uint64_t offset, uint64_t len, bool keep_size) override {
    if (::fallocate(fd_, keep_size ? FALLOC_FL_KEEP_SIZE : 0, static_cast<off_t>(offset),
                    static_cast<off_t>(len)) != 0) {
      const int err = errno;
      if (err == EOPNOTSUPP || err == ENOSYS) {
        return Status::Error(EOPNOTSUPP, "fallocate " + path_ + ": not supported");
      }
      return Errno(err, "fallocate " + path_);
    }
    return Status::Ok();
  }
  Result<uint64_t> Size() override {
    struct stat st {};
    if (::fstat(fd_, &st) != 0) return Errno(errno, "stat " + path_);
    if (S_ISBLK(st.st_mode)) {
      uint64_t bytes = 0;
      if (::ioctl(fd_, BLKGETSIZE64, &bytes) != 0) return Errno(errno, "BLKGETSIZE64 " + path_);
      return bytes;
    }
    return static_cast<uint64_t>(st.st_size);
  }
  bool IsBlockDevice() override {
    struct stat st {};
    return ::fstat(fd_, &st) == 0 && S_ISBLK(st.st_mode);
  }
  int fd() const override { return fd_; }

 private:
  int fd_;
  std::string path_;
};

class PosixLock final : public FileLock {
 public:
  explicit PosixLock(int fd) : fd_(fd) {}
  ~PosixLock() override { ::close(fd_); }  // releases the flock

 private:
  int fd_;
};

class PosixFileSystem final : public FileSystem {
 public:
  Result<std::unique_ptr<File>> Open(const std::string& path, OpenOptions o) override {
    int flags = (o.write ? O_RDWR : O_RDONLY) | O_CLOEXEC;
    if (o.create) flags |= O_CREAT;
    if (o.truncate) flags |= O_TRUNC;
    if (o.exclusive) flags |= O_EXCL;
    if (o.direct) flags |= O_DIRECT;
    const int fd = ::open(path.c_str(), flags, 0600);
    if (fd < 0) return Errno(errno, "open " + path);
    return std::unique_ptr<File>(std::make_unique<PosixFile>(fd, path));
  }
  Status Rename(const std::string& from, const std::string& to) override {
    if (::rename(from.c_str(), to.c_str()) != 0) return Errno(errno, "rename " + from);
    return Status::Ok();
  }
  Status Unlink(const std::string& path) override {
    if (::unlink(path.c_str()) != 0) return Errno(errno, "unlink " + path);
    return Status::Ok();
  }
  Status SyncDir(const std::string& dir) override {
    const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return Errno(errno, "open " + dir);
    const int rc = ::fsync(fd);
    const int err = errno;
    ::close(fd);
    if (rc != 0) return Errno(err, "fsync " + dir);
    return Status::Ok();
  }
  Result<uint64_t> FreeBytes(const std::string& dir) override {
    struct statvfs st {};
    if (::statvfs(dir.c_str(), &st) != 0) return Errno(errno, "statvfs " + dir);
    return uint64_t{st.f_bavail} * st.f_frsize;
  }
  Result<std::vector<std::string>> List(const std::string& dir) override {
    DIR* d = ::opendir(dir.c_str());
    if (d == nullptr) return Errno(errno, "list " + dir);
    std::vector<std::string> names;
    while (dirent* e = ::readdir(d)) {
      if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0)
        names.emplace_back(e->d_name);
    }
    ::closedir(d);
    return names;
  }
  Status MakeDirs(const std::string& dir) override {
    for (size_t i = 1; i <= dir.size(); ++i) {
      if (i != dir.size() && dir[i] != '/') continue;
      const std::string path = dir.substr(0, i);
      if (::mkdir(path.c_str(), 0700) != 0 && errno != EEXIST) {
        return Errno(errno, "cannot create " + path);
      }
    }
    return Status::Ok();
  }
  Result<std::unique_ptr<FileLock>> Lock(const std::string& path) override {
    const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0) return Errno(errno, "cannot open " + path);
    if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
      const int err = errno;
      ::close(fd);
      if (err == EWOULDBLOCK) return Status::Error(EBUSY, path + " is locked");
      return Errno(err, "cannot lock " + path);
    }
    return std::unique_ptr<FileLock>(std::make_unique<PosixLock>(fd));
  }
};

}  // namespace

const std::shared_ptr<FileSystem>& FileSystem::Posix() {
  static const std::shared_ptr<FileSystem> fs = std::make_shared<PosixFileSystem>();
  return fs;
}

}  // namespace kvfs
