// RecordCodec: the byte encoding of ObjectRecords and MetaBatches inside journal records and
// checkpoints. Layouts decode to plain Layout objects; the caller decides who owns them (the
// recovery code adopts them into the engine's space only once replay is complete).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "byte_io.h"
#include "kvfs/chunk_store.h"
#include "kvfs/object.h"
#include "kvfs/status.h"

namespace kvfs {

// A record as decoded from disk: the layout is not yet a LayoutRef.
struct DecodedRecord {
  ObjectRecord record;  // record.layout is null here
  std::unique_ptr<Layout> layout;
};

struct DecodedBatch {
  std::vector<DecodedRecord> puts;
  std::vector<ObjectId> removes;
};

class RecordCodec {
 public:
  static void EncodeRecord(const ObjectRecord& rec, ByteWriter& w);
  static bool DecodeRecord(ByteReader& r, DecodedRecord* out);

  static std::string EncodeBatch(const MetaBatch& batch);
  static Status DecodeBatch(const std::string& payload, DecodedBatch* out);
};

}  // namespace kvfs
