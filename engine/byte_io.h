// ByteWriter/ByteReader: little-endian fixed-width fields for the engine's on-disk formats
// (superblock, journal records, checkpoint). The reader never reads past its end: it latches a
// failure instead, so a truncated or corrupt record decodes to an error, not to garbage.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace kvfs {

class ByteWriter {
 public:
  explicit ByteWriter(std::string* out) : out_(out) {}
  void U8(uint8_t v) { out_->push_back(static_cast<char>(v)); }
  void U16(uint16_t v) { Fixed(v); }
  void U32(uint32_t v) { Fixed(v); }
  void U64(uint64_t v) { Fixed(v); }
  void I64(int64_t v) { Fixed(static_cast<uint64_t>(v)); }
  void Bytes(const void* p, size_t n) { out_->append(static_cast<const char*>(p), n); }
  void Str(std::string_view s) {
    U32(static_cast<uint32_t>(s.size()));
    Bytes(s.data(), s.size());
  }

 private:
  template <typename T>
  void Fixed(T v) {
    char b[sizeof(T)];
    for (size_t i = 0; i < sizeof(T); ++i) b[i] = static_cast<char>((v >> (8 * i)) & 0xff);
    out_->append(b, sizeof(T));
  }
  std::string* out_;
};

class ByteReader {
 public:
  ByteReader(const void* data, size_t len)
      : p_(static_cast<const uint8_t*>(data)), end_(p_ + len) {}
  bool ok() const { return ok_; }
  size_t remaining() const { return static_cast<size_t>(end_ - p_); }
  uint8_t U8() { return Fixed<uint8_t>(); }
  uint16_t U16() { return Fixed<uint16_t>(); }
  uint32_t U32() { return Fixed<uint32_t>(); }
  uint64_t U64() { return Fixed<uint64_t>(); }
  int64_t I64() { return static_cast<int64_t>(Fixed<uint64_t>()); }
  void Bytes(void* out, size_t n) {
    if (!Need(n)) return;
    std::memcpy(out, p_, n);
    p_ += n;
  }
  std::string Str(size_t max_len) {
    const uint32_t n = U32();
    if (n > max_len || !Need(n)) {
      ok_ = false;
      return {};
    }
    std::string s(reinterpret_cast<const char*>(p_), n);
    p_ += n;
    return s;
  }

 private:
  bool Need(size_t n) {
    if (!ok_ || remaining() < n) ok_ = false;
    return ok_;
  }
  template <typename T>
  T Fixed() {
    if (!Need(sizeof(T))) return 0;
    T v = 0;
    for (size_t i = 0; i < sizeof(T); ++i) v |= static_cast<T>(static_cast<T>(p_[i]) << (8 * i));
    p_ += sizeof(T);
    return v;
  }
  const uint8_t* p_;
  const uint8_t* end_;
  bool ok_ = true;
};

}  // namespace kvfs
