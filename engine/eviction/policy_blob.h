// The envelope every policy persists its state in:
//   "KVEP" | u32 version | u16 name length | name | u32 payload length | payload | u32 crc32
// little-endian. Recover() checks magic, version, policy name, lengths and the CRC before it
// parses a byte of payload, so a torn or foreign blob is rejected instead of half-loaded.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "kvfs/status.h"

namespace kvfs::eviction {

constexpr uint32_t kPolicyBlobVersion = 1;

uint32_t Crc32(std::string_view bytes);

// Appends fixed-width little-endian fields.
class BlobWriter {
 public:
  void U8(uint8_t v) { out_.push_back(static_cast<char>(v)); }
  void U32(uint32_t v);
  void U64(uint64_t v);
  void F64(double v);
  const std::string& bytes() const { return out_; }

 private:
  std::string out_;
};

// Reads fields back; every read checks the remaining length and latches a failure.
class BlobReader {
 public:
  explicit BlobReader(std::string_view bytes) : in_(bytes) {}
  bool U8(uint8_t* v);
  bool U32(uint32_t* v);
  bool U64(uint64_t* v);
  bool F64(double* v);
  bool done() const { return in_.empty(); }

 private:
  bool Take(size_t n, const char** p);
  std::string_view in_;
};

std::string SealPolicyBlob(std::string_view policy_name, std::string_view payload);
// The payload of a blob written by `policy_name`, or a Corruption/Invalid status.
Result<std::string_view> OpenPolicyBlob(std::string_view blob, std::string_view policy_name);

}  // namespace kvfs::eviction
