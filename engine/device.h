// Device: one preallocated file or block device holding segments, opened O_DIRECT. Its first
// 4 KiB is a superblock that ties it to one engine (uuid) at one position (index), so a device
// from another engine or in the wrong order is refused at open instead of read as garbage. A
// backup copy at kBackupSuperblockOffset stands in when the first does not verify (and
// rewrites it); devices made before the copy existed get it at their next open.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "file_system.h"
#include "kvfs/local_engine.h"
#include "kvfs/status.h"

namespace kvfs {

constexpr uint64_t kSuperblockSize = 4096;
constexpr uint64_t kBackupSuperblockOffset = 64 * 1024;  // inside the reserved first MiB
constexpr uint64_t kDeviceDataStart = 1ull << 20;        // keeps data extents 1 MiB aligned
constexpr uint32_t kDeviceFormatVersion = 1;

using EngineUuid = std::array<uint8_t, 16>;

struct Superblock {
  uint32_t version = kDeviceFormatVersion;
  EngineUuid uuid{};
  uint32_t index = 0;
  uint32_t count = 0;
  uint64_t size = 0;  // bytes of the device the engine uses
  uint64_t data_start = kDeviceDataStart;
  uint32_t segment_size = 0;

  void EncodeTo(uint8_t out[kSuperblockSize]) const;
  static Result<Superblock> Decode(const uint8_t in[kSuperblockSize], const std::string& path);
};

class Device {
 public:
  ~Device();
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

  // Opens an existing device (checks its superblock, falling back to the backup copy) or
  // preallocates a new one and writes a fresh superblock and its backup.
  static Result<std::unique_ptr<Device>> OpenExisting(FileSystem& fs, const std::string& path);
  static Result<std::unique_ptr<Device>> Create(FileSystem& fs, const std::string& path,
                                                uint64_t size, const Superblock& sb);

  int fd() const { return file_->fd(); }
  // The superblock did not verify and was restored from its backup at this open.
  bool superblock_repaired() const { return repaired_; }
  const std::string& path() const { return path_; }
  const Superblock& superblock() const { return sb_; }
  uint64_t data_start() const { return sb_.data_start; }
  uint64_t size() const { return sb_.size; }

  // Synchronous fallbacks (short transfers from the ring, superblock).
  Status PreadFull(void* buf, uint64_t len, uint64_t offset) const;
  Status PwriteFull(const void* buf, uint64_t len, uint64_t offset) const;
  Status DataSync() const;

 private:
  Device(std::unique_ptr<File> file, std::string path, Superblock sb)
      : file_(std::move(file)), path_(std::move(path)), sb_(sb) {}
  Status WriteSuperblock(uint64_t offset) const;
  std::unique_ptr<File> file_;
  std::string path_;
  Superblock sb_;
  bool repaired_ = false;
};

// Opens the engine's devices: the ones in `options.devices`, or the default single file. A fresh
// engine (`fresh`: no journal or checkpoint yet) creates them all with a new uuid; an existing
// one requires every device, each with the same uuid, its own index and the same count.
Result<std::vector<std::unique_ptr<Device>>> OpenDevices(FileSystem& fs,
                                                         const EngineOptions& options, bool fresh);
// Called once the engine's journal exists: a later start is no first start (the next one
// needs the devices it finds to be its own).
void FinishFirstStart(FileSystem& fs, const std::string& data_dir);

}  // namespace kvfs
