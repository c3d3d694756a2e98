#include "engine_context.h"

#include <spdlog/spdlog.h>

#include <cstring>

#include "segment_codec.h"

namespace kvfs {
namespace {

std::atomic<uint64_t> g_next_generation{1};

std::vector<DeviceSpace::DeviceRange> Ranges(const std::vector<std::unique_ptr<Device>>& devs) {
  std::vector<DeviceSpace::DeviceRange> out;
  for (const auto& d : devs) out.push_back({d->data_start(), d->size()});
  return out;
}

}  // namespace

EngineContext::EngineContext(EngineOptions options, std::vector<std::unique_ptr<Device>> devices)
    : options_(std::move(options)),
      devices_(std::move(devices)),
      space_(std::make_shared<DeviceSpace>(Ranges(devices_))),
      dirty_(new std::atomic<bool>[devices_.size()]) {
  ring_config_.generation = g_next_generation.fetch_add(1);
  for (const auto& d : devices_) ring_config_.fds.push_back(d->fd());
  ring_config_.depth = options_.queue_depth;
  ring_config_.buffer_bytes = (options_.segment_size + 4095u) / 4096u * 4096u;
  ring_config_.faults = options_.fault_injector.get();
  for (size_t i = 0; i < devices_.size(); ++i) dirty_[i] = false;
}

EngineContext::~EngineContext() { Close(); }

void EngineContext::Close() {
  if (!closed_.exchange(true)) IoRing::Retire(ring_config_.generation);
}

bool EngineContext::TryReserveOverflow(uint64_t bytes) {
  uint64_t cur = overflow_used_.load();
  do {
    if (cur + bytes > options_.overflow_bytes) return false;
  } while (!overflow_used_.compare_exchange_weak(cur, cur + bytes));
  return true;
}

void EngineContext::MarkWritten(uint16_t device, uint64_t bytes) {
  dirty_[device] = true;
  counters_.bytes_written.fetch_add(bytes);
}

std::vector<uint16_t> EngineContext::TakeDirtyDevices() {
  std::vector<uint16_t> out;
  for (size_t i = 0; i < devices_.size(); ++i) {
    if (dirty_[i].exchange(false)) out.push_back(static_cast<uint16_t>(i));
  }
  return out;
}

Status EngineContext::ReadSegments(const std::vector<SegmentRead>& reads) {
  std::vector<size_t> device_reads;
  for (size_t i = 0; i < reads.size(); ++i) {
    const SegmentRead& r = reads[i];
    if (r.seg->stored_len == 0) {  // a hole: no extent, reads as zeros
      if (static_cast<uint64_t>(r.from) + r.len > r.seg->raw_len) {
        return Status::Invalid("read past a segment's end");
      }
      std::memset(r.out, 0, r.len);
      continue;
    }
    KVFS_RETURN_IF_ERROR(space_->CheckBounds(*r.seg));
    if (r.seg->stored_len > ring_config_.buffer_bytes) {
      return Status::Invalid("segment larger than the engine's segment size");
    }
    device_reads.push_back(i);
  }
  if (device_reads.empty()) return Status::Ok();
  if (closed_) return Status::Error(ESHUTDOWN, "engine is closed");
  KVFS_ASSIGN_OR_RETURN(IoRing * ring, IoRing::ForThread(ring_config_));
  thread_local std::vector<uint8_t> decoded;  // an lz4 segment of which only part is wanted
  uint64_t bytes = 0;
  Status st = ring->Pipeline(
      device_reads.size(),
      [&](size_t i, RingOp& op) {
        const SegmentRead& r = reads[device_reads[i]];
        const Segment& seg = *r.seg;
        op.device = seg.device;
        op.offset = seg.offset;
        op.len = (seg.stored_len + 4095u) / 4096u * 4096u;
        // A whole raw segment the caller's buffer can take as O_DIRECT reads it (4 KiB aligned,
        // a 4 KiB multiple) is read straight there: no copy out of the ring's buffer.
        if (r.WholeRaw() && op.len == r.len && reinterpret_cast<uintptr_t>(r.out) % 4096 == 0) {
          op.data = r.out;
        }
      },
      [&](size_t i, const RingOp&, uint8_t* buf) {
        const SegmentRead& r = reads[device_reads[i]];
        bytes += r.seg->stored_len;
        if (static_cast<uint64_t>(r.from) + r.len > r.seg->raw_len) {
          return Status::Corruption("segment shorter than the layout says");
        }
        if (r.peer_checks) {
          if (!r.WholeRaw()) return Status::Invalid("only a whole raw segment goes out unchecked");
          if (buf != r.out) std::memcpy(r.out, buf, r.len);
          return Status::Ok();
        }
        // A whole lz4 segment decodes straight into the caller's buffer.
        const bool whole = r.from == 0 && r.len == r.seg->raw_len;
        if (!whole && r.seg->codec != Codec::kNone) decoded.resize(r.seg->raw_len);
        uint8_t* decode_buf = whole ? r.out : decoded.data();
        KVFS_ASSIGN_OR_RETURN(const uint8_t* raw, OpenSegment(*r.seg, buf, decode_buf));
        if (raw + r.from != r.out) std::memcpy(r.out, raw + r.from, r.len);
        return Status::Ok();
      });
  counters_.bytes_read.fetch_add(bytes);
  return st;
}

Result<const uint8_t*> EngineContext::OpenSegment(const Segment& seg, const uint8_t* stored,
                                                  uint8_t* decode_buf) {
  Result<const uint8_t*> raw = SegmentCodec::Open(seg, stored, decode_buf);
  if (!raw.ok()) {
    counters_.checksum_failures.fetch_add(1);
    spdlog::error("engine: {}", raw.status().ToString());
  }
  return raw;
}

Status EngineContext::WriteSegments(const std::vector<SegmentWrite>& writes) {
  if (writes.empty()) return Status::Ok();
  if (closed_) return Status::Error(ESHUTDOWN, "engine is closed");
  KVFS_ASSIGN_OR_RETURN(IoRing * ring, IoRing::ForThread(ring_config_));
  Status st = ring->Pipeline(
      writes.size(),
      [&](size_t i, RingOp& op) {
        const SegmentWrite& w = writes[i];
        op.device = w.device;
        op.write = true;
        op.offset = w.offset;
        op.len = w.len;
        op.data = const_cast<uint8_t*>(w.data);
      },
      [&](size_t i, const RingOp&, uint8_t*) {
        // Marked once the write completed: a commit that takes the flag after this point
        // fdatasyncs the device after the data reached it.
        dirty_[writes[i].device] = true;
        counters_.bytes_written.fetch_add(writes[i].len);
        return Status::Ok();
      });
  return st;
}

}  // namespace kvfs
