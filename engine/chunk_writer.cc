#include "chunk_writer.h"

#include <algorithm>
#include <cstring>

#include "segment_codec.h"

namespace kvfs {
namespace {

constexpr uint64_t kMaxSegments = 1ull << 24;  // 16 TiB at 1 MiB segments
constexpr uint32_t kWindow = 4;                // streaming segment writes in flight per writer

}  // namespace

EngineChunkWriter::EngineChunkWriter(std::shared_ptr<EngineContext> ctx, LayoutRef base,
                                     std::shared_ptr<ReadAheadPool> buffers)
    : ctx_(std::move(ctx)),
      base_(std::move(base)),
      seg_size_(ctx_->segment_size()),
      buf_bytes_((seg_size_ + 4095u) / 4096u * 4096u),
      first_device_(ctx_->NextFirstDevice()) {
  if (buffers && buffers->buffer_bytes() == buf_bytes_) buffers_ = std::move(buffers);
  if (base_) {
    size_ = base_->size;
    for (const Segment& seg : base_->segments) {
      Slot& slot = slots_[seg.index];
      slot.kind = Kind::kBase;
      slot.seg = seg;
    }
    if (!base_->segments.empty()) {
      first_device_ = static_cast<uint16_t>(base_->segments[0].device);
    }
  }
}

EngineChunkWriter::~EngineChunkWriter() {
  Drain();
  for (auto& [index, s] : slots_) {
    if (s.kind == Kind::kOwned) ctx_->space().Release(s.seg);
    ClearOverflow(s);
  }
}

void EngineChunkWriter::ClearOverflow(Slot& s) {
  if (!s.overflow) return;
  s.overflow = false;
  ctx_->ReleaseOverflow(buf_bytes_);
}

bool EngineChunkWriter::KeepInMemory(const std::vector<size_t>& indexes, size_t from) {
  uint64_t bytes = 0;
  for (size_t k = from; k < indexes.size(); ++k) {
    if (!slots_[indexes[k]].overflow) bytes += buf_bytes_;
  }
  if (bytes > 0 && !ctx_->TryReserveOverflow(bytes)) return false;
  for (size_t k = from; k < indexes.size(); ++k) slots_[indexes[k]].overflow = true;
  return true;
}

uint64_t EngineChunkWriter::NeedFrom(const std::vector<size_t>& indexes, size_t from) const {
  uint64_t bytes = 0;
  for (size_t k = from; k < indexes.size(); ++k) bytes += (RawLen(indexes[k]) + 4095ull) & ~4095ull;
  return bytes;
}

uint32_t EngineChunkWriter::RawLen(size_t index) const {
  return SegmentRawLen(size_, index, seg_size_);
}

EngineChunkWriter::Buffer EngineChunkWriter::TakeBuffer() {
  Buffer b;
  if (!spare_.empty()) {
    b = std::move(spare_.back());
    spare_.pop_back();
  } else if (buffers_) {
    b = buffers_->Buffer();
  } else if (auto* p = static_cast<uint8_t*>(std::aligned_alloc(4096, buf_bytes_))) {
    b = Buffer(p, [](uint8_t* q) { std::free(q); });
  }
  return b;  // its bytes are undefined: the slot's `valid` starts at 0
}

void EngineChunkWriter::GiveBuffer(Buffer buf) {
  if (buf && spare_.size() < 4) spare_.push_back(std::move(buf));
}

Status EngineChunkWriter::Load(size_t index) {
  if (slots_[index].kind == Kind::kInFlight) Drain();
  Slot& s = slots_[index];
  if (s.kind == Kind::kDirty) return Status::Ok();
  Buffer buf = TakeBuffer();
  if (!buf) return Status::Error(ENOMEM, "no memory for a segment buffer");
  if (s.kind == Kind::kBase || s.kind == Kind::kOwned) {
    const uint32_t n = std::min(s.seg.raw_len, RawLen(index));
    if (n > 0) {
      KVFS_RETURN_IF_ERROR(ctx_->ReadSegments({SegmentRead{&s.seg, 0, n, buf.get()}}));
    }
    s.valid = n;
    // An unpublished extent is nobody else's: free it now rather than at Finish.
    if (s.kind == Kind::kOwned) ctx_->space().Release(s.seg);
    s.filled = seg_size_;
  } else {
    s.filled = 0;
    s.valid = 0;
  }
  s.kind = Kind::kDirty;
  s.buf = std::move(buf);
  return Status::Ok();
}

void EngineChunkWriter::Drain() {
  if (window_ && window_->in_flight() > 0) {
    window_->Reap(window_->in_flight(), [this](uint64_t i, Status st) { OnWritten(i, st); });
  }
}

void EngineChunkWriter::OnWritten(uint64_t index, Status st) {
  Slot& s = slots_[index];
  if (st.ok()) {
    ctx_->MarkWritten(s.seg.device, (s.seg.stored_len + 4095ull) / 4096 * 4096);
    s.kind = Kind::kOwned;
    GiveBuffer(std::move(s.buf));
  } else {
    ctx_->space().Release(s.seg);
    s.kind = Kind::kDirty;  // the bytes are still in s.buf: Finish seals them again
    s.filled = seg_size_;
  }
  if (s.enc) scratch_.push_back(std::move(s.enc));
}

void EngineChunkWriter::Resize(uint64_t new_size) {
  Drain();
  const uint64_t count = (new_size + seg_size_ - 1) / seg_size_;
  for (auto it = slots_.lower_bound(count); it != slots_.end(); it = slots_.erase(it)) {
    Slot& s = it->second;
    if (s.kind == Kind::kOwned) ctx_->space().Release(s.seg);
    if (s.buf) GiveBuffer(std::move(s.buf));
    ClearOverflow(s);
  }
  size_ = new_size;
}

Status EngineChunkWriter::Write(uint64_t offset, const void* data, size_t len) {
  if (len == 0) return Status::Ok();
  const uint64_t end = offset + len;
  if (end < offset || end / seg_size_ >= kMaxSegments) {
    return Status::Error(EFBIG, "write past the largest supported file size");
  }
  // A file whose stored segments would outgrow the whole cache can never be published: fail
  // before anything is evicted for it. Holes cost nothing, so a write far past the end of a
  // sparse file is fine.
  uint64_t added = 0;
  for (uint64_t j = offset / seg_size_; j * seg_size_ < end; ++j) added += !slots_.count(j);
  if (added > 0 && (slots_.size() + added) * seg_size_ > ctx_->space().capacity_bytes()) {
    no_evict_ = true;
    return Status::NoSpace("file would be larger than the whole cache (" +
                           std::to_string(ctx_->space().capacity_bytes()) + " bytes)");
  }
  if (end > size_) Resize(end);
  dirty_ = true;
  const auto* src = static_cast<const uint8_t*>(data);
  std::vector<size_t> complete;
  for (size_t j = offset / seg_size_; j * seg_size_ < end; ++j) {
    const uint64_t seg_start = j * seg_size_;
    const uint32_t from = static_cast<uint32_t>(std::max(offset, seg_start) - seg_start);
    const uint32_t to = static_cast<uint32_t>(std::min<uint64_t>(end - seg_start, seg_size_));
    KVFS_RETURN_IF_ERROR(Load(j));
    Slot& s = slots_[j];
    if (from > s.valid) std::memset(s.buf.get() + s.valid, 0, from - s.valid);
    std::memcpy(s.buf.get() + from, src + (seg_start + from - offset), to - from);
    s.valid = std::max(s.valid, to);
    if (from <= s.filled) s.filled = std::max(s.filled, to);
    // Full and passed by this write: a sequential writer will not come back to it.
    if (s.filled >= seg_size_ && end >= seg_start + seg_size_) complete.push_back(j);
  }
  Status st = Seal(complete, true);
  if (st.err() == ENOSPC) no_evict_ = true;
  return st;
}

Status EngineChunkWriter::Seal(const std::vector<size_t>& all_indexes, bool async) {
  if (all_indexes.empty()) return Status::Ok();
  std::vector<size_t> indexes = all_indexes;  // cut short when the rest stays in memory
  if (window_ && window_->broken()) {
    // The kernel refused its requests: what it took still completes; then seal synchronously.
    Drain();
    if (window_->in_flight() == 0) window_.reset();
    window_failed_ = true;
  }
  if (async && !window_ && !window_failed_ && !ctx_->closed()) {
    RingConfig config = ctx_->ring_config();
    config.depth = kWindow;
    auto ring = IoRing::CreateOwned(config);
    if (ring.ok()) {
      window_ = std::move(ring).value();
    } else {
      window_failed_ = true;  // fall back to waiting for each seal
    }
  }
  if (!window_ || window_->broken()) async = false;
  const Compression mode = ctx_->options().compression;
  const size_t scratch_bytes = (SegmentCodec::ScratchSize(seg_size_) + 4095) / 4096 * 4096;
  std::vector<SegmentWrite> writes;
  std::vector<Segment> segs;
  Status st;
  for (size_t k = 0; k < indexes.size() && st.ok(); ++k) {
    Slot& s = slots_[indexes[k]];
    const uint32_t raw_len = RawLen(indexes[k]);
    uint8_t* scratch = nullptr;
    if (mode != Compression::kOff) {
      if (!s.enc) {
        if (!scratch_.empty()) {
          s.enc = std::move(scratch_.back());
          scratch_.pop_back();
        } else {
          s.enc.reset(static_cast<uint8_t*>(std::aligned_alloc(4096, scratch_bytes)));
        }
      }
      scratch = s.enc.get();
    }
    // Stored raw, the buffer goes to the device up to the next 4 KiB: zeros past the data.
    const uint32_t defined = std::min(buf_bytes_, (raw_len + 4095u) / 4096u * 4096u);
    if (s.valid < defined) {
      std::memset(s.buf.get() + s.valid, 0, defined - s.valid);
      s.valid = defined;
    }
    EncodedSegment enc =
        SegmentCodec::Encode(mode, s.buf.get(), raw_len, scratch, scratch ? scratch_bytes : 0);
    const uint32_t padded = (enc.stored_len + 4095u) / 4096u * 4096u;
    if (enc.data == scratch && scratch != nullptr) {
      std::memset(scratch + enc.stored_len, 0, padded - enc.stored_len);
    }
    Segment seg;
    seg.index = static_cast<uint32_t>(indexes[k]);
    seg.codec = enc.codec;
    seg.stored_len = enc.stored_len;
    seg.raw_len = raw_len;
    seg.checksum = enc.checksum;
    if (enc.stored_len > 0) {
      const uint16_t preferred =
          static_cast<uint16_t>((first_device_ + indexes[k]) % ctx_->devices().size());
      auto ext = ctx_->space().Allocate(preferred, padded);
      if (!ext.ok() && ext.status().err() == ENOSPC && async && KeepInMemory(indexes, k)) {
        // Streaming into full devices: this segment and the rest wait in memory; Finish,
        // knowing the whole size, decides whether eviction can make room at all.
        for (size_t j = k; j < indexes.size(); ++j) {
          if (slots_[indexes[j]].enc) scratch_.push_back(std::move(slots_[indexes[j]].enc));
        }
        indexes.resize(k);
        break;
      }
      // Full: evicting frees space once the eviction's journal record is durable.
      while (!ext.ok() && ext.status().err() == ENOSPC &&
             ctx_->Reclaim(NeedFrom(indexes, k), !no_evict_)) {
        ext = ctx_->space().Allocate(preferred, padded);
      }
      if (!ext.ok()) {
        st = ext.status();
        break;
      }
      seg.device = ext->device;
      seg.offset = ext->offset;
      writes.push_back({seg.device, seg.offset, enc.data, padded});
    }
    segs.push_back(seg);
  }
  if (!st.ok()) {
    for (const Segment& seg : segs) ctx_->space().Release(seg);
    for (size_t i : indexes) {
      if (slots_[i].enc) scratch_.push_back(std::move(slots_[i].enc));
    }
    return st;
  }
  if (async) {
    size_t w = 0;
    for (size_t k = 0; k < indexes.size(); ++k) {
      Slot& s = slots_[indexes[k]];
      s.seg = segs[k];
      if (s.seg.stored_len == 0) {
        s.kind = Kind::kOwned;
        GiveBuffer(std::move(s.buf));
        ClearOverflow(s);
        continue;
      }
      while (window_->in_flight() >= kWindow) {
        window_->Reap(1, [this](uint64_t i, Status r) { OnWritten(i, r); });
      }
      const SegmentWrite& sw = writes[w++];
      Status sub = window_->Submit(
          {sw.device, true, sw.offset, sw.len, const_cast<uint8_t*>(sw.data)}, indexes[k]);
      if (!sub.ok()) {
        ctx_->space().Release(s.seg);  // stays dirty: sealed again by Finish
        for (size_t j = k + 1; j < indexes.size(); ++j) ctx_->space().Release(segs[j]);
        for (size_t j = k; j < indexes.size(); ++j) {
          if (slots_[indexes[j]].enc) scratch_.push_back(std::move(slots_[indexes[j]].enc));
        }
        return sub;
      }
      s.kind = Kind::kInFlight;
      ClearOverflow(s);
    }
    window_->Reap(0, [this](uint64_t i, Status r) { OnWritten(i, r); });
    return Status::Ok();
  }
  st = ctx_->WriteSegments(writes);
  if (!st.ok()) {
    for (const Segment& seg : segs) ctx_->space().Release(seg);
  }
  for (size_t k = 0; k < indexes.size(); ++k) {
    Slot& s = slots_[indexes[k]];
    if (s.enc) scratch_.push_back(std::move(s.enc));
    if (!st.ok()) continue;
    s.kind = Kind::kOwned;
    s.seg = segs[k];
    GiveBuffer(std::move(s.buf));
    ClearOverflow(s);
  }
  return st;
}

Result<size_t> EngineChunkWriter::Read(uint64_t offset, void* out, size_t len) {
  Drain();
  if (offset >= size_ || len == 0) return size_t{0};
  const uint64_t end = std::min<uint64_t>(size_, offset + len);
  auto* dst = static_cast<uint8_t*>(out);
  std::vector<SegmentRead> reads;
  for (size_t j = offset / seg_size_; j * seg_size_ < end; ++j) {
    const uint64_t seg_start = j * seg_size_;
    const uint32_t from = static_cast<uint32_t>(std::max(offset, seg_start) - seg_start);
    const uint32_t to = static_cast<uint32_t>(std::min<uint64_t>(end - seg_start, seg_size_));
    uint8_t* d = dst + (seg_start + from - offset);
    auto it = slots_.find(j);
    if (it == slots_.end()) {  // a hole: zeros
      std::memset(d, 0, to - from);
      continue;
    }
    const Slot& s = it->second;
    if (s.kind == Kind::kDirty) {
      const uint32_t set_to = std::clamp(s.valid, from, to);
      std::memcpy(d, s.buf.get() + from, set_to - from);
      std::memset(d + (set_to - from), 0, to - set_to);
    } else if (s.kind == Kind::kHole || from >= s.seg.raw_len) {
      std::memset(d, 0, to - from);
    } else {
      // A stored segment shorter than its slot (the file grew past it) ends in zeros.
      const uint32_t stored_to = std::min(to, s.seg.raw_len);
      reads.push_back({&s.seg, from, stored_to - from, d});
      if (stored_to < to) std::memset(d + (stored_to - from), 0, to - stored_to);
    }
  }
  KVFS_RETURN_IF_ERROR(ctx_->ReadSegments(reads));
  return static_cast<size_t>(end - offset);
}

Status EngineChunkWriter::Truncate(uint64_t size) {
  Drain();
  if (size == size_) return Status::Ok();
  if (size / seg_size_ >= kMaxSegments) return Status::Error(EFBIG, "truncate past max size");
  dirty_ = true;
  if (size > size_) {
    Resize(size);
    return Status::Ok();
  }
  Resize(size);
  const uint32_t tail = static_cast<uint32_t>(size % seg_size_);
  auto it = slots_.find(SegmentCount() - 1);
  if (tail != 0 && it != slots_.end()) {
    Slot& last = it->second;
    if (last.kind != Kind::kHole && last.kind != Kind::kDirty && last.seg.raw_len > tail) {
      KVFS_RETURN_IF_ERROR(Load(it->first));
    }
    if (last.kind == Kind::kDirty) {
      last.valid = std::min(last.valid, tail);  // the rest reads as zeros again
      last.filled = std::min(last.filled, tail);
    }
  }
  return Status::Ok();
}

Result<LayoutRef> EngineChunkWriter::Finish() {
  // Every segment must hold exactly its share of the file: stored segments that the file grew
  // or shrank around are rewritten, untouched holes become extent-less zero segments.
  Drain();
  std::vector<size_t> to_seal;
  for (auto it = slots_.begin(); it != slots_.end();) {
    const uint64_t j = it->first;
    Slot& s = it->second;
    // Holes, and stored zero segments of older versions, are simply left out of the layout.
    if (s.kind == Kind::kHole || (s.kind == Kind::kBase && s.seg.stored_len == 0)) {
      it = slots_.erase(it);
      continue;
    }
    if ((s.kind == Kind::kBase || s.kind == Kind::kOwned) && s.seg.raw_len != RawLen(j)) {
      KVFS_RETURN_IF_ERROR(Load(j));
    }
    if (s.kind == Kind::kDirty) to_seal.push_back(j);
    ++it;
  }
  KVFS_RETURN_IF_ERROR(Seal(to_seal, false));

  auto layout = std::make_unique<Layout>();
  layout->size = size_;
  layout->segments.reserve(slots_.size());
  for (auto& [j, s] : slots_) {
    if (s.kind == Kind::kBase) ctx_->space().AddRef(s.seg);  // shared with the base layout
    // kOwned: the writer's reference passes to the new layout.
    s.seg.index = static_cast<uint32_t>(j);
    layout->segments.push_back(s.seg);
    s.kind = Kind::kBase;
  }
  LayoutRef ref = ctx_->space().Adopt(std::move(layout));
  base_ = ref;  // later writes start a further version from this one
  dirty_ = false;
  return ref;
}

}  // namespace kvfs
