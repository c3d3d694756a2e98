#include "policy_state.h"

#include <xxhash.h>

#include "atomic_file.h"
#include "byte_io.h"

namespace kvfs {
namespace {

constexpr uint64_t kMagic = 0x3150564553465656ull;  // arbitrary tag, checked on load
constexpr uint32_t kVersion = 1;

}  // namespace

Status PolicyStateFile::Write(FileSystem& fs, const std::string& dir, const PolicyState& state) {
  std::string file;
  ByteWriter w(&file);
  w.U64(kMagic);
  w.U32(kVersion);
  w.Str(state.policy);
  w.U64(state.ids.size());
  for (ObjectId id : state.ids) w.U64(id);
  w.Str(state.blob);
  w.U64(XXH3_64bits(file.data(), file.size()));

  return WriteFileAtomically(fs, dir, kFileName, file);
}

Result<PolicyState> PolicyStateFile::Load(FileSystem& fs, const std::string& dir) {
  const std::string path = dir + "/" + kFileName;
  KVFS_ASSIGN_OR_RETURN(std::string data, ReadWholeFile(fs, path));
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
