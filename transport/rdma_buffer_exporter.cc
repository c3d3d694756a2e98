#include "rdma_buffer_exporter.h"

#include <spdlog/spdlog.h>

#include <cstdlib>
#include <random>

namespace kvfs {
namespace {
constexpr size_t kGranule = 1u << 20;  // buffers come in MiB multiples so they are reusable
}

RdmaBufferExporter::RdmaBufferExporter(MemoryRegistrar* registrar, size_t max_bytes,
                                       std::chrono::milliseconds grant_ttl)
    : max_bytes_(max_bytes), grant_ttl_(grant_ttl), cache_(registrar, max_bytes) {
  // Tokens start at a random point so a stale token from an earlier server life matches nothing.
  std::random_device rd;
  next_token_ = (static_cast<uint64_t>(rd()) << 32 | rd()) | 1;
}

RdmaBufferExporter::~RdmaBufferExporter() {
  std::lock_guard lock(mu_);
  for (auto& [token, g] : grants_) {
    cache_.Unpin(g.buffer.region);
    Destroy(g.buffer);
  }
  for (Buffer& b : free_) Destroy(b);
}

void RdmaBufferExporter::Destroy(Buffer& b) {
  if (b.mem == nullptr) return;
  Status st = cache_.Invalidate(b.mem, b.capacity);
  if (!st.ok()) spdlog::error("rdma exporter: {}", st.ToString());
  std::free(b.mem);
  allocated_ -= b.capacity;
  b.mem = nullptr;
}

void RdmaBufferExporter::ReclaimExpired(Clock::time_point now) {
  for (auto it = grants_.begin(); it != grants_.end();) {
    if (it->second.expires <= now) {
      spdlog::warn("rdma exporter: grant {} expired unreleased, dropping its buffer", it->first);
      cache_.Unpin(it->second.buffer.region);
      Destroy(it->second.buffer);
      it = grants_.erase(it);
    } else {
      ++it;
    }
  }
}

Result<ExportedBuffer> RdmaBufferExporter::Acquire(size_t length) {
  if (length == 0) length = 1;
  const size_t capacity = (length + kGranule - 1) / kGranule * kGranule;
  std::lock_guard lock(mu_);
  ReclaimExpired(Clock::now());
  // The smallest pooled buffer that fits.
  auto best = free_.end();
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    if (it->capacity >= length && (best == free_.end() || it->capacity < best->capacity)) best = it;
  }
  Buffer buf;
  if (best != free_.end()) {
    buf = *best;
    free_.erase(best);
  } else {
    // Make room by dropping pooled buffers, then allocate.
    while (allocated_ + capacity > max_bytes_ && !free_.empty()) {
      Destroy(free_.back());
      free_.pop_back();
    }
    if (allocated_ + capacity > max_bytes_) {
      return Status::Error(ENOMEM, "rdma export budget exhausted");
    }
    void* mem = nullptr;
    if (::posix_memalign(&mem, 4096, capacity) != 0) return Status::Error(ENOMEM, "rdma buffer");
    buf.mem = static_cast<uint8_t*>(mem);
    buf.capacity = capacity;
    allocated_ += capacity;
  }
  auto region = cache_.Pin(buf.mem, buf.capacity);
  if (!region.ok()) {
    Destroy(buf);
    return region.status();
  }
  buf.region = *region;
  const uint64_t token = next_token_++;
  ExportedBuffer out;
  out.bytes = {buf.mem, length};
  out.remote.token = token;
  out.remote.addr = reinterpret_cast<uint64_t>(buf.mem);
  out.remote.rkey = buf.region.rkey;
  out.remote.length = length;
  grants_[token] = Grant{buf, Clock::now() + grant_ttl_};
  return out;
}

void RdmaBufferExporter::Release(uint64_t token) {
  std::lock_guard lock(mu_);
  auto it = grants_.find(token);
  if (it == grants_.end()) return;
  cache_.Unpin(it->second.buffer.region);
  free_.push_back(it->second.buffer);
  grants_.erase(it);
}

size_t RdmaBufferExporter::outstanding() const {
  std::lock_guard lock(mu_);
  return grants_.size();
}
size_t RdmaBufferExporter::pooled() const {
  std::lock_guard lock(mu_);
  return free_.size();
}
size_t RdmaBufferExporter::allocated_bytes() const {
  std::lock_guard lock(mu_);
  return allocated_;
}

}  // namespace kvfs
