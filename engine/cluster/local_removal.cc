// What the local store's own removals mean in a cluster, and the ChunkStore calls that name a
// record by its namespace id but act on the local store's copy of its chunk (Touch, Evict,
// Verify).
//
// The local store evicts (bounded cache) or drops (checksum failure) the record of a held
// chunk. That removes this node's copy only. When another node is listed as holding the chunk
// the name stays and reads go there; the record's layout here loses its local copy (and the fs
// is told, so it lets go of the old extents). When this node was the only holder the data is
// gone: the name is removed cluster-wide, like an unlink (tombstone, pushed to every peer), and
// the fs hears about it through its StoreListener with the namespace id.
#include <spdlog/spdlog.h>

#include <algorithm>

#include "cluster_store.h"

namespace kvfs::cluster {
namespace {
constexpr size_t kVerifyPiece = 16u << 20;
}  // namespace

void ClusterStore::SetListener(StoreListener* listener) { store_listener_.store(listener); }

void ClusterStore::QueueLocalRemoval(ObjectId local_id, bool corrupt) {
  std::lock_guard lock(removals_mu_);
  removals_.push_back({local_id, corrupt});
}

void ClusterStore::DrainLocalRemovals() {
  std::vector<LocalRemoval> todo;
  {
    std::lock_guard lock(removals_mu_);
    todo.swap(removals_);
  }
  if (todo.empty()) return;
  struct Replaced {
    ObjectId id;
    LayoutRef from, from_local, to;
  };
  std::vector<Replaced> replaced;
  std::vector<std::pair<ObjectId, bool>> removed;  // namespace id, corrupt
  wire::NamespaceUpdate update;
  update.origin = options_.self;
  {
    std::lock_guard lock(mu_);
    const uint64_t stamp = std::max(Now(), last_stamp_ + 1);
    for (const LocalRemoval& r : todo) {
      auto k = key_of_local_.find(r.local_id);
      if (k == key_of_local_.end()) continue;  // not a chunk record (or already dropped)
      const std::string key = k->second;
      key_of_local_.erase(k);
      chunks_.erase(key);  // the local store already removed (and journaled) its record
      spdlog::info("cluster: local copy of chunk {} {}", key,
                   r.corrupt ? "was corrupt" : "evicted");
      auto n = named_by_.find(key);
      if (n == named_by_.end()) continue;
      auto it = ns_.find(n->second);
      if (it == ns_.end()) continue;
      const ClusterLayout* cl = AsClusterLayout(it->second.rec.layout.get());
      if (!cl) continue;
      const bool elsewhere = std::any_of(cl->replicas.begin(), cl->replicas.end(),
                                         [&](NodeId id) { return id != options_.self; });
      if (elsewhere) {
        auto copy = std::make_shared<ClusterLayout>(*cl);
        copy->local = nullptr;
        copy->replicas.erase(
            std::remove(copy->replicas.begin(), copy->replicas.end(), options_.self),
            copy->replicas.end());
        replaced.push_back({it->first, it->second.rec.layout, cl->local, copy});
        it->second.rec.layout = std::move(copy);
        ++ns_version_;
      } else {
        tombstones_[it->first] = {stamp, options_.self};
        update.removes.push_back({it->first, stamp, options_.self});
        removed.emplace_back(it->first, r.corrupt);
        EraseEntryLocked(it);
      }
    }
    if (!update.removes.empty()) last_stamp_ = stamp;
  }
  if (!update.removes.empty()) Broadcast(update);
  if (ClusterListener* l = listener_.load()) {
    for (const Replaced& r : replaced) {
      l->OnLayoutReplaced(r.id, r.from, r.to);
      if (r.from_local) l->OnLayoutReplaced(r.id, r.from_local, r.to);
    }
  }
  if (StoreListener* l = store_listener_.load()) {
    for (const auto& [id, corrupt] : removed) {
      if (corrupt) {
        l->OnDropped(id);
      } else {
        l->OnEvicted(id);
      }
    }
  }
}

void ClusterStore::Touch(ObjectId id, uint64_t stream) {
  ObjectId local_id = kInvalidId;
  {
    std::lock_guard lock(mu_);
    auto it = ns_.find(id);
    if (it == ns_.end()) return;
    const ClusterLayout* cl = AsClusterLayout(it->second.rec.layout.get());
    if (!cl) return;
    auto held = chunks_.find(cl->chunk_key);
    if (held == chunks_.end()) return;
    local_id = held->second.local_id;
  }
  local_->Touch(local_id, stream);
}

Status ClusterStore::Evict(ObjectId id) {
  ObjectId local_id = kInvalidId;
  {
    std::lock_guard lock(mu_);
    auto it = ns_.find(id);
    if (it == ns_.end()) return Status::NotFound("no such record");
    const ClusterLayout* cl = AsClusterLayout(it->second.rec.layout.get());
    if (!cl) return Status::Invalid("not a file with data");
    auto held = chunks_.find(cl->chunk_key);
    if (held == chunks_.end()) return Status::Invalid("this node holds no copy of the file");
    local_id = held->second.local_id;
  }
  Status st = local_->Evict(local_id);
  DrainLocalRemovals();
  return st;
}

Status ClusterStore::Verify(const LayoutRef& layout) {
  const ClusterLayout* cl = AsClusterLayout(layout.get());
  if (!cl) return local_->Verify(layout);
  LayoutRef held = cl->local;
  if (!held) {
    std::lock_guard lock(mu_);
    held = HeldLocked(cl->chunk_key);
  }
  if (held) {
    Status st = local_->Verify(held);
    DrainLocalRemovals();
    return st;
  }
  // No local copy: every byte read from a replica was checked by its store and, on the wire,
  // by the transport's data checksum.
  std::string buf(std::min<uint64_t>(cl->size, kVerifyPiece), '\0');
  for (uint64_t off = 0; off < cl->size;) {
    KVFS_ASSIGN_OR_RETURN(size_t n, ReadRemote(*cl, off, reinterpret_cast<uint8_t*>(buf.data()),
                                               std::min<uint64_t>(buf.size(), cl->size - off)));
    if (n == 0) return Status::IoError("replica of " + cl->chunk_key + " is short");
    off += n;
  }
  return Status::Ok();
}

}  // namespace kvfs::cluster
