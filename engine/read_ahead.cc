#include "read_ahead.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <limits>

#include "segment_codec.h"

namespace kvfs {
namespace {

constexpr uint64_t kNoSegment = std::numeric_limits<uint64_t>::max();

Status NoMemory() { return Status::Error(ENOMEM, "no memory for a read-ahead buffer"); }

}  // namespace

struct SegmentReadAhead::Slot {
  enum class State { kEmpty, kInFlight, kReady, kFailed };
  uint64_t segment = kNoSegment;
  State state = State::kEmpty;
  bool asked = false;                // a reader asked for it (else a read ahead not used yet)
  std::shared_ptr<uint8_t> stored;   // device bytes, O_DIRECT target
  std::shared_ptr<uint8_t> decoded;  // lz4 segments and holes
  std::shared_ptr<uint8_t> served;   // verified raw bytes: `stored` or `decoded`
  Status error;
};

SegmentReadAhead::SegmentReadAhead(std::shared_ptr<EngineContext> ctx, LayoutRef layout,
                                   std::shared_ptr<ReadAheadPool> pool, uint32_t depth)
    : ctx_(std::move(ctx)),
      layout_(std::move(layout)),
      pool_(std::move(pool)),
      depth_(depth),
      seg_size_(ctx_->segment_size()) {}

SegmentReadAhead::~SegmentReadAhead() {
  // The kernel may still be writing into window buffers: wait for every read before freeing.
  if (ring_) {
    while (ring_->in_flight() > 0) ring_->Reap(ring_->in_flight(), [](uint64_t, Status) {});
    pool_->ReturnRing(std::move(ring_));
  }
  // Read ahead and never asked for (still in flight at the end counts too: a prefetch at open
  // of a file closed unread is as wasted as one that completed).
  for (auto& s : slots_) {
    const bool started = s->state == Slot::State::kReady || s->state == Slot::State::kInFlight;
    if (started && !s->asked) pool_->wasted.fetch_add(1);
  }
  pool_->buffered_bytes.fetch_sub(buffered_);
}

SegmentReadAhead::Slot* SegmentReadAhead::Find(uint64_t segment) {
  for (auto& s : slots_) {
    if (s->segment == segment && s->state != Slot::State::kEmpty) return s.get();
  }
  return nullptr;
}

SegmentReadAhead::Slot* SegmentReadAhead::Claim(uint64_t first, uint64_t last, bool demand) {
  // Which slot to reuse, best first: an empty or failed one; then, behind this request, one
  // more than depth_ segments back that the reader used, or that was read ahead and skipped;
  // last one just behind that the reader used. A read-ahead segment just behind is kept: the
  // kernel sends a window of READs at once and threads take them out of order, so the READ for
  // it may still be on its way (and a used one may be asked for again by such a READ).
  Slot* pick = nullptr;
  int rank = 0;  // of pick: 4 empty, 3 used and far behind, 2 skipped, 1 used and just behind
  for (auto& s : slots_) {
    if (s->state == Slot::State::kEmpty || s->state == Slot::State::kFailed) {
      pick = s.get();
      rank = 4;
      break;
    }
    if (s->state != Slot::State::kReady || s->segment >= first) continue;
    const bool far = s->segment + depth_ < first;
    const int r = far ? (s->asked ? 3 : 2) : (s->asked ? 1 : 0);
    if (r > rank || (r == rank && r > 0 && s->segment < pick->segment)) {
      pick = s.get();
      rank = r;
    }
  }
  // A new slot before one that may be asked for again, within the window's cap.
  const uint64_t max_slots = 2 * depth_ + 4 + (last - first);
  if (rank < 2 && slots_.size() < max_slots) return Prepare(AddSlot());
  if (rank == 1 && !demand) pick = nullptr;  // no read-ahead at the price of a re-read
  if (!pick && demand) {
    // A reader that jumped back, or every slot is a read-ahead not used yet: give up the ready
    // segment furthest ahead of this request, or else the oldest behind it.
    Slot* ahead = nullptr;
    Slot* behind = nullptr;
    for (auto& s : slots_) {
      if (s->state != Slot::State::kReady) continue;
      if (s->segment > last && (!ahead || s->segment > ahead->segment)) ahead = s.get();
      if (s->segment < first && (!behind || s->segment < behind->segment)) behind = s.get();
    }
    pick = ahead ? ahead : behind;
  }
  return pick ? Prepare(pick) : nullptr;
}

SegmentReadAhead::Slot* SegmentReadAhead::AddSlot() {
  slots_.push_back(std::make_unique<Slot>());
  buffered_ += pool_->buffer_bytes();
  pool_->buffered_bytes.fetch_add(pool_->buffer_bytes());
  return slots_.back().get();
}

SegmentReadAhead::Slot* SegmentReadAhead::Prepare(Slot* pick) {
  if (pick->state == Slot::State::kReady && !pick->asked) pool_->wasted.fetch_add(1);
  // A view handed out earlier may still be splicing from these buffers: leave them to it
  // (the pool takes them back when it is done).
  pick->served.reset();
  if (pick->stored && pick->stored.use_count() > 1) pick->stored.reset();
  if (pick->decoded && pick->decoded.use_count() > 1) pick->decoded.reset();
  pick->state = Slot::State::kEmpty;
  pick->segment = kNoSegment;
  pick->asked = false;
  pick->error = Status::Ok();
  return pick;
}

Status SegmentReadAhead::EnsureRing() {
  if (ring_) return Status::Ok();
  KVFS_ASSIGN_OR_RETURN(ring_, pool_->TakeRing(ctx_->ring_config()));
  return Status::Ok();
}

Status SegmentReadAhead::Start(uint64_t segment, Slot* slot, bool demand) {
  slot->segment = segment;
  const Segment* found = layout_->Find(segment);
  if (!found || found->stored_len == 0) {  // a hole: the pool's zeros, no device read
    if (!(slot->served = pool_->Zeros())) return NoMemory();
    slot->state = Slot::State::kReady;
    return Status::Ok();
  }
  const Segment& seg = *found;
  KVFS_RETURN_IF_ERROR(ctx_->space().CheckBounds(seg));
  if (seg.stored_len > pool_->buffer_bytes()) {
    return Status::Invalid("segment larger than the engine's segment size");
  }
  if (ctx_->closed()) return Status::Error(ESHUTDOWN, "engine is closed");
  if (Status ring = EnsureRing(); !ring.ok()) {
    if (!demand) return ring;
    // io_uring refused this reader a ring: read this one segment through the engine's
    // per-thread ring (verified and decoded there), without read-ahead.
    if (!slot->decoded && !(slot->decoded = pool_->Buffer())) return NoMemory();
    const SegmentRead read{&seg, 0, seg.raw_len, slot->decoded.get()};
    KVFS_RETURN_IF_ERROR(ctx_->ReadSegments({read}));
    slot->served = slot->decoded;
    slot->state = Slot::State::kReady;
    return Status::Ok();
  }
  if (!slot->stored && !(slot->stored = pool_->Buffer())) return NoMemory();
  RingOp op;
  op.device = seg.device;
  op.offset = seg.offset;
  op.len = (seg.stored_len + 4095u) / 4096u * 4096u;
  op.data = slot->stored.get();
  const auto token = static_cast<uint64_t>(
      std::find_if(slots_.begin(), slots_.end(), [&](auto& s) { return s.get() == slot; }) -
      slots_.begin());
  KVFS_RETURN_IF_ERROR(ring_->Submit(op, token));
  slot->state = Slot::State::kInFlight;
  return Status::Ok();
}

void SegmentReadAhead::Complete(uint64_t token, Status st) {
  if (token >= slots_.size()) return;
  Slot& slot = *slots_[token];
  if (slot.state != Slot::State::kInFlight) return;
  const Segment& seg = *layout_->Find(slot.segment);  // in flight: a stored segment
  if (st.ok()) {
    ctx_->counters().bytes_read.fetch_add(seg.stored_len);
    if (seg.codec != Codec::kNone && !slot.decoded) slot.decoded = pool_->Buffer();
    Result<const uint8_t*> raw =
        seg.codec != Codec::kNone && !slot.decoded
            ? Result<const uint8_t*>(NoMemory())
            : ctx_->OpenSegment(seg, slot.stored.get(), slot.decoded.get());
    if (raw.ok()) {
      // A raw segment is verified in place and served without a copy.
      slot.served = *raw == slot.stored.get() ? slot.stored : slot.decoded;
    } else {
      st = raw.status();
    }
  }
  slot.error = st;
  slot.state = st.ok() ? Slot::State::kReady : Slot::State::kFailed;
}

Status SegmentReadAhead::WaitFor(Slot* slot) {
  while (slot->state == Slot::State::kInFlight) {
    ring_->Reap(1, [this](uint64_t token, Status st) { Complete(token, std::move(st)); });
  }
  return slot->state == Slot::State::kReady ? Status::Ok() : slot->error;
}

Result<ReadView> SegmentReadAhead::Read(uint64_t offset, size_t len) {
  Result<ReadView> view = ReadLocked(offset, len);
  // Outside the window's lock: the engine drops the record and tells the fs.
  if (!view.ok() && view.status().IsCorruption()) ctx_->ReportCorruption(layout_, view.status());
  return view;
}

void SegmentReadAhead::Prefetch(uint64_t offset, size_t len) {
  const Layout& layout = *layout_;
  if (offset >= layout.size || len == 0) return;
  const uint64_t end = std::min<uint64_t>(layout.size, offset + len);
  const uint64_t first = offset / seg_size_;
  const uint64_t last = std::min<uint64_t>((end - 1) / seg_size_, first + depth_ - 1);
  std::lock_guard lock(mu_);
  StartAhead(first, last, first, last);
}

void SegmentReadAhead::StartAhead(uint64_t from, uint64_t to, uint64_t first, uint64_t last) {
  for (uint64_t k = from; k <= to; ++k) {
    if (Find(k)) continue;
    if (pool_->buffered_bytes.load() > pool_->budget_bytes) break;
    Slot* slot = Claim(first, last, false);
    if (!slot) break;
    if (Status st = Start(k, slot, false); !st.ok()) {
      slot->state = Slot::State::kEmpty;  // not asked for: the READ that asks reports errors
      break;
    }
  }
}

Result<ReadView> SegmentReadAhead::ReadLocked(uint64_t offset, size_t len) {
  ReadView view;
  const Layout& layout = *layout_;
  if (offset >= layout.size || len == 0) return view;
  const uint64_t end = std::min<uint64_t>(layout.size, offset + len);
  const uint64_t first = offset / seg_size_, last = (end - 1) / seg_size_;
  const uint64_t count = (layout.size + seg_size_ - 1) / seg_size_;
  ctx_->counters().reads.fetch_add(1);
  std::lock_guard lock(mu_);
  // The kernel's readahead sends several READs at once and threads may take them out of order:
  // a read that starts up to depth_ segments before or after the furthest one asked for still
  // counts as sequential, and never moves that mark back.
  const bool sequential = first + depth_ >= next_expected_ && first <= next_expected_ + depth_;
  sequential_ = sequential ? sequential_ + 1 : 0;
  next_expected_ = sequential ? std::max(next_expected_, last + 1) : last + 1;

  std::vector<Slot*> wanted;
  for (uint64_t k = first; k <= last; ++k) {
    Slot* slot = Find(k);
    if (slot && slot->state != Slot::State::kFailed) {
      pool_->hits.fetch_add(1);
    } else {
      pool_->misses.fetch_add(1);
      if (slot) {
        Prepare(slot);  // a failed read: try the device again
      } else {
        while (!(slot = Claim(first, last, true))) {
          if (!ring_ || ring_->in_flight() == 0) {
            // Every slot holds a segment of this request (a READ larger than the window):
            // the window grows for it.
            slot = Prepare(AddSlot());
            break;
          }
          // Every slot is in flight: let one finish.
          ring_->Reap(1, [this](uint64_t token, Status st) { Complete(token, std::move(st)); });
        }
      }
      KVFS_RETURN_IF_ERROR(Start(k, slot, true));
    }
    slot->asked = true;
    wanted.push_back(slot);
  }
  // Keep the next segments in flight while this request is answered (bounded per reader by
  // the window and over all readers by the budget).
  if (sequential_ > 0)
    StartAhead(last + 1, std::min<uint64_t>(last + depth_, count - 1), first, last);
  for (uint64_t k = first; k <= last; ++k) {
    Slot* slot = wanted[k - first];
    KVFS_RETURN_IF_ERROR(WaitFor(slot));
    const uint64_t start = k * seg_size_;
    const uint64_t from = std::max(offset, start) - start;
    const uint64_t to = std::min<uint64_t>(end - start, seg_size_);
    const Segment* seg = layout.Find(k);
    if (seg && to > seg->raw_len) return Status::Corruption("segment shorter than the layout says");
    view.spans.push_back({slot->served.get() + from, static_cast<size_t>(to - from)});
    view.holds.push_back(slot->served);
    view.size += to - from;
  }
  return view;
}

}  // namespace kvfs
