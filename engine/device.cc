#include "device.h"

#include <fcntl.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <random>

#include "byte_io.h"

namespace kvfs {
namespace {

constexpr uint64_t kSuperblockMagic = 0x3156454453465654ull;  // "TVFSDEV1" little-endian

std::string Errno(const std::string& what, int err) { return what + ": " + std::strerror(err); }

struct AlignedBlock {
  AlignedBlock() { p = static_cast<uint8_t*>(std::aligned_alloc(4096, kSuperblockSize)); }
  ~AlignedBlock() { std::free(p); }
  uint8_t* p;
};

EngineUuid NewUuid() {
  std::random_device rd;
  EngineUuid u;
  for (auto& b : u) b = static_cast<uint8_t>(rd());
  return u;
}

}  // namespace

void Superblock::EncodeTo(uint8_t out[kSuperblockSize]) const {
  std::string s;
  ByteWriter w(&s);
  w.U64(kSuperblockMagic);
  w.U32(version);
  w.Bytes(uuid.data(), uuid.size());
  w.U32(index);
  w.U32(count);
  w.U64(size);
  w.U64(data_start);
  w.U32(segment_size);
  w.U64(XXH3_64bits(s.data(), s.size()));
  std::memset(out, 0, kSuperblockSize);
  std::memcpy(out, s.data(), s.size());
}

Result<Superblock> Superblock::Decode(const uint8_t in[kSuperblockSize], const std::string& path) {
  ByteReader r(in, kSuperblockSize);
  if (r.U64() != kSuperblockMagic) {
    return Status::Invalid(path + " is not a kvfs device (bad superblock magic)");
  }
  Superblock sb;
  sb.version = r.U32();
  r.Bytes(sb.uuid.data(), sb.uuid.size());
  sb.index = r.U32();
  sb.count = r.U32();
  sb.size = r.U64();
  sb.data_start = r.U64();
  sb.segment_size = r.U32();
  const size_t body = kSuperblockSize - r.remaining();
  const uint64_t checksum = r.U64();
  if (!r.ok() || checksum != XXH3_64bits(in, body)) {
    return Status::Corruption(path + ": superblock checksum mismatch");
  }
  if (sb.version != kDeviceFormatVersion) {
    return Status::Invalid(path + ": unsupported device format version " +
                           std::to_string(sb.version));
  }
  if (sb.data_start % 4096 != 0 || sb.data_start < kSuperblockSize || sb.size < sb.data_start) {
    return Status::Corruption(path + ": superblock has an impossible layout");
  }
  return sb;
}

Device::~Device() {
  if (fd_ >= 0) ::close(fd_);
}

Result<std::unique_ptr<Device>> Device::OpenExisting(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDWR | O_DIRECT | O_CLOEXEC);
  if (fd < 0) return Status::Error(errno, Errno("cannot open device " + path, errno));
  std::unique_ptr<Device> dev(new Device(fd, path, {}));
  AlignedBlock block;
  KVFS_RETURN_IF_ERROR(dev->PreadFull(block.p, kSuperblockSize, 0));
  KVFS_ASSIGN_OR_RETURN(dev->sb_, Superblock::Decode(block.p, path));
  struct stat st {};
  if (::fstat(fd, &st) == 0) {
    uint64_t real = static_cast<uint64_t>(st.st_size);
    if (S_ISBLK(st.st_mode)) ::ioctl(fd, BLKGETSIZE64, &real);
    if (real < dev->sb_.size) {
      return Status::Corruption(path + " is smaller than its superblock says");
    }
  }
  return dev;
}

Result<std::unique_ptr<Device>> Device::Create(const std::string& path, uint64_t size,
                                               const Superblock& sb_in) {
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_DIRECT | O_CLOEXEC, 0600);
  if (fd < 0) return Status::Error(errno, Errno("cannot create device " + path, errno));
  std::unique_ptr<Device> dev(new Device(fd, path, sb_in));
  struct stat st {};
  if (::fstat(fd, &st) != 0) return Status::Error(errno, Errno("stat " + path, errno));
  if (S_ISBLK(st.st_mode)) {
    uint64_t real = 0;
    if (::ioctl(fd, BLKGETSIZE64, &real) != 0) {
      return Status::Error(errno, Errno("BLKGETSIZE64 " + path, errno));
    }
    if (size == 0 || size > real) size = real;
  } else {
    if (size == 0) return Status::Invalid("device " + path + " needs a size");
    int rc = ::fallocate(fd, 0, 0, static_cast<off_t>(size));
    if (rc != 0 && (errno == EOPNOTSUPP || errno == ENOSYS)) {
      rc = ::ftruncate(fd, static_cast<off_t>(size));
    }
    if (rc != 0) return Status::Error(errno, Errno("cannot preallocate " + path, errno));
  }
  size = size / 4096 * 4096;
  if (size <= kDeviceDataStart) return Status::Invalid("device " + path + " is too small");
  dev->sb_.size = size;
  AlignedBlock block;
  dev->sb_.EncodeTo(block.p);
  KVFS_RETURN_IF_ERROR(dev->PwriteFull(block.p, kSuperblockSize, 0));
  KVFS_RETURN_IF_ERROR(dev->DataSync());
  return dev;
}

Status Device::PreadFull(void* buf, uint64_t len, uint64_t offset) const {
  uint64_t done = 0;
  while (done < len) {
    ssize_t n = ::pread(fd_, static_cast<uint8_t*>(buf) + done, len - done,
                        static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Status::IoError(Errno("read " + path_, errno));
    if (n == 0) return Status::IoError("read " + path_ + ": unexpected end of device");
    done += static_cast<uint64_t>(n);
  }
  return Status::Ok();
}

Status Device::PwriteFull(const void* buf, uint64_t len, uint64_t offset) const {
  uint64_t done = 0;
  while (done < len) {
    ssize_t n = ::pwrite(fd_, static_cast<const uint8_t*>(buf) + done, len - done,
                         static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Status::Error(errno == ENOSPC ? ENOSPC : EIO, Errno("write " + path_, errno));
    done += static_cast<uint64_t>(n);
  }
  return Status::Ok();
}

Status Device::DataSync() const {
  if (::fdatasync(fd_) != 0) return Status::IoError(Errno("fdatasync " + path_, errno));
  return Status::Ok();
}

Result<std::vector<std::unique_ptr<Device>>> OpenDevices(const EngineOptions& options, bool fresh) {
  std::vector<DeviceSpec> specs = options.devices;
  if (specs.empty()) specs.push_back({options.data_dir + "/device0.kvfs", 0});
  const uint32_t count = static_cast<uint32_t>(specs.size());
  std::vector<std::unique_ptr<Device>> devices;
  if (fresh) {
    Superblock sb;
    sb.uuid = NewUuid();
    sb.count = count;
    sb.segment_size = options.segment_size;
    for (uint32_t i = 0; i < count; ++i) {
      // Never clobber a device of another engine just because this data directory is new.
      auto existing = Device::OpenExisting(specs[i].path);
      if (existing.ok()) {
        return Status::Error(EEXIST, specs[i].path + " already holds a kvfs engine's data, but " +
                                         options.data_dir +
                                         " has no journal for it; remove "
                                         "the device file (or wipe its first 4 KiB) to start over");
      }
      uint64_t size = specs[i].size;
      if (size == 0)
        size = options.capacity / count / (1ull << 20) * (1ull << 20) + kDeviceDataStart;
      if (specs[i].size == 0 && options.capacity == 0) size = 0;  // block device: its own size
      sb.index = i;
      KVFS_ASSIGN_OR_RETURN(auto dev, Device::Create(specs[i].path, size, sb));
      devices.push_back(std::move(dev));
    }
    return devices;
  }
  for (uint32_t i = 0; i < count; ++i) {
    KVFS_ASSIGN_OR_RETURN(auto dev, Device::OpenExisting(specs[i].path));
    const Superblock& sb = dev->superblock();
    if (sb.count != count) {
      return Status::Invalid(specs[i].path + " belongs to an engine of " +
                             std::to_string(sb.count) + " devices, but " + std::to_string(count) +
                             " are configured");
    }
    if (sb.index != i) {
      return Status::Invalid(specs[i].path + " is device " + std::to_string(sb.index) +
                             " of its engine, configured as device " + std::to_string(i));
    }
    if (i > 0 && sb.uuid != devices[0]->superblock().uuid) {
      return Status::Invalid(specs[i].path + " belongs to a different engine than " +
                             specs[0].path);
    }
    if (sb.segment_size != options.segment_size) {
      return Status::Invalid(specs[i].path + " was created with segment size " +
                             std::to_string(sb.segment_size));
    }
    devices.push_back(std::move(dev));
  }
  return devices;
}

}  // namespace kvfs
