#include "checkpoint.h"

#include <xxhash.h>

#include <algorithm>
#include <bit>
#include <cstdio>
#include <cstring>
#include <string_view>

#include "atomic_file.h"
#include "byte_io.h"
#include "journal.h"

namespace kvfs {
namespace {

constexpr uint64_t kCheckpointMagic = 0x31504b435346564bull;  // "KVFSCKP1" little-endian
constexpr uint64_t kBlockMagic = 0x32424b435346564bull;       // "KVFSCKB2" little-endian
constexpr uint32_t kWholePayloadVersion = 1;                  // one checksum over the whole payload
constexpr uint32_t kBlockVersion = 2;                         // checksummed blocks
constexpr size_t kHeaderSize = 64;
constexpr size_t kBlockHeaderSize = 32;

// A block's checksums are seeded with its checkpoint's first journal: a block of another
// generation (a stale sector, a misdirected write) does not verify in this one.
void AppendBlock(std::string* file, uint64_t seed, uint32_t count, const std::string& body) {
  std::string header;
  ByteWriter w(&header);
  w.U64(kBlockMagic);
  w.U32(count);
  w.U32(static_cast<uint32_t>(body.size()));
  w.U64(XXH3_64bits_withSeed(body.data(), body.size(), seed));
  w.U64(XXH3_64bits_withSeed(header.data(), header.size(), seed));
  *file += header;
  *file += body;
}

// The block at `at` when its header verifies: its record count and body length.
bool ReadBlockHeader(const std::string& data, uint64_t seed, size_t at, uint32_t* count,
                     uint32_t* length) {
  if (data.size() - at < kBlockHeaderSize) return false;
  ByteReader r(data.data() + at, kBlockHeaderSize);
  if (r.U64() != kBlockMagic) return false;
  *count = r.U32();
  *length = r.U32();
  r.U64();
  if (r.U64() != XXH3_64bits_withSeed(data.data() + at, kBlockHeaderSize - 8, seed)) return false;
  return *length <= data.size() - at - kBlockHeaderSize;
}

// Decodes the records of the body at [begin, begin + length) when it verifies.
bool DecodeBlock(const std::string& data, uint64_t seed, size_t at, uint32_t count, uint32_t length,
                 std::vector<DecodedRecord>* out) {
  const char* body = data.data() + at + kBlockHeaderSize;
  ByteReader h(data.data() + at + 16, 8);
  if (h.U64() != XXH3_64bits_withSeed(body, length, seed)) return false;
  if (count > length) return false;
  ByteReader r(body, length);
  const size_t before = out->size();
  out->resize(before + count);
  for (size_t i = before; i < out->size(); ++i) {
    if (!RecordCodec::DecodeRecord(r, &(*out)[i])) {
      out->resize(before);  // checksummed yet undecodable: a broken writer; lost like damage
      return false;
    }
  }
  if (r.remaining() == 0) return true;
  out->resize(before);
  return false;
}

// Version 2's payload: every block that verifies. A damaged body is skipped by its header's
// length; a damaged header by a search for the next block magic whose header verifies.
void LoadBlocks(const std::string& data, uint64_t count, CheckpointData* out) {
  const uint64_t seed = out->first_journal;
  size_t at = kHeaderSize;
  const std::string_view magic(reinterpret_cast<const char*>(&kBlockMagic), 8);
  static_assert(std::endian::native == std::endian::little);
  while (at < data.size()) {
    uint32_t n = 0;
    uint32_t length = 0;
    if (ReadBlockHeader(data, seed, at, &n, &length)) {
      if (!DecodeBlock(data, seed, at, n, length, &out->records)) {
        if (out->damaged_bytes == 0) out->first_damage = at;
        out->damaged_bytes += kBlockHeaderSize + length;
      }
      at += kBlockHeaderSize + length;
      continue;
    }
    size_t next = std::string_view(data).find(magic, at + 1);
    uint32_t unused_n = 0;
    uint32_t unused_length = 0;
    while (next != std::string_view::npos &&
           !ReadBlockHeader(data, seed, next, &unused_n, &unused_length)) {
      next = std::string_view(data).find(magic, next + 1);
    }
    if (next == std::string_view::npos) next = data.size();
    if (out->damaged_bytes == 0) out->first_damage = at;
    out->damaged_bytes += next - at;
    at = next;
  }
  out->lost_records = count > out->records.size() ? count - out->records.size() : 0;
}

// Version 1's payload: one checksum over all of it.
Status LoadWholePayload(const std::string& path, const std::string& data, uint64_t count,
                        uint64_t payload_sum, CheckpointData* out) {
  const uint64_t payload_len = data.size() - kHeaderSize;
  if (payload_sum != XXH3_64bits(data.data() + kHeaderSize, payload_len)) {
    return Status::Corruption(path + ": payload checksum mismatch");
  }
  ByteReader pr(data.data() + kHeaderSize, payload_len);
  if (count > payload_len) return Status::Corruption(path + ": record count");
  out->records.resize(count);
  for (auto& rec : out->records) {
    if (!RecordCodec::DecodeRecord(pr, &rec)) return Status::Corruption(path + ": bad record");
  }
  if (pr.remaining() != 0) return Status::Corruption(path + ": trailing bytes");
  return Status::Ok();
}

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
  // The header goes in front once the payload is known; its room is kept so the payload (a
  // hundred MiB at a million names) is not copied.
  std::string file(kHeaderSize, '\0');
  uint64_t blocks = 0;
  std::string body;
  uint32_t in_body = 0;
  ByteWriter bw(&body);
  for (const ObjectRecord& rec : records) {
    RecordCodec::EncodeRecord(rec, bw);
    ++in_body;
    if (body.size() >= kBlockBytes) {
      AppendBlock(&file, first_journal, in_body, body);
      ++blocks;
      body.clear();
      in_body = 0;
    }
  }
  if (in_body > 0) {
    AppendBlock(&file, first_journal, in_body, body);
    ++blocks;
  }
  std::string header;
  ByteWriter w(&header);
  w.U64(kCheckpointMagic);
  w.U32(kBlockVersion);
  w.U32(0);
  w.U64(first_journal);
  w.U64(next_id);
  w.U64(records.size());
  w.U64(file.size() - kHeaderSize);
  w.U64(blocks);
  w.U64(XXH3_64bits(header.data(), header.size()));
  file.replace(0, kHeaderSize, header);
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
  const uint32_t version = r.U32();
  r.U32();
  CheckpointData out;
  out.first_journal = r.U64();
  out.next_id = r.U64();
  const uint64_t count = r.U64();
  const uint64_t payload_len = r.U64();
  const uint64_t payload_sum = r.U64();  // version 2: the block count
  const uint64_t header_sum = r.U64();
  if (header_sum != XXH3_64bits(data.data(), kHeaderSize - 8)) {
    return Status::Corruption(path + ": header checksum mismatch");
  }
  if (version != kWholePayloadVersion && version != kBlockVersion) {
    return Status::Corruption(path + ": version " + std::to_string(version) +
                              " is newer than this kvfs reads");
  }
  uint64_t generation = 0;
  if (ParseName(name, &generation) && generation != 0 && generation != out.first_journal) {
    return Status::Corruption(path + ": names journal " + std::to_string(out.first_journal));
  }
  if (version == kWholePayloadVersion) {
    if (payload_len != data.size() - kHeaderSize) {
      return Status::Corruption(path + ": payload length mismatch");
    }
    KVFS_RETURN_IF_ERROR(LoadWholePayload(path, data, count, payload_sum, &out));
    return out;
  }
  // A file cut short or grown behind kvfs's back needs no check of its own: a cut block and
  // added bytes fail their block checksums like a flipped bit.
  if (count > payload_len) return Status::Corruption(path + ": record count");
  out.records.reserve(count);  // at most one record per payload byte (checked above)
  LoadBlocks(data, count, &out);
  if (out.records.size() > count) return Status::Corruption(path + ": more records than counted");
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
