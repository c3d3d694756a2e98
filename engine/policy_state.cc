#include "policy_state.h"

#include <fcntl.h>
#include <unistd.h>
#include <xxhash.h>

#include <cerrno>
#include <cstring>

#include "byte_io.h"
#include "journal.h"

namespace kvfs {
namespace {

constexpr uint64_t kMagic = 0x3150564553465656ull;  // arbitrary tag, checked on load
constexpr uint32_t kVersion = 1;

Status ErrnoStatus(const std::string& what) {
  return Status::Error(errno == ENOSPC ? ENOSPC : EIO, what + ": " + std::strerror(errno));
}

}  // namespace

Status PolicyStateFile::Write(const std::string& dir, const PolicyState& state) {
  std::string file;
  ByteWriter w(&file);
  w.U64(kMagic);
  w.U32(kVersion);
  w.Str(state.policy);
  w.U64(state.ids.size());
  for (ObjectId id : state.ids) w.U64(id);
  w.Str(state.blob);
  w.U64(XXH3_64bits(file.data(), file.size()));

  const std::string tmp = dir + "/eviction.state.tmp";
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

Result<PolicyState> PolicyStateFile::Load(const std::string& dir) {
  const std::string path = dir + "/" + kFileName;
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::Error(errno == ENOENT ? ENOENT : EIO, "open " + path);
  std::string data;
  char buf[65536];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof(buf));
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
  if (data.size() < 8 + 12 + 8) return Status::Corruption(path + " is truncated");
  const size_t body = data.size() - 8;
  ByteReader tail(data.data() + body, 8);
  if (tail.U64() != XXH3_64bits(data.data(), body)) {
    return Status::Corruption(path + " checksum mismatch");
  }
  ByteReader r(data.data(), body);
  if (r.U64() != kMagic || r.U32() != kVersion) return Status::Corruption(path + " bad header");
  PolicyState state;
  state.policy = r.Str(64);
  const uint64_t n = r.U64();
  if (!r.ok() || n > r.remaining() / 8) return Status::Corruption(path + " bad id count");
  state.ids.reserve(n);
  for (uint64_t i = 0; i < n; ++i) state.ids.push_back(r.U64());
  state.blob = r.Str(body);
  if (!r.ok() || r.remaining() != 0) return Status::Corruption(path + " malformed");
  return state;
}

}  // namespace kvfs
