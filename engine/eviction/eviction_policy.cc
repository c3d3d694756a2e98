#include "eviction_policy.h"

#include "fifo_policy.h"
#include "lfu_policy.h"
#include "lru_policy.h"
#include "prefix_policy.h"

namespace kvfs::eviction {

std::vector<ObjectId> EvictionPolicy::Evict(size_t n) {
  std::vector<ObjectId> out;
  while (out.size() < n) {
    auto victim = PickVictim();
    if (!victim) break;
    EvictOne(*victim);
    out.push_back(*victim);
  }
  return out;
}

std::vector<ObjectId> EvictionPolicy::EvictBytes(uint64_t bytes) {
  std::vector<ObjectId> out;
  uint64_t freed = 0;
  while (freed < bytes) {
    auto victim = PickVictim();
    if (!victim) break;
    freed += EvictOne(*victim);
    out.push_back(*victim);
  }
  return out;
}

std::vector<std::string> PolicyNames() { return {"lru", "fifo", "lfu", "prefix"}; }

Result<std::unique_ptr<EvictionPolicy>> MakePolicy(std::string_view name,
                                                   const PolicyOptions& options) {
  std::unique_ptr<EvictionPolicy> p;
  if (name == "lru")
    p = std::make_unique<LruPolicy>();
  else if (name == "fifo")
    p = std::make_unique<FifoPolicy>();
  else if (name == "lfu")
    p = std::make_unique<LfuPolicy>(options.lfu_aging);
  else if (name == "prefix")
    p = std::make_unique<PrefixPolicy>(options);
  else {
    return Status::Invalid("unknown eviction policy '" + std::string(name) +
                           "' (use lru, fifo, lfu or prefix)");
  }
  return p;
}

}  // namespace kvfs::eviction
