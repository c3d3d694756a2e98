// Little-endian field encoding with explicit lengths, used by the wire message codecs. The
// reader is bounds-checked on every field: once a read would run past the end it fails and stays
// failed, so a decoder can read all fields and check ok() once.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>

namespace kvfs::wire {

class ByteWriter {
 public:
  explicit ByteWriter(std::string* out) : out_(out) {}
  void U8(uint8_t v) { out_->push_back(static_cast<char>(v)); }
  void U16(uint16_t v) { Fixed(v, 2); }
  void U32(uint32_t v) { Fixed(v, 4); }
  void U64(uint64_t v) { Fixed(v, 8); }
  void I32(int32_t v) { U32(static_cast<uint32_t>(v)); }
  void I64(int64_t v) { U64(static_cast<uint64_t>(v)); }
  void Raw(const void* p, size_t n) { out_->append(static_cast<const char*>(p), n); }
  // A string as u32 length + bytes.
  void Str(const std::string& s) {
    U32(static_cast<uint32_t>(s.size()));
    Raw(s.data(), s.size());
  }

 private:
  void Fixed(uint64_t v, int bytes) {
    for (int i = 0; i < bytes; ++i) out_->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  }
  std::string* out_;
};

class ByteReader {
 public:
  explicit ByteReader(std::span<const uint8_t> in) : in_(in) {}
  uint8_t U8() { return static_cast<uint8_t>(Fixed(1)); }
  uint16_t U16() { return static_cast<uint16_t>(Fixed(2)); }
  uint32_t U32() { return static_cast<uint32_t>(Fixed(4)); }
  uint64_t U64() { return Fixed(8); }
  int32_t I32() { return static_cast<int32_t>(U32()); }
  int64_t I64() { return static_cast<int64_t>(U64()); }
  bool Bool() {
    uint8_t v = U8();
    if (v > 1) ok_ = false;
    return v == 1;
  }
  void Raw(void* p, size_t n) {
    if (!Need(n)) {
      std::memset(p, 0, n);
      return;
    }
    std::memcpy(p, in_.data() + pos_, n);
    pos_ += n;
  }
  // A u32-length string of at most `max` bytes; `no_nul` rejects embedded NUL bytes (paths).
  std::string Str(size_t max, bool no_nul = true) {
    uint32_t n = U32();
    if (!ok_ || n > max || !Need(n)) {
      ok_ = false;
      return {};
    }
    std::string s(reinterpret_cast<const char*>(in_.data() + pos_), n);
    pos_ += n;
    if (no_nul && s.find('\0') != std::string::npos) ok_ = false;
    return s;
  }
  size_t remaining() const { return ok_ ? in_.size() - pos_ : 0; }
  void Fail() { ok_ = false; }
  bool ok() const { return ok_; }
  // Everything read and nothing left over.
  bool Done() const { return ok_ && pos_ == in_.size(); }

 private:
  bool Need(size_t n) {
    if (!ok_ || in_.size() - pos_ < n) ok_ = false;
    return ok_;
  }
  uint64_t Fixed(int bytes) {
    if (!Need(static_cast<size_t>(bytes))) return 0;
    uint64_t v = 0;
    for (int i = 0; i < bytes; ++i) v |= static_cast<uint64_t>(in_[pos_ + i]) << (8 * i);
    pos_ += static_cast<size_t>(bytes);
    return v;
  }
  std::span<const uint8_t> in_;
  size_t pos_ = 0;
  bool ok_ = true;
};

}  // namespace kvfs::wire
