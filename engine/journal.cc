#include "journal.h"

#include <xxhash.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <memory>

#include "atomic_file.h"
#include "byte_io.h"

namespace kvfs {
namespace {

constexpr uint64_t kJournalMagic = 0x314c4e4a5346564bull;  // "KVFSJNL1" little-endian
constexpr size_t kRecordHeader = 16;

uint64_t RecordChecksum(uint32_t type, const void* payload, uint32_t len) {
  return XXH3_64bits_withSeed(payload, len, (static_cast<uint64_t>(type) << 32) | len);
}

bool KnownType(uint32_t type) {
  return type == static_cast<uint32_t>(RecordType::kBatch) ||
         type == static_cast<uint32_t>(RecordType::kWatermark);
}

// The end of a valid record at `pos`, or 0 when there is none.
uint64_t ValidRecordAt(const std::string& data, uint64_t pos) {
  if (pos + kRecordHeader > data.size()) return 0;
  ByteReader r(data.data() + pos, kRecordHeader);
  const uint32_t len = r.U32();
  const uint32_t type = r.U32();
  const uint64_t checksum = r.U64();
  if (!KnownType(type) || len > Journal::kMaxRecord) return 0;
  if (pos + kRecordHeader + len > data.size()) return 0;
  if (RecordChecksum(type, data.data() + pos + kRecordHeader, len) != checksum) return 0;
  return pos + kRecordHeader + len;
}

// The first valid record after `from`, or 0. A false match needs a 64-bit checksum to agree
// by chance; the type filter keeps the scan cheap.
uint64_t NextValidRecord(const std::string& data, uint64_t from) {
  for (uint64_t pos = from; pos + kRecordHeader <= data.size(); ++pos) {
    const uint8_t t = static_cast<uint8_t>(data[pos + 4]);
    if ((t != 1 && t != 2) || data[pos + 5] != 0 || data[pos + 6] != 0 || data[pos + 7] != 0) {
      continue;
    }
    if (ValidRecordAt(data, pos) != 0) return pos;
  }
  return 0;
}

}  // namespace

std::string Journal::FileName(uint64_t number) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "journal-%016llu.log", static_cast<unsigned long long>(number));
  return buf;
}

Result<std::vector<uint64_t>> Journal::List(FileSystem& fs, const std::string& dir) {
  KVFS_ASSIGN_OR_RETURN(std::vector<std::string> names, fs.List(dir));
  std::vector<uint64_t> numbers;
  for (const std::string& name : names) {
    unsigned long long n = 0;
    char tail[8] = {0};
    if (std::sscanf(name.c_str(), "journal-%16llu.%3s", &n, tail) == 2 &&
        std::strcmp(tail, "log") == 0 && FileName(n) == name) {
      numbers.push_back(n);
    }
  }
  std::sort(numbers.begin(), numbers.end());
  return numbers;
}

Result<std::unique_ptr<Journal>> Journal::Create(FileSystem& fs, const std::string& dir,
                                                 uint64_t number) {
  const std::string path = dir + "/" + FileName(number);
  auto file = fs.Open(path, {.write = true, .create = true, .truncate = true});
  if (!file.ok()) return file.status();
  std::unique_ptr<Journal> j(new Journal(std::move(file).value(), number, 0, path));
  std::string header;
  ByteWriter w(&header);
  w.U64(kJournalMagic);
  w.U64(number);
  Status st = j->file_->WriteAt(header.data(), header.size(), 0);
  if (st.ok()) st = j->file_->DataSync();
  if (!st.ok()) {
    j.reset();
    (void)fs.Unlink(path);  // no header-less journal for recovery to trip over
    return st;
  }
  j->size_ = kHeaderSize;
  j->Preallocate();
  return j;
}

Result<std::unique_ptr<Journal>> Journal::OpenForAppend(FileSystem& fs, const std::string& dir,
                                                        uint64_t number, uint64_t valid_bytes) {
  if (valid_bytes < kHeaderSize) return Create(fs, dir, number);
  const std::string path = dir + "/" + FileName(number);
  KVFS_ASSIGN_OR_RETURN(auto file, fs.Open(path, {.write = true}));
  std::unique_ptr<Journal> j(new Journal(std::move(file), number, valid_bytes, path));
  KVFS_RETURN_IF_ERROR(j->file_->Truncate(valid_bytes));
  KVFS_RETURN_IF_ERROR(j->file_->DataSync());
  j->Preallocate();
  return j;
}

void Journal::Preallocate() {
  // Blocks past the end (the size stays): an append into them needs no free space, so a full
  // file system does not make the store read-only at once, and a restart never needs room.
  const uint64_t want = (size_ / kPreallocate + 2) * kPreallocate;
  if (want <= reserved_) return;
  if (file_->Allocate(0, want, /*keep_size=*/true).ok()) reserved_ = want;
}

Result<JournalScan> Journal::Scan(FileSystem& fs, const std::string& path) {
  JournalScan scan;
  KVFS_ASSIGN_OR_RETURN(const std::string data, ReadWholeFile(fs, path));
  scan.file_bytes = data.size();
  ByteReader header(data.data(), data.size());
  if (header.U64() != kJournalMagic || !header.ok()) return scan;  // nothing valid
  header.U64();
  scan.header_ok = true;
  uint64_t pos = kHeaderSize;
  while (pos + kRecordHeader <= data.size()) {
    const uint64_t end = ValidRecordAt(data, pos);
    if (end == 0) {
      const uint64_t next = NextValidRecord(data, pos + 1);
      if (next == 0) break;  // nothing valid follows: a torn tail
      scan.damaged.emplace_back(pos, next);
      pos = next;
      continue;
    }
    ByteReader r(data.data() + pos, 8);
    const uint32_t len = r.U32();
    const uint32_t type = r.U32();
    scan.records.push_back({static_cast<RecordType>(type),
                            std::string(data.data() + pos + kRecordHeader, len), pos, end});
    pos = end;
  }
  // A damaged range always ends where a valid record starts, so the last record ends them all.
  scan.valid_bytes = scan.records.empty() ? kHeaderSize : scan.records.back().end;
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
      Status w = file_->WriteAt(encoded.data(), len, size_);
      if (st.ok()) st = w;
    }
    if (!st.ok()) {
      // Cut a partial append off so the next one does not land behind garbage. (The cut also
      // drops the blocks reserved past the end.)
      (void)file_->Truncate(size_);
      reserved_ = 0;
      Preallocate();
      return st;
    }
    size_ += encoded.size();
    Preallocate();
    if (Status sync = file_->DataSync(); !sync.ok()) {
      // The records may be in the file though the caller undoes them: cut them off, so no
      // recovery (even one from an older checkpoint) replays what was reported failed.
      size_ -= encoded.size();
      (void)file_->Truncate(size_);
      reserved_ = 0;
      Preallocate();
      return sync;
    }
    return Status::Ok();
  }
  return file_->DataSync();
}

}  // namespace kvfs
