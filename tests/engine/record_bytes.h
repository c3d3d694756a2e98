// One record through the engine's record codec (record_codec.h), for the tests of its
// encoding (record_links_test.cc, record_xattrs_test.cc).
#pragma once

#include <string>

#include "record_codec.h"

namespace kvfs::record_test {

inline std::string Encode(const ObjectRecord& rec) {
  std::string out;
  ByteWriter w(&out);
  RecordCodec::EncodeRecord(rec, w);
  return out;
}

// False unless `bytes` is exactly one record that decodes.
inline bool Decode(const std::string& bytes, ObjectRecord* out) {
  ByteReader r(bytes.data(), bytes.size());
  DecodedRecord d;
  if (!RecordCodec::DecodeRecord(r, &d) || r.remaining() != 0) return false;
  *out = d.record;
  return true;
}

}  // namespace kvfs::record_test
