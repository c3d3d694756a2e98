// CRC32C: the three-stream hardware path (inputs of 24 KiB and more) and the single-stream one
// agree with the byte table on every length, alignment and split point that matters.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "kvfs/wire.h"

namespace kvfs::wire {
namespace {

std::vector<uint8_t> RandomBytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> v(n);
  for (auto& b : v) b = static_cast<uint8_t>(rng());
  return v;
}

TEST(Crc32c, LargeInputsMatchTheTableAtEveryBoundary) {
  const auto buf = RandomBytes((3 << 20) + 77, 7);
  // Around one and several three-block rounds (3 x 8 KiB), and a 1 MiB receive piece.
  for (size_t n : {size_t{0}, size_t{1}, size_t{24575}, size_t{24576}, size_t{24577},
                   size_t{49152 + 9}, size_t{1} << 20, (size_t{3} << 20) + 77}) {
    for (size_t misalign : {size_t{0}, size_t{3}}) {
      if (misalign + n > buf.size()) continue;
      EXPECT_EQ(Crc32c(buf.data() + misalign, n), Crc32cPortable(buf.data() + misalign, n))
          << "n=" << n << " misalign=" << misalign;
    }
  }
}

TEST(Crc32c, ExtendingPieceByPieceEqualsOnePass) {
  const auto buf = RandomBytes(5 << 20, 11);
  const uint32_t whole = Crc32c(buf.data(), buf.size());
  EXPECT_EQ(whole, Crc32cPortable(buf.data(), buf.size()));
  for (size_t piece : {size_t{1} << 20, size_t{100000}, size_t{24576}, size_t{4095}}) {
    uint32_t crc = 0;
    for (size_t done = 0; done < buf.size(); done += piece) {
      crc = Crc32cExtend(crc, buf.data() + done, std::min(piece, buf.size() - done));
    }
    EXPECT_EQ(crc, whole) << "piece=" << piece;
  }
}

TEST(Crc32c, DetectsASingleFlippedBitInALargeBuffer) {
  auto buf = RandomBytes(1 << 20, 3);
  const uint32_t before = Crc32c(buf.data(), buf.size());
  buf[500000] ^= 0x10;
  EXPECT_NE(Crc32c(buf.data(), buf.size()), before);
}

}  // namespace
}  // namespace kvfs::wire
