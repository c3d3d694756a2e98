#include "read_ahead_pool.h"

#include <cstdlib>

namespace kvfs {

ReadAheadPool::~ReadAheadPool() {
  for (uint8_t* b : idle_buffers_) slabs_->Free(b);
}

std::shared_ptr<uint8_t> ReadAheadPool::Buffer() {
  uint8_t* b = nullptr;
  {
    std::lock_guard lock(mu_);
    if (!idle_buffers_.empty()) {
      b = idle_buffers_.back();
      idle_buffers_.pop_back();
    }
  }
  if (!b) b = slabs_->Allocate();
  if (!b) return nullptr;
  // Weak: a buffer a reply still splices from must not keep the pool (and its rings, which
  // hold the device files open) alive after the engine closed; only the slabs.
  std::weak_ptr<ReadAheadPool> pool = weak_from_this();
  return std::shared_ptr<uint8_t>(b, [pool, slabs = slabs_](uint8_t* p) {
    if (auto owner = pool.lock()) {
      owner->Recycle(p);
    } else {
      slabs->Free(p);
    }
  });
}

void ReadAheadPool::Recycle(uint8_t* buffer) {
  {
    std::lock_guard lock(mu_);
    if ((idle_buffers_.size() + 1) * uint64_t{buffer_bytes_} <= kIdleBufferBytes) {
      idle_buffers_.push_back(buffer);
      return;
    }
  }
  slabs_->Free(buffer);
}

std::shared_ptr<uint8_t> ReadAheadPool::Zeros() {
  std::lock_guard lock(mu_);
  if (!zeros_) {
    auto* z = static_cast<uint8_t*>(std::calloc(1, buffer_bytes_));
    if (!z) return nullptr;
    zeros_ = std::shared_ptr<uint8_t>(z, [](uint8_t* p) { std::free(p); });
  }
  return zeros_;
}

size_t ReadAheadPool::idle_buffers() const {
  std::lock_guard lock(mu_);
  return idle_buffers_.size();
}

Result<std::unique_ptr<IoRing>> ReadAheadPool::TakeRing(const RingConfig& config) {
  {
    std::lock_guard lock(mu_);
    if (rings_closed_) return Status::Error(ESHUTDOWN, "engine is closed");
    if (!idle_rings_.empty()) {
      std::unique_ptr<IoRing> ring = std::move(idle_rings_.back());
      idle_rings_.pop_back();
      return ring;
    }
  }
  return IoRing::CreateOwned(config);
}

void ReadAheadPool::ReturnRing(std::unique_ptr<IoRing> ring) {
  if (!ring || ring->in_flight() != 0 || ring->broken()) return;
  std::lock_guard lock(mu_);
  if (!rings_closed_ && idle_rings_.size() < kIdleRings) idle_rings_.push_back(std::move(ring));
}

void ReadAheadPool::DropIdleRings() {
  std::vector<std::unique_ptr<IoRing>> rings;
  std::lock_guard lock(mu_);
  rings_closed_ = true;
  rings.swap(idle_rings_);
}

}  // namespace kvfs
