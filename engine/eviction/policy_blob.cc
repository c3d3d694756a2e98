#include "policy_blob.h"

#include <array>
#include <bit>
#include <cstring>

namespace kvfs::eviction {
namespace {

constexpr char kMagic[4] = {'K', 'V', 'E', 'P'};

constexpr std::array<uint32_t, 256> MakeCrcTable() {
  std::array<uint32_t, 256> table{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
    table[i] = c;
  }
  return table;
}
constexpr auto kCrcTable = MakeCrcTable();

uint64_t LoadLe(const char* p, int n) {
  uint64_t v = 0;
  for (int i = n - 1; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(p[i]);
  return v;
}

}  // namespace

uint32_t Crc32(std::string_view bytes) {
  uint32_t c = 0xFFFFFFFFu;
  for (char ch : bytes) c = kCrcTable[(c ^ static_cast<uint8_t>(ch)) & 0xFF] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

void BlobWriter::U32(uint32_t v) {
  for (int i = 0; i < 4; ++i) out_.push_back(static_cast<char>(v >> (8 * i)));
}
void BlobWriter::U64(uint64_t v) {
  for (int i = 0; i < 8; ++i) out_.push_back(static_cast<char>(v >> (8 * i)));
}
void BlobWriter::F64(double v) { U64(std::bit_cast<uint64_t>(v)); }

bool BlobReader::Take(size_t n, const char** p) {
  if (in_.size() < n) {
    in_ = {};
    return false;
  }
  *p = in_.data();
  in_.remove_prefix(n);
  return true;
}
bool BlobReader::U8(uint8_t* v) {
  const char* p;
  if (!Take(1, &p)) return false;
  *v = static_cast<uint8_t>(*p);
  return true;
}
bool BlobReader::U32(uint32_t* v) {
  const char* p;
  if (!Take(4, &p)) return false;
  *v = static_cast<uint32_t>(LoadLe(p, 4));
  return true;
}
bool BlobReader::U64(uint64_t* v) {
  const char* p;
  if (!Take(8, &p)) return false;
  *v = LoadLe(p, 8);
  return true;
}
bool BlobReader::F64(double* v) {
  uint64_t bits;
  if (!U64(&bits)) return false;
  *v = std::bit_cast<double>(bits);
  return true;
}

std::string SealPolicyBlob(std::string_view policy_name, std::string_view payload) {
  BlobWriter w;
  std::string out(kMagic, 4);
  w.U32(kPolicyBlobVersion);
  w.U8(static_cast<uint8_t>(policy_name.size()));
  w.U8(static_cast<uint8_t>(policy_name.size() >> 8));
  out += w.bytes();
  out += policy_name;
  BlobWriter len;
  len.U32(static_cast<uint32_t>(payload.size()));
  out += len.bytes();
  out += payload;
  BlobWriter crc;
  crc.U32(Crc32(out));
  out += crc.bytes();
  return out;
}

Result<std::string_view> OpenPolicyBlob(std::string_view blob, std::string_view policy_name) {
  if (blob.size() < 4 + 4 + 2 + 4 + 4) return Status::Corruption("policy blob too short");
  if (std::memcmp(blob.data(), kMagic, 4) != 0) return Status::Corruption("policy blob magic");
  const uint32_t stored_crc = static_cast<uint32_t>(LoadLe(blob.data() + blob.size() - 4, 4));
  if (Crc32(blob.substr(0, blob.size() - 4)) != stored_crc) {
    return Status::Corruption("policy blob checksum mismatch");
  }
  const uint32_t version = static_cast<uint32_t>(LoadLe(blob.data() + 4, 4));
  if (version != kPolicyBlobVersion) {
    return Status::Invalid("policy blob version " + std::to_string(version) + " unsupported");
  }
  const size_t name_len = LoadLe(blob.data() + 8, 2);
  size_t pos = 10;
  if (blob.size() < pos + name_len + 4 + 4) return Status::Corruption("policy blob truncated");
  std::string_view name = blob.substr(pos, name_len);
  if (name != policy_name) {
    return Status::Invalid("policy blob written by '" + std::string(name) + "', not '" +
                           std::string(policy_name) + "'");
  }
  pos += name_len;
  const size_t payload_len = LoadLe(blob.data() + pos, 4);
  pos += 4;
  if (blob.size() != pos + payload_len + 4) return Status::Corruption("policy blob length");
  return blob.substr(pos, payload_len);
}

}  // namespace kvfs::eviction
