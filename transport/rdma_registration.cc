#include "rdma_registration.h"

#include <infiniband/verbs.h>

#include <cstring>
#include <limits>
#include <vector>

namespace kvfs {

Result<MemoryRegion> VerbsRegistrar::Register(void* addr, size_t length) {
  struct ibv_mr* mr =
      ::ibv_reg_mr(pd_, addr, length, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ);
  if (mr == nullptr) {
    const int err = errno ? errno : ENOMEM;
    return Status::Error(err, std::string("ibv_reg_mr: ") + std::strerror(err));
  }
  MemoryRegion r;
  r.addr = reinterpret_cast<uint64_t>(addr);
  r.length = length;
  r.lkey = mr->lkey;
  r.rkey = mr->rkey;
  r.handle = mr;
  return r;
}

void VerbsRegistrar::Deregister(const MemoryRegion& region) {
  if (region.handle != nullptr) ::ibv_dereg_mr(static_cast<struct ibv_mr*>(region.handle));
}

RegistrationCache::~RegistrationCache() {
  for (auto& [key, e] : entries_) registrar_->Deregister(e.region);
}

bool RegistrationCache::EvictFor(size_t length) {
  while (bytes_ + length > max_bytes_) {
    auto victim = entries_.end();
    for (auto it = entries_.begin(); it != entries_.end(); ++it) {
      if (it->second.pins == 0 &&
          (victim == entries_.end() || it->second.last_use < victim->second.last_use)) {
        victim = it;
      }
    }
    if (victim == entries_.end()) return false;
    registrar_->Deregister(victim->second.region);
    bytes_ -= victim->second.region.length;
    entries_.erase(victim);
  }
  return true;
}

Result<MemoryRegion> RegistrationCache::Pin(const void* addr, size_t length) {
  if (addr == nullptr || length == 0) return Status::Invalid("empty memory range");
  const uint64_t a = reinterpret_cast<uint64_t>(addr);
  if (a + length < a) return Status::Invalid("memory range wraps around");
  std::lock_guard lock(mu_);
  // Candidates start at or before `a`; the cache holds few, large regions, so a backward walk
  // over them is cheap.
  auto it = entries_.upper_bound({a, std::numeric_limits<size_t>::max()});
  while (it != entries_.begin()) {
    --it;
    if (it->second.region.Contains(a, length)) {
      ++it->second.pins;
      it->second.last_use = ++clock_;
      ++hits_;
      return it->second.region;
    }
  }
  ++misses_;
  if (length > max_bytes_ || !EvictFor(length)) {
    return Status::Error(ENOMEM, "registration budget exhausted by pinned regions");
  }
  KVFS_ASSIGN_OR_RETURN(MemoryRegion region, registrar_->Register(const_cast<void*>(addr), length));
  Entry& e = entries_[{region.addr, region.length}];
  if (e.region.handle != nullptr || e.pins > 0) {
    // The same range was registered twice (a race is impossible under mu_, so only a registrar
    // returning a duplicate): keep the old one.
    registrar_->Deregister(region);
  } else {
    e.region = region;
    bytes_ += region.length;
  }
  ++e.pins;
  e.last_use = ++clock_;
  return e.region;
}

void RegistrationCache::Unpin(const MemoryRegion& region) {
  std::lock_guard lock(mu_);
  auto it = entries_.find({region.addr, region.length});
  if (it != entries_.end() && it->second.pins > 0) --it->second.pins;
}

Status RegistrationCache::Invalidate(const void* addr, size_t length) {
  const uint64_t a = reinterpret_cast<uint64_t>(addr);
  std::lock_guard lock(mu_);
  std::vector<std::map<Key, Entry>::iterator> overlapping;
  for (auto it = entries_.begin(); it != entries_.end(); ++it) {
    const MemoryRegion& r = it->second.region;
    if (r.addr < a + length && a < r.addr + r.length) {
      if (it->second.pins > 0) return Status::Error(EBUSY, "memory still pinned for RDMA");
      overlapping.push_back(it);
    }
  }
  for (auto it : overlapping) {
    registrar_->Deregister(it->second.region);
    bytes_ -= it->second.region.length;
    entries_.erase(it);
  }
  return Status::Ok();
}

size_t RegistrationCache::registered_bytes() const {
  std::lock_guard lock(mu_);
  return bytes_;
}
size_t RegistrationCache::entries() const {
  std::lock_guard lock(mu_);
  return entries_.size();
}
uint64_t RegistrationCache::hits() const {
  std::lock_guard lock(mu_);
  return hits_;
}
uint64_t RegistrationCache::misses() const {
  std::lock_guard lock(mu_);
  return misses_;
}

}  // namespace kvfs
