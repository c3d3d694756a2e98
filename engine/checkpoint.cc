#include "checkpoint.h"

#include <xxhash.h>

#include <cstdio>

#include "atomic_file.h"
#include "byte_io.h"
#include "journal.h"

namespace kvfs {
namespace {

constexpr uint64_t kCheckpointMagic = 0x31504b435346564bull;  // "KVFSCKP1" little-endian
constexpr uint32_t kCheckpointVersion = 1;
constexpr size_t kHeaderSize = 64;

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

  return WriteFileAtomically(dir, kFileName, file);
}

Result<CheckpointData> Checkpoint::Load(const std::string& dir) {
  const std::string path = dir + "/" + kFileName;
  KVFS_ASSIGN_OR_RETURN(std::string data, ReadWholeFile(path));
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
