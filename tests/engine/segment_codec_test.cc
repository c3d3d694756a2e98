#include "segment_codec.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

namespace kvfs {
namespace {

std::vector<uint8_t> Compressible(size_t n) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>((i / 64) % 7);
  return v;
}

std::vector<uint8_t> Random(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> v(n);
  for (auto& b : v) b = static_cast<uint8_t>(rng());
  return v;
}

Segment ToSegment(const EncodedSegment& e, uint32_t raw_len) {
  Segment s;
  s.codec = e.codec;
  s.stored_len = e.stored_len;
  s.raw_len = raw_len;
  s.checksum = e.checksum;
  return s;
}

TEST(SegmentCodecTest, RawRoundTrip) {
  auto raw = Random(100000, 1);
  std::vector<uint8_t> scratch(SegmentCodec::ScratchSize(1 << 20));
  auto enc = SegmentCodec::Encode(Compression::kOff, raw.data(), raw.size(), scratch.data(),
                                  scratch.size());
  EXPECT_EQ(enc.codec, Codec::kNone);
  EXPECT_EQ(enc.stored_len, raw.size());
  std::vector<uint8_t> out(raw.size());
  ASSERT_TRUE(SegmentCodec::Decode(ToSegment(enc, raw.size()), enc.data, out.data()).ok());
  EXPECT_EQ(out, raw);
}

TEST(SegmentCodecTest, Lz4RoundTripAndPartialDecode) {
  auto raw = Compressible(1 << 20);
  std::vector<uint8_t> scratch(SegmentCodec::ScratchSize(1 << 20));
  auto enc = SegmentCodec::Encode(Compression::kLz4, raw.data(), raw.size(), scratch.data(),
                                  scratch.size());
  ASSERT_EQ(enc.codec, Codec::kLz4);
  EXPECT_LT(enc.stored_len, raw.size() / 8);
  Segment seg = ToSegment(enc, raw.size());
  std::vector<uint8_t> out(raw.size());
  ASSERT_TRUE(SegmentCodec::Decode(seg, enc.data, out.data()).ok());
  EXPECT_EQ(out, raw);
  // Open decodes into the caller's buffer and hands back where the raw bytes are.
  std::vector<uint8_t> decoded(raw.size());
  auto opened = SegmentCodec::Open(seg, enc.data, decoded.data());
  ASSERT_TRUE(opened.ok());
  EXPECT_EQ(*opened, decoded.data());
  EXPECT_TRUE(std::equal(raw.begin(), raw.end(), *opened));
}

TEST(SegmentCodecTest, OpenServesRawSegmentsInPlace) {
  auto raw = Random(1 << 16, 3);
  Segment seg;
  seg.stored_len = seg.raw_len = raw.size();
  seg.checksum = SegmentCodec::Checksum(raw.data(), raw.size());
  auto opened = SegmentCodec::Open(seg, raw.data(), nullptr);
  ASSERT_TRUE(opened.ok());
  EXPECT_EQ(*opened, raw.data());  // verified where it lies: no copy
}

TEST(SegmentCodecTest, AutoKeepsRawWhenLz4SavesTooLittle) {
  auto raw = Random(1 << 16, 2);
  std::vector<uint8_t> scratch(SegmentCodec::ScratchSize(1 << 16));
  auto enc = SegmentCodec::Encode(Compression::kAuto, raw.data(), raw.size(), scratch.data(),
                                  scratch.size());
  EXPECT_EQ(enc.codec, Codec::kNone);
  EXPECT_EQ(enc.data, raw.data());
}

TEST(SegmentCodecTest, ChecksumMismatchIsDetectedForRawAndLz4) {
  for (Compression mode : {Compression::kOff, Compression::kLz4}) {
    auto raw = Compressible(1 << 16);
    std::vector<uint8_t> scratch(SegmentCodec::ScratchSize(1 << 16));
    auto enc = SegmentCodec::Encode(mode, raw.data(), raw.size(), scratch.data(), scratch.size());
    std::vector<uint8_t> stored(enc.data, enc.data + enc.stored_len);
    stored[stored.size() / 2] ^= 0x01;
    std::vector<uint8_t> out(raw.size(), 0xAA);
    Status st = SegmentCodec::Decode(ToSegment(enc, raw.size()), stored.data(), out.data());
    EXPECT_EQ(st.err(), EIO);
    EXPECT_NE(st.message().find("checksum mismatch"), std::string::npos);
    EXPECT_TRUE(st.IsCorruption());
    EXPECT_EQ(out[0], 0xAA);  // nothing written on a mismatch
    auto opened = SegmentCodec::Open(ToSegment(enc, raw.size()), stored.data(), out.data());
    EXPECT_EQ(opened.status().err(), EIO);
    EXPECT_TRUE(opened.status().IsCorruption());
  }
}

}  // namespace
}  // namespace kvfs
