// LocalEngineImpl's data path: new chunk writers, reads (with read-ahead readers), Verify, and
// dropping a record whose stored bytes turned out bad. Split out of local_engine.cc to keep
// each file to one job.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstring>

#include "chunk_writer.h"
#include "engine_eviction.h"
#include "local_engine_impl.h"
#include "record_codec.h"
#include "segment_codec.h"

namespace kvfs {
Result<std::unique_ptr<ChunkWriter>> LocalEngineImpl::NewWriter(LayoutRef base) {
  if (base && !ctx_->space().Owns(base)) {
    return Status::Invalid("base layout was not made by this engine");
  }
  return std::unique_ptr<ChunkWriter>(
      std::make_unique<EngineChunkWriter>(ctx_, std::move(base), read_ahead_));
}

Result<size_t> LocalEngineImpl::Read(const LayoutRef& layout, uint64_t offset, void* out,
                                     size_t len) {
  Result<size_t> r = ReadChecked(layout, offset, out, len);
  // Bad stored bytes, not a failed (maybe transient) device read: the record goes.
  if (!r.ok() && r.status().IsCorruption()) DropCorrupt(layout, r.status());
  return r;
}

Result<size_t> LocalEngineImpl::ReadForPeer(const LayoutRef& layout, uint64_t offset, void* out,
                                            size_t len, std::vector<DataDigest>* digests) {
  if (digests == nullptr) return Status::Invalid("ReadForPeer without digests");
  const size_t first = digests->size();
  Result<size_t> r = ReadChecked(layout, offset, out, len, digests);
  if (!r.ok()) {
    digests->resize(first);
    if (r.status().IsCorruption()) DropCorrupt(layout, r.status());
  }
  return r;
}

Result<std::unique_ptr<ChunkReader>> LocalEngineImpl::NewReader(LayoutRef layout) {
  // 8 segments ahead: enough to keep the device busy (fio peaks at depth 8 here) while the
  // window stays at 12 MiB per sequentially read file.
  constexpr uint32_t kReadAheadDepth = 8;
  if (!layout || !ctx_->space().Owns(layout)) {
    return Status::Invalid("layout was not made by this engine");
  }
  return std::unique_ptr<ChunkReader>(
      std::make_unique<SegmentReadAhead>(ctx_, std::move(layout), read_ahead_, kReadAheadDepth));
}

Result<uint64_t> LocalEngineImpl::ContentChecksum(const LayoutRef& layout) const {
  // The stored checksums cover the stored bytes: equal content under the same compression
  // setting gives the same digest.
  if (layout && !ctx_->space().Owns(layout)) {
    return Status::Invalid("layout was not made by this engine");
  }
  return SegmentsDigest(layout.get());
}

uint64_t LocalEngineImpl::DiskBytes(const Layout& layout) const {
  return AllocatedBytes(layout);  // the stored extents: a hole takes none
}

Status LocalEngineImpl::Verify(const LayoutRef& layout) {
  if (!layout) return Status::Ok();
  const uint64_t seg = options_.segment_size;
  std::vector<uint8_t> buf(seg);
  // Only what is stored: holes hold nothing to check, however large the file.
  for (const Segment& s : layout->segments) {
    if (s.stored_len == 0) continue;
    Result<size_t> r = Read(layout, uint64_t{s.index} * seg, buf.data(), buf.size());
    if (!r.ok()) return r.status();
  }
  return Status::Ok();
}

void LocalEngineImpl::DropCorrupt(const LayoutRef& layout, const Status& why) {
  ObjectId id = kInvalidId;
  {
    std::lock_guard lock(mu_);
    id = index_.FindByLayout(layout.get());
    if (id == kInvalidId || stop_ || !commit_error_.ok()) {
      // Already dropped (a second reader of the same file) or replaced: nothing to journal.
      id = kInvalidId;
    } else {
      MetaBatch batch;
      batch.removes.push_back(id);
      std::string encoded;
      Journal::EncodeRecord(RecordType::kBatch, RecordCodec::EncodeBatch(batch), &encoded);
      std::vector<LayoutRef> dropped;
      IndexUndo undo = IndexUndo::Capture(index_, batch);
      index_.Apply(batch, &dropped);
      // Not waited for: a crash before the commit only means the next read finds it again.
      Enqueue(std::move(encoded), std::move(dropped), std::move(undo));
      work_cv_.notify_one();
    }
  }
  if (id == kInvalidId) return;
  corrupt_dropped_.fetch_add(1);
  spdlog::error("engine: dropped object {}: {}", id, why.message());
  if (StoreListener* l = listener_.load()) l->OnDropped(id);
}

Result<size_t> LocalEngineImpl::ReadChecked(const LayoutRef& layout, uint64_t offset, void* out,
                                            size_t len, std::vector<DataDigest>* digests) {
  if (!layout || offset >= layout->size || len == 0) return size_t{0};
  if (!ctx_->space().Owns(layout)) return Status::Invalid("layout was not made by this engine");
  const uint64_t seg = options_.segment_size;
  const uint64_t end = std::min<uint64_t>(layout->size, offset + len);
  std::vector<SegmentRead> reads;
  auto* dst = static_cast<uint8_t*>(out);
  // For a peer: one digest per piece, in order. A whole segment stored raw goes with its stored
  // checksum, unchecked here; any other piece (a hole, part of a segment, an lz4 segment) is
  // checked as every read is, then digested (`to_digest`: where it starts, its digest's index).
  std::vector<std::pair<const uint8_t*, size_t>> to_digest;
  for (uint64_t j = offset / seg; j * seg < end; ++j) {
    const uint64_t start = j * seg;
    const uint32_t from = static_cast<uint32_t>(std::max(offset, start) - start);
    const uint32_t to = static_cast<uint32_t>(std::min(end - start, seg));
    uint8_t* const piece = dst + (start + from - offset);
    const Segment* s = layout->Find(j);
    bool as_stored = false;
    if (!s) {  // a hole
      std::memset(piece, 0, to - from);
    } else {
      if (to > s->raw_len) return Status::Corruption("segment shorter than the layout says");
      SegmentRead r{s, from, to - from, piece};
      r.peer_checks = as_stored = digests && r.WholeRaw();
      reads.push_back(r);
    }
    if (!digests) continue;
    digests->push_back({to - from, as_stored ? s->checksum : 0});
    if (!as_stored) to_digest.emplace_back(piece, digests->size() - 1);
  }
  ctx_->counters().reads.fetch_add(1);
  KVFS_RETURN_IF_ERROR(ctx_->ReadSegments(reads));
  for (const auto& [piece, i] : to_digest) {
    (*digests)[i].xxh3 = SegmentCodec::Checksum(piece, (*digests)[i].length);
  }
  return static_cast<size_t>(end - offset);
}

}  // namespace kvfs
