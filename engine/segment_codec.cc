#include "segment_codec.h"

#include <lz4.h>
#include <xxhash.h>

#include <algorithm>
#include <cstring>
#include <string>

namespace kvfs {

uint64_t SegmentsDigest(const Layout* layout) {
  std::string le;
  if (layout) {
    le.reserve(layout->segments.size() * 8);
    for (const Segment& seg : layout->segments) {
      for (int shift = 0; shift < 64; shift += 8) {
        le.push_back(static_cast<char>((seg.checksum >> shift) & 0xff));
      }
    }
  }
  return XXH3_64bits(le.data(), le.size());
}

uint32_t SegmentRawLen(uint64_t size, uint64_t index, uint32_t segment_size) {
  const uint64_t start = index * segment_size;
  return start >= size ? 0 : static_cast<uint32_t>(std::min<uint64_t>(segment_size, size - start));
}

Status CheckLayoutShape(const Layout& layout, uint32_t segment_size) {
  const uint64_t count = (layout.size + segment_size - 1) / segment_size;
  uint64_t next = 0;  // the smallest index the next segment may have
  for (const Segment& s : layout.segments) {
    if (s.index < next || s.index >= count) {
      return Status::Invalid("layout segment " + std::to_string(s.index) +
                             " is out of order or past the end of the file");
    }
    if (s.raw_len != SegmentRawLen(layout.size, s.index, segment_size)) {
      return Status::Invalid("layout segment " + std::to_string(s.index) + " holds " +
                             std::to_string(s.raw_len) + " bytes, not its share of the file");
    }
    next = uint64_t{s.index} + 1;
  }
  return Status::Ok();
}

size_t SegmentCodec::ScratchSize(uint32_t segment_size) {
  return static_cast<size_t>(LZ4_compressBound(static_cast<int>(segment_size))) + 4096;
}

uint64_t SegmentCodec::Checksum(const void* data, size_t len) { return XXH3_64bits(data, len); }

EncodedSegment SegmentCodec::Encode(Compression mode, const uint8_t* raw, uint32_t raw_len,
                                    uint8_t* scratch, size_t scratch_len) {
  EncodedSegment out;
  out.codec = Codec::kNone;
  out.data = raw;
  out.stored_len = raw_len;
  if (mode != Compression::kOff && raw_len > 0 && scratch != nullptr) {
    const int n =
        LZ4_compress_default(reinterpret_cast<const char*>(raw), reinterpret_cast<char*>(scratch),
                             static_cast<int>(raw_len), static_cast<int>(scratch_len));
    const uint64_t limit = mode == Compression::kAuto ? raw_len - raw_len / 8 : raw_len - 1;
    if (n > 0 && static_cast<uint64_t>(n) <= limit) {
      out.codec = Codec::kLz4;
      out.data = scratch;
      out.stored_len = static_cast<uint32_t>(n);
    }
  }
  out.checksum = Checksum(out.data, out.stored_len);
  return out;
}

Result<const uint8_t*> SegmentCodec::Open(const Segment& seg, const uint8_t* stored,
                                          uint8_t* decode_buf) {
  if (Checksum(stored, seg.stored_len) != seg.checksum) {
    return Status::Corruption("checksum mismatch on device " + std::to_string(seg.device) +
                              " at offset " + std::to_string(seg.offset) + " (" +
                              std::to_string(seg.stored_len) + " bytes)");
  }
  switch (seg.codec) {
    case Codec::kNone:
      if (seg.stored_len != seg.raw_len) return Status::Corruption("raw segment length mismatch");
      return stored;
    case Codec::kLz4: {
      const int n = LZ4_decompress_safe(
          reinterpret_cast<const char*>(stored), reinterpret_cast<char*>(decode_buf),
          static_cast<int>(seg.stored_len), static_cast<int>(seg.raw_len));
      if (n < 0 || static_cast<uint32_t>(n) != seg.raw_len) {
        return Status::Corruption("lz4 segment does not decode to its length");
      }
      return static_cast<const uint8_t*>(decode_buf);
    }
  }
  return Status::Corruption("unknown segment codec " + std::to_string(int(seg.codec)));
}

Status SegmentCodec::Decode(const Segment& seg, const uint8_t* stored, uint8_t* out) {
  KVFS_ASSIGN_OR_RETURN(const uint8_t* raw, Open(seg, stored, out));
  if (raw != out) std::memcpy(out, raw, seg.raw_len);
  return Status::Ok();
}

}  // namespace kvfs
