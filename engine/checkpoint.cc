#include "checkpoint.h"

#include <fcntl.h>
#include <unistd.h>
#include <xxhash.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "byte_io.h"
#include "journal.h"

namespace kvfs {
namespace {

constexpr uint64_t kCheckpointMagic = 0x31504b435346564bull;  // "KVFSCKP1" little-endian
constexpr uint32_t kCheckpointVersion = 1;
constexpr size_t kHeaderSize = 64;

Status ErrnoStatus(const std::string& what) {
  return Status::Error(errno == ENOSPC ? ENOSPC : EIO, what + ": " + std::strerror(errno));
}

}  // namespace

Status Checkpoint::Write(const std::string& dir, uint64_t first_journal, uint64_t next_id,
                         const std::vector<ObjectRecord>& records) {
  std::string payload;
  ByteWriter pw(&payload);
  for (const ObjectRecord& rec : records) RecordCodec::EncodeRecord(rec, pw);
  std::string file;
  ByteWriter w(&file);
  w.U64(kCheckpointMagic);
  w.U32(kCheckpointVersion);
  w.U32(0);
  w.U64(first_journal);
  w.U64(next_id);
  w.U64(records.size());
  w.U64(payload.size());
  w.U64(XXH3_64bits(payload.data(), payload.size()));
  w.U64(XXH3_64bits(file.data(), file.size()));
  file += payload;

  const std::string tmp = dir + "/checkpoint.tmp";
  const std::string final_path = dir + "/" + kFileName;
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return ErrnoStatus("create " + tmp);
  size_t done = 0;
  while (done < file.size()) {
    ssize_t n = ::write(fd, file.data() + done, file.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      Status st = ErrnoStatus("write " + tmp);
      ::close(fd);
      ::unlink(tmp.c_str());
      return st;
    }
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0) {
    Status st = ErrnoStatus("fsync " + tmp);
    ::close(fd);
    return st;
  }
  ::close(fd);
  if (::rename(tmp.c_str(), final_path.c_str()) != 0) return ErrnoStatus("rename " + tmp);
  return SyncDirectory(dir);
}

Result<CheckpointData> Checkpoint::Load(const std::string& dir) {
  const std::string path = dir + "/" + kFileName;
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::Error(errno == ENOENT ? ENOENT : EIO, "open " + path);
  std::string data;
  char buf[1 << 16];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      Status st = ErrnoStatus("read " + path);
      ::close(fd);
      return st;
    }
    if (n == 0) break;
    data.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  if (data.size() < kHeaderSize) return Status::Corruption(path + " is truncated");
  ByteReader r(data.data(), kHeaderSize);
  if (r.U64() != kCheckpointMagic) return Status::Corruption(path + ": bad magic");
  if (r.U32() != kCheckpointVersion) return Status::Corruption(path + ": unknown version");
  r.U32();
  CheckpointData out;
  out.first_journal = r.U64();
  out.next_id = r.U64();
  const uint64_t count = r.U64();
  const uint64_t payload_len = r.U64();
  const uint64_t payload_sum = r.U64();
  const uint64_t header_sum = r.U64();
  if (header_sum != XXH3_64bits(data.data(), kHeaderSize - 8)) {
    return Status::Corruption(path + ": header checksum mismatch");
  }
  if (payload_len != data.size() - kHeaderSize ||
      payload_sum != XXH3_64bits(data.data() + kHeaderSize, payload_len)) {
    return Status::Corruption(path + ": payload checksum mismatch");
  }
  ByteReader pr(data.data() + kHeaderSize, payload_len);
  if (count > payload_len) return Status::Corruption(path + ": record count");
  out.records.resize(count);
  for (auto& rec : out.records) {
    if (!RecordCodec::DecodeRecord(pr, &rec)) return Status::Corruption(path + ": bad record");
  }
  if (pr.remaining() != 0) return Status::Corruption(path + ": trailing bytes");
  return out;
}

}  // namespace kvfs
