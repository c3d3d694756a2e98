// Journal: an append-only file of checksummed records. Each record is
//   u32 payload length | u32 type | u64 xxh3(payload, seed = type<<32 | length) | payload
// after a 16-byte file header (magic, journal number).
//
// Scan tells two kinds of bad bytes apart. A bad record with nothing valid after it is a torn
// tail (a crash during an append; the file is cut there). A bad record with valid records
// after it is damage in the middle (a flipped bit, a bad sector): only that record is skipped,
// and recovery says so loudly; the records after it still count.
//
// Not thread-safe; the engine's committer is its only writer. The file is preallocated past
// its end (kept size), so appends keep working for a while on a full file system.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "file_system.h"
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
  uint64_t offset = 0;  // file offset of the record's header
  uint64_t end = 0;     // file offset just past this record
};

struct JournalScan {
  bool header_ok = false;  // false: empty, torn or foreign header (no records)
  std::vector<JournalRecord> records;
  // [begin, end) ranges of bad bytes with valid records after them, in file order.
  std::vector<std::pair<uint64_t, uint64_t>> damaged;
  uint64_t valid_bytes = 0;  // end of the last valid record (or of the header)
  uint64_t file_bytes = 0;
  bool torn_tail() const { return valid_bytes < file_bytes; }
};

class Journal {
 public:
  static constexpr uint64_t kHeaderSize = 16;
  static constexpr uint32_t kMaxRecord = 1u << 30;
  // Space reserved past the end, in steps of this much.
  static constexpr uint64_t kPreallocate = 8ull << 20;

  Journal(const Journal&) = delete;
  Journal& operator=(const Journal&) = delete;

  static std::string FileName(uint64_t number);  // "journal-<16 digits>.log"
  // Numbers of the journals in `dir`, ascending.
  static Result<std::vector<uint64_t>> List(FileSystem& fs, const std::string& dir);

  // Creates an empty journal (header only, synced). On failure no file is left behind: a
  // journal that exists always has its header.
  static Result<std::unique_ptr<Journal>> Create(FileSystem& fs, const std::string& dir,
                                                 uint64_t number);
  // Opens an existing journal for appending after `valid_bytes` (the rest is cut off; that
  // needs no free space).
  static Result<std::unique_ptr<Journal>> OpenForAppend(FileSystem& fs, const std::string& dir,
                                                        uint64_t number, uint64_t valid_bytes);
  // Reads every valid record (see the top of this file).
  static Result<JournalScan> Scan(FileSystem& fs, const std::string& path);

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
  Journal(std::unique_ptr<File> file, uint64_t number, uint64_t size, std::string path)
      : file_(std::move(file)), number_(number), size_(size), path_(std::move(path)) {}
  // Reserves space past the end so appends need no new blocks (best effort).
  void Preallocate();

  std::unique_ptr<File> file_;
  uint64_t number_;
  uint64_t size_;
  uint64_t reserved_ = 0;  // bytes preallocated from the start of the file
  std::string path_;
  IoFaultInjector* faults_ = nullptr;
};

}  // namespace kvfs
