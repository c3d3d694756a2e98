#include "device.h"

#include <spdlog/spdlog.h>
#include <xxhash.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <random>
#include <string_view>

#include "atomic_file.h"
#include "byte_io.h"
#include "kvfs/size.h"

namespace kvfs {
namespace {

constexpr uint64_t kSuperblockMagic = 0x3156454453465654ull;  // "TVFSDEV1" little-endian

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

// Gives a device file its `size`. The room is checked first, because on ext4 a fallocate that
// runs out of space keeps the blocks it took: a capacity larger than the disk would fill the
// operator's file system (and everything else on it) and leave it full. A preallocation that
// fails all the same gives back what it took.
Status Preallocate(FileSystem& fs, File& file, const std::string& path, uint64_t size) {
  KVFS_ASSIGN_OR_RETURN(const uint64_t old_size, file.Size());
  const std::string dir = path.substr(0, path.find_last_of('/') + 1);
  if (auto free = fs.FreeBytes(dir.empty() ? "." : dir);
      free.ok() && size > old_size && size - old_size > *free) {
    return Status::NoSpace("cannot preallocate " + path + ": it needs " +
                           FormatSize(size - old_size) + " more and its file system has " +
                           FormatSize(*free) +
                           " free (ask for less: --capacity, or a device's PATH:SIZE)");
  }
  Status st = file.Allocate(0, size, /*keep_size=*/false);
  if (st.err() == EOPNOTSUPP) st = file.Truncate(size);
  if (st.ok()) return st;
  if (Status undo = file.Truncate(old_size); !undo.ok())
    spdlog::warn("cannot give back the space of a failed preallocation: {}", undo.ToString());
  return Status::Error(st.err(), "cannot preallocate " + path + ": " + st.message());
}

// Whether `path` holds bytes in its first 4 KiB (where a kvfs superblock would be): a file or
// disk that is not a kvfs device but is not empty either. Zeros are a device file whose first
// start stopped before its superblock was written.
bool HoldsOtherData(FileSystem& fs, const std::string& path) {
  auto file = fs.Open(path, {});
  if (!file.ok()) return false;
  uint8_t head[kSuperblockSize];
  auto n = (*file)->ReadSome(head, sizeof head, 0);
  if (!n.ok()) return false;
  return std::any_of(head, head + *n, [](uint8_t b) { return b != 0; });
}

// A first start names the engine it makes in the data directory until the engine's journal
// exists: killed between a device's superblock and the journal, it left a device that the next
// start refused as another engine's ("already holds a kvfs engine's data", 1 kill in 60 at
// random moments of a first start). The next first start takes that engine's devices back, by
// the uuid named here.
constexpr const char* kFirstStartFile = "FIRST-START";
constexpr std::string_view kFirstStartTag = "kvfs first start ";

std::optional<EngineUuid> ReadFirstStart(FileSystem& fs, const std::string& dir) {
  auto text = ReadWholeFile(fs, dir + "/" + kFirstStartFile);
  EngineUuid uuid;
  if (!text.ok() || text->size() != kFirstStartTag.size() + 2 * uuid.size() + 1 ||  // hex, \n
      !text->starts_with(kFirstStartTag))
    return std::nullopt;
  for (size_t i = 0; i < uuid.size(); ++i) {
    unsigned byte = 0;
    if (std::sscanf(text->c_str() + kFirstStartTag.size() + 2 * i, "%2x", &byte) != 1)
      return std::nullopt;
    uuid[i] = static_cast<uint8_t>(byte);
  }
  return uuid;
}

Status WriteFirstStart(FileSystem& fs, const std::string& dir, const EngineUuid& uuid) {
  std::string text(kFirstStartTag);
  char hex[3];
  for (uint8_t b : uuid) {
    std::snprintf(hex, sizeof hex, "%02x", b);
    text += hex;
  }
  text += "\n";
  return WriteFileAtomically(fs, dir, kFirstStartFile, text);
}

}  // namespace

void FinishFirstStart(FileSystem& fs, const std::string& data_dir) {
  if (Status st = fs.Unlink(data_dir + "/" + kFirstStartFile); !st.ok() && st.err() != ENOENT)
    spdlog::warn("engine: cannot remove {}/{}: {}", data_dir, kFirstStartFile, st.ToString());
}

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

Device::~Device() = default;

Status Device::WriteSuperblock(uint64_t offset) const {
  AlignedBlock block;
  sb_.EncodeTo(block.p);
  KVFS_RETURN_IF_ERROR(PwriteFull(block.p, kSuperblockSize, offset));
  return DataSync();
}

Result<std::unique_ptr<Device>> Device::OpenExisting(FileSystem& fs, const std::string& path) {
  auto file = fs.Open(path, {.write = true, .direct = true});
  if (!file.ok()) {
    return Status::Error(file.status().err(), "cannot open device: " + file.status().message());
  }
  std::unique_ptr<Device> dev(new Device(std::move(file).value(), path, {}));
  AlignedBlock primary, backup;
  KVFS_RETURN_IF_ERROR(dev->PreadFull(primary.p, kSuperblockSize, 0));
  auto sb = Superblock::Decode(primary.p, path);
  const bool backup_read = dev->PreadFull(backup.p, kSuperblockSize, kBackupSuperblockOffset).ok();
  auto sb_backup = backup_read ? Superblock::Decode(backup.p, path + " (backup superblock)")
                               : Result<Superblock>(Status::IoError("unreadable"));
  if (!sb.ok()) {
    // Not a kvfs device at all (no magic in either copy) keeps its own message.
    if (!sb_backup.ok()) return sb.status();
    spdlog::error("engine: {}; restored from the backup copy at {}", sb.status().message(),
                  kBackupSuperblockOffset);
    dev->sb_ = *sb_backup;
    dev->repaired_ = true;
    if (Status st = dev->WriteSuperblock(0); !st.ok()) {
      spdlog::error("engine: cannot rewrite the superblock of {}: {}", path, st.ToString());
    }
  } else {
    dev->sb_ = *sb;
    if (!sb_backup.ok() || std::memcmp(primary.p, backup.p, kSuperblockSize) != 0) {
      // Made before the backup copy existed, or the copy itself was damaged.
      if (Status st = dev->WriteSuperblock(kBackupSuperblockOffset); !st.ok()) {
        spdlog::warn("engine: cannot write the backup superblock of {}: {}", path, st.ToString());
      }
    }
  }
  if (auto real = dev->file_->Size(); real.ok() && *real < dev->sb_.size) {
    // Cut short behind kvfs's back (truncate, a copy that ran out of room). Grown back to its
    // size, the chunks it still holds are served, and those past the cut fail their checksums
    // and are dropped: the operator decides, not kvfs (the cut may be a mistake to undo).
    const std::string want = std::to_string(dev->sb_.size);
    return Status::Corruption(path + " is " + std::to_string(*real) + " bytes, smaller than the " +
                              want +
                              " its superblock says (truncated?). To start with the chunks it "
                              "still holds: truncate -s " +
                              want + " " + path);
  }
  return dev;
}

Result<std::unique_ptr<Device>> Device::Create(FileSystem& fs, const std::string& path,
                                               uint64_t size, const Superblock& sb_in) {
  auto file = fs.Open(path, {.write = true, .create = true, .direct = true});
  if (!file.ok()) {
    return Status::Error(file.status().err(), "cannot create device: " + file.status().message());
  }
  std::unique_ptr<Device> dev(new Device(std::move(file).value(), path, sb_in));
  if (dev->file_->IsBlockDevice()) {
    KVFS_ASSIGN_OR_RETURN(uint64_t real, dev->file_->Size());
    if (size == 0 || size > real) size = real;
  } else {
    if (size == 0) return Status::Invalid("device " + path + " needs a size");
    KVFS_RETURN_IF_ERROR(Preallocate(fs, *dev->file_, path, size));
  }
  size = size / 4096 * 4096;
  if (size <= kDeviceDataStart) return Status::Invalid("device " + path + " is too small");
  dev->sb_.size = size;
  KVFS_RETURN_IF_ERROR(dev->WriteSuperblock(kBackupSuperblockOffset));
  KVFS_RETURN_IF_ERROR(dev->WriteSuperblock(0));
  return dev;
}

Status Device::PreadFull(void* buf, uint64_t len, uint64_t offset) const {
  return file_->ReadAt(buf, len, offset);
}

Status Device::PwriteFull(const void* buf, uint64_t len, uint64_t offset) const {
  return file_->WriteAt(buf, len, offset);
}

Status Device::DataSync() const { return file_->DataSync(); }

Result<std::vector<std::unique_ptr<Device>>> OpenDevices(FileSystem& fs,
                                                         const EngineOptions& options, bool fresh) {
  std::vector<DeviceSpec> specs = options.devices;
  if (specs.empty()) specs.push_back({options.data_dir + "/device0.kvfs", 0});
  const uint32_t count = static_cast<uint32_t>(specs.size());
  std::vector<std::unique_ptr<Device>> devices;
  if (fresh) {
    Superblock sb;
    // A first start that died before its journal: the same engine, made again.
    const std::optional<EngineUuid> unfinished = ReadFirstStart(fs, options.data_dir);
    sb.uuid = unfinished ? *unfinished : NewUuid();
    if (!unfinished) KVFS_RETURN_IF_ERROR(WriteFirstStart(fs, options.data_dir, sb.uuid));
    sb.count = count;
    sb.segment_size = options.segment_size;
    std::vector<bool> created(count, false);
    for (uint32_t i = 0; i < count; ++i) {
      // Never clobber a device of another engine just because this data directory is new.
      auto existing = Device::OpenExisting(fs, specs[i].path);
      if (existing.ok() && (*existing)->superblock().uuid != sb.uuid) {
        return Status::Error(EEXIST, specs[i].path + " already holds a kvfs engine's data, but " +
                                         options.data_dir +
                                         " has no journal for it; remove "
                                         "the device file (or wipe its first 4 KiB) to start over");
      }
      if (!existing.ok() && HoldsOtherData(fs, specs[i].path)) {
        return Status::Error(EEXIST, specs[i].path +
                                         " holds data that is not a kvfs device; kvfs will not "
                                         "overwrite it: name another path, or remove the file "
                                         "(a disk: wipe its first 4 KiB) to give it to kvfs");
      }
      uint64_t size = specs[i].size;
      if (size == 0)
        size = options.capacity / count / (1ull << 20) * (1ull << 20) + kDeviceDataStart;
      if (specs[i].size == 0 && options.capacity == 0) size = 0;  // block device: its own size
      sb.index = i;
      created[i] = existing.status().err() == ENOENT;  // its open found no file
      auto dev = Device::Create(fs, specs[i].path, size, sb);
      if (!dev.ok()) {
        // Without a journal the devices made so far serve nobody, and left behind they would
        // make the next start refuse ("already holds a kvfs engine's data") and keep the
        // space they took: remove the files this start created.
        devices.clear();
        for (uint32_t j = 0; j <= i; ++j) {
          if (!created[j]) continue;
          if (Status st = fs.Unlink(specs[j].path); !st.ok() && st.err() != ENOENT)
            spdlog::warn("cannot remove {} after a failed start: {}", specs[j].path, st.ToString());
        }
        return dev.status();
      }
      devices.push_back(std::move(dev).value());
    }
    return devices;
  }
  for (uint32_t i = 0; i < count; ++i) {
    KVFS_ASSIGN_OR_RETURN(auto dev, Device::OpenExisting(fs, specs[i].path));
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
