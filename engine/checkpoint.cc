#include "checkpoint.h"

#include <xxhash.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "atomic_file.h"
#include "byte_io.h"
#include "journal.h"

namespace kvfs {
namespace {

constexpr uint64_t kCheckpointMagic = 0x31504b435346564bull;  // "KVFSCKP1" little-endian
constexpr uint32_t kCheckpointVersion = 1;
constexpr size_t kHeaderSize = 64;

// The generation of a checkpoint file name (its first journal); 0 for the legacy name.
bool ParseName(const std::string& name, uint64_t* generation) {
  if (name == Checkpoint::kLegacyName) {
    *generation = 0;
    return true;
  }
  unsigned long long n = 0;
  char rest[4] = {0};
  if (std::sscanf(name.c_str(), "checkpoint-%16llu%3s", &n, rest) != 1) return false;
  if (Checkpoint::FileName(n) != name) return false;
  *generation = n;
  return true;
}

// The first journal a checkpoint file needs: from its name, or from the legacy file's header
// (0 when that cannot be read: then every journal is kept).
uint64_t FirstJournal(FileSystem& fs, const std::string& dir, const std::string& name) {
  uint64_t generation = 0;
  if (ParseName(name, &generation) && generation != 0) return generation;
  auto file = fs.Open(dir + "/" + name, {});
  if (!file.ok()) return 0;
  char header[32];
  if (!(*file)->ReadAt(header, sizeof header, 0).ok()) return 0;
  ByteReader r(header, sizeof header);
  if (r.U64() != kCheckpointMagic) return 0;
  r.U64();
  return r.U64();
}

}  // namespace

std::string Checkpoint::FileName(uint64_t first_journal) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "checkpoint-%016llu",
                static_cast<unsigned long long>(first_journal));
  return buf;
}

Result<std::vector<std::string>> Checkpoint::List(FileSystem& fs, const std::string& dir) {
  KVFS_ASSIGN_OR_RETURN(std::vector<std::string> names, fs.List(dir));
  std::vector<std::pair<uint64_t, std::string>> found;
  for (std::string& name : names) {
    uint64_t generation = 0;
    if (ParseName(name, &generation)) found.emplace_back(generation, std::move(name));
  }
  std::sort(found.begin(), found.end(), [](const auto& a, const auto& b) { return a > b; });
  std::vector<std::string> out;
  for (auto& [generation, name] : found) out.push_back(std::move(name));
  return out;
}

Status Checkpoint::Write(FileSystem& fs, const std::string& dir, uint64_t first_journal,
                         uint64_t next_id, const std::vector<ObjectRecord>& records) {
  return Install(fs, dir, first_journal, Encode(first_journal, next_id, records));
}

std::string Checkpoint::Encode(uint64_t first_journal, uint64_t next_id,
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
  return file;
}

Status Checkpoint::Install(FileSystem& fs, const std::string& dir, uint64_t first_journal,
                           const std::string& file) {
  return WriteFileAtomically(fs, dir, FileName(first_journal), file);
}

Result<CheckpointData> Checkpoint::Load(FileSystem& fs, const std::string& dir,
                                        const std::string& name) {
  const std::string path = dir + "/" + name;
  KVFS_ASSIGN_OR_RETURN(std::string data, ReadWholeFile(fs, path));
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
  uint64_t generation = 0;
  if (ParseName(name, &generation) && generation != 0 && generation != out.first_journal) {
    return Status::Corruption(path + ": names journal " + std::to_string(out.first_journal));
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

Status Checkpoint::Prune(FileSystem& fs, const std::string& dir) {
  KVFS_ASSIGN_OR_RETURN(std::vector<std::string> checkpoints, List(fs, dir));
  uint64_t keep_journals_from = UINT64_MAX;
  for (size_t i = 0; i < checkpoints.size(); ++i) {
    if (i < kKeep) {
      keep_journals_from = std::min(keep_journals_from, FirstJournal(fs, dir, checkpoints[i]));
    } else {
      (void)fs.Unlink(dir + "/" + checkpoints[i]);
    }
  }
  if (checkpoints.size() >= kKeep) {
    KVFS_ASSIGN_OR_RETURN(std::vector<uint64_t> journals, Journal::List(fs, dir));
    for (uint64_t n : journals) {
      if (n < keep_journals_from) (void)fs.Unlink(dir + "/" + Journal::FileName(n));
    }
  }
  return fs.SyncDir(dir);
}

}  // namespace kvfs
