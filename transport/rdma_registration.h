// Memory registration for RDMA, with a cache. Registering memory (ibv_reg_mr) pins pages and
// costs tens of microseconds per MiB, so buffers that are used again (a client's read buffers,
// a server's export pool) are registered once and found again by address range.
//
// The registrar is an interface so the cache's bookkeeping (hits, containment, eviction of
// unpinned entries under a byte budget, invalidation before memory is freed) is tested with a
// fake one, without a device.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <utility>

#include "kvfs/status.h"

struct ibv_pd;

namespace kvfs {

struct MemoryRegion {
  uint64_t addr = 0;
  size_t length = 0;
  uint32_t lkey = 0;
  uint32_t rkey = 0;
  void* handle = nullptr;  // the registrar's own (struct ibv_mr* for verbs)
  bool Contains(uint64_t a, size_t len) const { return a >= addr && a + len <= addr + length; }
};

class MemoryRegistrar {
 public:
  virtual ~MemoryRegistrar() = default;
  virtual Result<MemoryRegion> Register(void* addr, size_t length) = 0;
  virtual void Deregister(const MemoryRegion& region) = 0;
};

// ibv_reg_mr on one protection domain, with local write and remote read access (a client READs
// into its region, a server's region is READ by peers).
class VerbsRegistrar : public MemoryRegistrar {
 public:
  explicit VerbsRegistrar(struct ibv_pd* pd) : pd_(pd) {}
  Result<MemoryRegion> Register(void* addr, size_t length) override;
  void Deregister(const MemoryRegion& region) override;

 private:
  struct ibv_pd* pd_;
};

class RegistrationCache {
 public:
  // `max_bytes`: the most memory kept registered; unpinned regions are deregistered, least
  // recently used first, to make room.
  RegistrationCache(MemoryRegistrar* registrar, size_t max_bytes)
      : registrar_(registrar), max_bytes_(max_bytes) {}
  ~RegistrationCache();
  RegistrationCache(const RegistrationCache&) = delete;
  RegistrationCache& operator=(const RegistrationCache&) = delete;

  // A region covering [addr, addr + length), pinned (never evicted) until Unpin. ENOMEM when
  // the budget is full of pinned regions.
  Result<MemoryRegion> Pin(const void* addr, size_t length);
  void Unpin(const MemoryRegion& region);
  // The memory [addr, addr + length) is about to be freed: deregisters every region overlapping
  // it. EBUSY (and nothing dropped) if one of them is pinned.
  Status Invalidate(const void* addr, size_t length);

  size_t registered_bytes() const;
  size_t entries() const;
  uint64_t hits() const;
  uint64_t misses() const;

 private:
  struct Entry {
    MemoryRegion region;
    int pins = 0;
    uint64_t last_use = 0;
  };
  using Key = std::pair<uint64_t, size_t>;  // (start, length): regions may overlap
  bool EvictFor(size_t length);             // with mu_ held

  MemoryRegistrar* const registrar_;
  const size_t max_bytes_;
  mutable std::mutex mu_;
  std::map<Key, Entry> entries_;
  size_t bytes_ = 0;
  uint64_t clock_ = 0;
  uint64_t hits_ = 0, misses_ = 0;
};

}  // namespace kvfs
