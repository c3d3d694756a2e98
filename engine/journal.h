// Journal: an append-only file of checksummed records. Each record is
//   u32 payload length | u32 type | u64 xxh3(payload, seed = type<<32 | length) | payload
// after a 16-byte file header (magic, journal number). Replay stops at the first record whose
// header or checksum does not verify: that is a torn write from a crash (or corruption), and
// everything before it is intact. Not thread-safe; the engine's committer is its only writer.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "io_fault_injector.h"
#include "kvfs/status.h"

namespace kvfs {

enum class RecordType : uint32_t {
  kBatch = 1,      // a MetaBatch (RecordCodec)
  kWatermark = 2,  // u64: object ids below this may have been handed out
};

struct JournalRecord {
  RecordType type = RecordType::kBatch;
  std::string payload;
  uint64_t end = 0;  // file offset just past this record
};

struct JournalScan {
  std::vector<JournalRecord> records;
  uint64_t valid_bytes = 0;  // file prefix holding the header and every valid record
  uint64_t file_bytes = 0;
  bool clean() const { return valid_bytes == file_bytes; }
};

class Journal {
 public:
  static constexpr uint64_t kHeaderSize = 16;
  static constexpr uint32_t kMaxRecord = 1u << 30;

  ~Journal();
  Journal(const Journal&) = delete;
  Journal& operator=(const Journal&) = delete;

  static std::string FileName(uint64_t number);  // "journal-<16 digits>.log"
  // Names of the journals in `dir` with their numbers, ascending.
  static Result<std::vector<uint64_t>> List(const std::string& dir);

  // Creates an empty journal (header only, synced).
  static Result<std::unique_ptr<Journal>> Create(const std::string& dir, uint64_t number);
  // Opens an existing journal for appending after `valid_bytes` (the rest is cut off).
  static Result<std::unique_ptr<Journal>> OpenForAppend(const std::string& dir, uint64_t number,
                                                        uint64_t valid_bytes);
  // Reads every valid record. A missing or bad header gives an empty scan.
  static Result<JournalScan> Scan(const std::string& path);

  static void EncodeRecord(RecordType type, const std::string& payload, std::string* out);

  // Appends already-encoded records and makes them durable (write + fdatasync). On failure
  // the file is cut back to its previous size, so the next append does not land behind a
  // partial record.
  Status AppendDurable(const std::string& encoded);
  // Tests: every append passes through `faults` first (EIO, a torn append).
  void set_fault_injector(IoFaultInjector* faults) { faults_ = faults; }

  uint64_t number() const { return number_; }
  uint64_t size() const { return size_; }

 private:
  Journal(int fd, uint64_t number, uint64_t size, std::string path)
      : fd_(fd), number_(number), size_(size), path_(std::move(path)) {}
  int fd_;
  uint64_t number_;
  uint64_t size_;
  std::string path_;
  IoFaultInjector* faults_ = nullptr;
};

// fsync of a directory, so creates, renames and deletes in it survive a crash.
Status SyncDirectory(const std::string& dir);

}  // namespace kvfs
