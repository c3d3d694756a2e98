#include "journal.h"

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

#include "atomic_file.h"
#include "byte_io.h"

namespace kvfs {
namespace {

constexpr uint64_t kJournalMagic = 0x314c4e4a5346564bull;  // "KVFSJNL1" little-endian
constexpr size_t kRecordHeader = 16;

Status ErrnoStatus(const std::string& what) {
  return Status::Error(errno == ENOSPC ? ENOSPC : EIO, what + ": " + std::strerror(errno));
}

uint64_t RecordChecksum(uint32_t type, const void* payload, uint32_t len) {
  return XXH3_64bits_withSeed(payload, len, (static_cast<uint64_t>(type) << 32) | len);
}

Status WriteAll(int fd, const char* p, size_t n, const std::string& path) {
  while (n > 0) {
    ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) return ErrnoStatus("write " + path);
    p += w;
    n -= static_cast<size_t>(w);
  }
  return Status::Ok();
}

}  // namespace

Journal::~Journal() {
  if (fd_ >= 0) ::close(fd_);
}

std::string Journal::FileName(uint64_t number) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "journal-%016llu.log", static_cast<unsigned long long>(number));
  return buf;
}

Result<std::vector<uint64_t>> Journal::List(const std::string& dir) {
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return ErrnoStatus("list " + dir);
  std::vector<uint64_t> numbers;
  while (dirent* e = ::readdir(d)) {
    unsigned long long n = 0;
    char tail[8] = {0};
    if (std::sscanf(e->d_name, "journal-%16llu.%3s", &n, tail) == 2 &&
        std::strcmp(tail, "log") == 0 && FileName(n) == e->d_name) {
      numbers.push_back(n);
    }
  }
  ::closedir(d);
  std::sort(numbers.begin(), numbers.end());
  return numbers;
}

Result<std::unique_ptr<Journal>> Journal::Create(const std::string& dir, uint64_t number) {
  const std::string path = dir + "/" + FileName(number);
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return ErrnoStatus("create " + path);
  std::unique_ptr<Journal> j(new Journal(fd, number, 0, path));
  std::string header;
  ByteWriter w(&header);
  w.U64(kJournalMagic);
  w.U64(number);
  KVFS_RETURN_IF_ERROR(WriteAll(fd, header.data(), header.size(), path));
  if (::fdatasync(fd) != 0) return ErrnoStatus("fdatasync " + path);
  j->size_ = kHeaderSize;
  return j;
}

Result<std::unique_ptr<Journal>> Journal::OpenForAppend(const std::string& dir, uint64_t number,
                                                        uint64_t valid_bytes) {
  if (valid_bytes < kHeaderSize) return Create(dir, number);
  const std::string path = dir + "/" + FileName(number);
  int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus("open " + path);
  std::unique_ptr<Journal> j(new Journal(fd, number, valid_bytes, path));
  if (::ftruncate(fd, static_cast<off_t>(valid_bytes)) != 0) return ErrnoStatus("truncate " + path);
  if (::lseek(fd, static_cast<off_t>(valid_bytes), SEEK_SET) < 0)
    return ErrnoStatus("seek " + path);
  if (::fdatasync(fd) != 0) return ErrnoStatus("fdatasync " + path);
  return j;
}

Result<JournalScan> Journal::Scan(const std::string& path) {
  JournalScan scan;
  KVFS_ASSIGN_OR_RETURN(const std::string data, ReadWholeFile(path));
  scan.file_bytes = data.size();
  ByteReader header(data.data(), data.size());
  if (header.U64() != kJournalMagic || !header.ok()) return scan;  // nothing valid
  header.U64();
  uint64_t pos = kHeaderSize;
  while (pos + kRecordHeader <= data.size()) {
    ByteReader r(data.data() + pos, kRecordHeader);
    const uint32_t len = r.U32();
    const uint32_t type = r.U32();
    const uint64_t checksum = r.U64();
    if (len > kMaxRecord || pos + kRecordHeader + len > data.size()) break;
    const char* payload = data.data() + pos + kRecordHeader;
    if (RecordChecksum(type, payload, len) != checksum) break;
    if (type != static_cast<uint32_t>(RecordType::kBatch) &&
        type != static_cast<uint32_t>(RecordType::kWatermark)) {
      break;
    }
    pos += kRecordHeader + len;
    scan.records.push_back({static_cast<RecordType>(type), std::string(payload, len), pos});
  }
  scan.valid_bytes = pos;
  return scan;
}

void Journal::EncodeRecord(RecordType type, const std::string& payload, std::string* out) {
  ByteWriter w(out);
  const uint32_t len = static_cast<uint32_t>(payload.size());
  w.U32(len);
  w.U32(static_cast<uint32_t>(type));
  w.U64(RecordChecksum(static_cast<uint32_t>(type), payload.data(), len));
  w.Bytes(payload.data(), payload.size());
}

Status Journal::AppendDurable(const std::string& encoded) {
  if (!encoded.empty()) {
    size_t len = encoded.size();
    Status st;
    if (faults_ != nullptr) {
      IoRequest req;
      req.write = true;
      req.journal = true;
      req.offset = size_;
      req.data = reinterpret_cast<uint8_t*>(const_cast<char*>(encoded.data()));
      req.len = static_cast<uint32_t>(std::min<size_t>(len, UINT32_MAX));
      st = faults_->BeforeIo(req);
      if (st.ok() && req.len < len) {
        len = req.len;  // a torn append: the prefix reaches the file, then the write "fails"
        st = Status::IoError("write " + path_ + ": torn append (injected)");
      }
    }
    if (len > 0 && (st.ok() || len < encoded.size())) {
      Status w = WriteAll(fd_, encoded.data(), len, path_);
      if (st.ok()) st = w;
    }
    if (!st.ok()) {
      // Cut a partial append off so the next one does not land behind garbage.
      if (::ftruncate(fd_, static_cast<off_t>(size_)) == 0)
        ::lseek(fd_, static_cast<off_t>(size_), SEEK_SET);
      return st;
    }
    size_ += encoded.size();
  }
  if (::fdatasync(fd_) != 0) return ErrnoStatus("fdatasync " + path_);
  return Status::Ok();
}

Status SyncDirectory(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus("open " + dir);
  int rc = ::fsync(fd);
  Status st = rc == 0 ? Status::Ok() : ErrnoStatus("fsync " + dir);
  ::close(fd);
  return st;
}

}  // namespace kvfs
