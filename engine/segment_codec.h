// SegmentCodec: turns one segment of raw bytes into its stored payload (raw or lz4) with the
// xxh3 checksum of the stored bytes, and back. The checksum covers what is on the device, so a
// corrupt payload is rejected before lz4 ever parses it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "kvfs/local_engine.h"
#include "kvfs/object.h"
#include "kvfs/status.h"

namespace kvfs {

struct EncodedSegment {
  Codec codec = Codec::kNone;
  const uint8_t* data = nullptr;  // the stored payload: `raw` itself or `scratch`
  uint32_t stored_len = 0;
  uint64_t checksum = 0;
};

// Raw bytes of segment `index` in a file of `size` bytes (0 past the end).
uint32_t SegmentRawLen(uint64_t size, uint64_t index, uint32_t segment_size);
// The digest of a version's content from its segments' stored checksums (user.kvfs.checksum):
// no data is read. Null or empty: the digest of nothing.
uint64_t SegmentsDigest(const Layout* layout);
// Checks what every reader relies on: segments in strictly ascending index order, each inside
// the file and holding exactly its share of raw bytes. EINVAL otherwise.
Status CheckLayoutShape(const Layout& layout, uint32_t segment_size);

class SegmentCodec {
 public:
  // Scratch bytes Encode needs for a segment of `segment_size` raw bytes.
  static size_t ScratchSize(uint32_t segment_size);
  static uint64_t Checksum(const void* data, size_t len);

  // kLz4 keeps lz4 whenever it is smaller at all, kAuto only when it saves at least 1/8 (less
  // is not worth the decode cost on every read). Otherwise the raw bytes are stored as they are.
  static EncodedSegment Encode(Compression mode, const uint8_t* raw, uint32_t raw_len,
                               uint8_t* scratch, size_t scratch_len);

  // The one place a stored segment is checked and decoded: verifies `stored` against
  // `seg.checksum`, then yields the segment's seg.raw_len raw bytes: `stored` itself when it is
  // stored raw (no copy), else decoded into `decode_buf` (seg.raw_len bytes). Every failure
  // (checksum mismatch, a length or codec that does not fit) is a Corruption status.
  static Result<const uint8_t*> Open(const Segment& seg, const uint8_t* stored,
                                     uint8_t* decode_buf);

  // Open, then the raw bytes copied into `out` (seg.raw_len bytes; left untouched on error).
  static Status Decode(const Segment& seg, const uint8_t* stored, uint8_t* out);
};

}  // namespace kvfs
