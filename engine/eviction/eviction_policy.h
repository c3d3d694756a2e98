// EvictionPolicy: decides which published chunks the engine frees when it is full. Modelled on
// CacheLib Navy's policy interface (track, touch, remove, evict, persist, recover): a policy
// only ranks ids; the engine owns the data, frees what Evict() returns and keeps the byte
// accounting that decides *when* to evict. See docs/eviction.md.
//
// Thread-safety: policies are NOT internally locked. The engine calls every method under the
// lock that already guards its index, so a policy adds no lock of its own to the hot path.
//
// Pinning is tracked by the policy (SetPinned): a pinned id is never returned by PickVictim or
// Evict until it is unpinned. Pinning an id the policy does not track yet is remembered, so a
// chunk pinned before it is published is already protected when Track() sees it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kvfs/object.h"
#include "kvfs/status.h"

namespace kvfs::eviction {

// Who issued an access and where it falls in that client's access sequence. Accesses from the
// same stream close together in time form a burst (one request's prefix walk); PrefixPolicy
// learns chains from bursts. Policies that do not care ignore it.
struct AccessContext {
  uint64_t stream = 0;    // client / connection / process that issued the access
  uint32_t position = 0;  // index in the burst (0 = first chunk of a request), if known
  uint64_t time_ms = 0;   // wall or trace time; 0 = unknown (bursts then split on position 0)
};

struct TrackHints {
  ObjectId parent = kInvalidId;  // explicit chain link from the writer (xattr user.kvfs.parent)
  AccessContext context;
  bool partial = false;  // the chunk is shorter than a full block: usually a request's last one
};

// Tunables of the policies; defaults are the values documented in docs/eviction.md.
struct PolicyOptions {
  // LFU: how much weight old frequency keeps (dynamic aging, LFU-DA). 1.0 = classic LFU-DA.
  double lfu_aging = 1.0;
  // Prefix: share of tracked bytes the protected (re-read) segment starts with. 0, as ARC's
  // target starts: ghost hits of re-read chunks grow it from there.
  double prefix_protected_fraction = 0.0;
  // Prefix: how far one ghost hit (an evicted id written again) moves the protected share, in
  // units of that chunk's share of the tracked bytes times ARC's ghost-size ratio (1 = ARC's
  // step). 0 keeps the share fixed at prefix_protected_fraction.
  double prefix_adapt_step = 1.0;
  // Prefix: accesses of one stream further apart than this start a new burst (chain).
  uint64_t prefix_burst_window_ms = 2000;
};

class EvictionPolicy {
 public:
  virtual ~EvictionPolicy() = default;

  virtual std::string_view name() const = 0;

  // A chunk was published (or republished under the same id). `bytes` is what freeing it
  // returns.
  virtual void Track(ObjectId id, uint64_t bytes, const TrackHints& hints) = 0;
  // A read hit. Unknown ids are ignored.
  virtual void Touch(ObjectId id, const AccessContext& context) = 0;
  // The chunk was unlinked or freed by someone else. Unknown ids are ignored.
  virtual void Remove(ObjectId id) = 0;
  virtual void SetPinned(ObjectId id, bool pinned) = 0;
  // The writer named (or changed) the chunk's chain parent after it was published
  // (xattr user.kvfs.parent). Policies that do not use chains ignore it.
  virtual void SetParent(ObjectId /*id*/, ObjectId /*parent*/) {}

  // The next victim without removing it; nullopt when every tracked id is pinned (or none).
  virtual std::optional<ObjectId> PickVictim() const = 0;
  // Removes and returns up to `n` victims in eviction order.
  std::vector<ObjectId> Evict(size_t n);
  // Removes and returns victims until at least `bytes` of tracked bytes were released (fewer
  // when only pinned ids remain).
  std::vector<ObjectId> EvictBytes(uint64_t bytes);

  virtual size_t size() const = 0;  // tracked ids, pinned ones included
  virtual uint64_t tracked_bytes() const = 0;

  // A versioned, checksummed blob of the policy's state; Recover() replaces the state with it
  // and rejects a blob that is corrupt, truncated or written by another policy.
  virtual std::string Persist() const = 0;
  virtual Status Recover(std::string_view blob) = 0;

 protected:
  // Removes the victim PickVictim() returned and returns its bytes. Policies that learn from
  // evictions (ghost entries) override it.
  virtual uint64_t EvictOne(ObjectId victim) = 0;
};

// "lru" (default), "fifo", "lfu", "prefix". Unknown names give EINVAL.
Result<std::unique_ptr<EvictionPolicy>> MakePolicy(std::string_view name,
                                                   const PolicyOptions& options = {});
std::vector<std::string> PolicyNames();

}  // namespace kvfs::eviction
