// CRC32C (Castagnoli) for frame headers and chunk data (kvfs/wire.h).
//
// Chunk data is checksummed by both ends of every GET and PUT, on the same cores that move the
// bytes, so its speed is part of the remote read's. The SSE4.2 crc32 instruction has a latency
// of three cycles and a throughput of one, so one dependency chain runs at a third of what the
// unit can do: large inputs are cut into three interleaved streams over adjacent blocks whose
// CRCs are then combined (CRC is linear: running a register over n zero bytes is a fixed 32x32
// bit matrix, applied here with four byte tables). Small inputs and CPUs without SSE4.2 take the
// single-stream and table paths.
#include <array>
#include <cstring>

#include "kvfs/wire.h"

namespace kvfs::wire {
namespace {

constexpr uint32_t kPoly = 0x82F63B78u;  // reflected Castagnoli polynomial

// Register update over `n` bytes, one byte at a time: the fallback, and the reference the
// hardware paths are tested against. Works on the raw register (no pre/post inversion).
uint32_t TableUpdate(uint32_t reg, const uint8_t* p, size_t n) {
  static const auto kTable = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ kPoly : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  for (size_t i = 0; i < n; ++i) reg = kTable[(reg ^ p[i]) & 0xff] ^ (reg >> 8);
  return reg;
}

#if defined(__x86_64__)
// Bytes per stream per round of the three-way loop. Large enough that the two shifts per round
// cost nothing, small enough that the tail left to the single stream stays short.
constexpr size_t kBlock = 8192;

__attribute__((target("sse4.2"))) uint32_t HwUpdate(uint32_t reg, const uint8_t* p, size_t n) {
  uint64_t crc = reg;
  while (n >= 8) {
    uint64_t v;
    std::memcpy(&v, p, 8);
    crc = __builtin_ia32_crc32di(crc, v);
    p += 8;
    n -= 8;
  }
  uint32_t c = static_cast<uint32_t>(crc);
  while (n-- > 0) c = __builtin_ia32_crc32qi(c, *p++);
  return c;
}

// The linear map "run the register over `zeros` zero bytes", as four byte-indexed tables.
struct ZeroShift {
  std::array<std::array<uint32_t, 256>, 4> t{};
  explicit ZeroShift(size_t zeros) {
    static const std::array<uint8_t, 2 * kBlock> kZeros{};
    uint32_t basis[32];
    for (int bit = 0; bit < 32; ++bit) basis[bit] = TableUpdate(1u << bit, kZeros.data(), zeros);
    for (int k = 0; k < 4; ++k) {
      for (uint32_t b = 0; b < 256; ++b) {
        uint32_t v = 0;
        for (int i = 0; i < 8; ++i) {
          if (b & (1u << i)) v ^= basis[8 * k + i];
        }
        t[static_cast<size_t>(k)][b] = v;
      }
    }
  }
  uint32_t operator()(uint32_t reg) const {
    return t[0][reg & 0xff] ^ t[1][(reg >> 8) & 0xff] ^ t[2][(reg >> 16) & 0xff] ^ t[3][reg >> 24];
  }
};

__attribute__((target("sse4.2"))) uint32_t HwUpdate3(uint32_t reg, const uint8_t* p, size_t n) {
  static const ZeroShift kShift1(kBlock), kShift2(2 * kBlock);
  while (n >= 3 * kBlock) {
    uint64_t a = reg, b = 0, c = 0;
    const uint8_t* pa = p;
    const uint8_t* pb = p + kBlock;
    const uint8_t* pc = p + 2 * kBlock;
    for (size_t i = 0; i < kBlock; i += 8) {
      uint64_t va, vb, vc;
      std::memcpy(&va, pa + i, 8);
      std::memcpy(&vb, pb + i, 8);
      std::memcpy(&vc, pc + i, 8);
      a = __builtin_ia32_crc32di(a, va);
      b = __builtin_ia32_crc32di(b, vb);
      c = __builtin_ia32_crc32di(c, vc);
    }
    // crc(A|B|C) from crc(A), crc(B), crc(C) started at 0: shift each past what follows it.
    reg = kShift2(static_cast<uint32_t>(a)) ^ kShift1(static_cast<uint32_t>(b)) ^
          static_cast<uint32_t>(c);
    p += 3 * kBlock;
    n -= 3 * kBlock;
  }
  return HwUpdate(reg, p, n);
}
#endif

}  // namespace

uint32_t Crc32cPortable(const void* data, size_t n) {
  return ~TableUpdate(~0u, static_cast<const uint8_t*>(data), n);
}

uint32_t Crc32cExtend(uint32_t start, const void* data, size_t n) {
  const auto* p = static_cast<const uint8_t*>(data);
#if defined(__x86_64__)
  static const bool kHardware = __builtin_cpu_supports("sse4.2");
  if (kHardware) return ~(n >= 3 * kBlock ? HwUpdate3(~start, p, n) : HwUpdate(~start, p, n));
#endif
  return ~TableUpdate(~start, p, n);
}

uint32_t Crc32c(const void* data, size_t n) { return Crc32cExtend(0, data, n); }

}  // namespace kvfs::wire
