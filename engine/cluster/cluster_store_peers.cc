// ClusterStore as a RequestHandler: what peers ask of this node (Get/Put of chunk pieces,
// ApplyNamespace, PullNamespace), the conversion of namespace records to and from the wire,
// and the merge of a peer's namespace update by stamp (Merge, PullFrom). Split out of
// cluster_store.cc to keep each file to one job.
#include <spdlog/spdlog.h>

#include <algorithm>

#include "cluster_store.h"

namespace kvfs::cluster {
namespace {

bool Newer(uint64_t stamp_a, NodeId origin_a, uint64_t stamp_b, NodeId origin_b) {
  return stamp_a != stamp_b ? stamp_a > stamp_b : origin_a > origin_b;
}

}  // namespace

// ---- namespace records on the wire ----

wire::NamespaceRecord ClusterStore::ToWire(const Entry& e) const {
  const ObjectRecord& r = e.rec;
  wire::NamespaceRecord w;
  w.id = r.id;
  w.parent = r.parent;
  w.name = r.name;
  w.type = r.type;
  w.mode = r.mode;
  w.uid = r.uid;
  w.gid = r.gid;
  w.flags = r.flags;
  w.atime = r.atime;
  w.mtime = r.mtime;
  w.ctime = r.ctime;
  w.symlink_target = r.symlink_target;
  w.prefix_parent = r.prefix_parent;
  w.size = r.size();
  if (auto* cl = AsClusterLayout(r.layout.get())) {
    w.chunk_key = cl->chunk_key;
    w.replicas = cl->replicas;
  }
  w.stamp = e.stamp;
  w.origin = e.origin;
  w.rdev = r.rdev;
  w.extra_links = r.extra_links;
  return w;
}

ClusterStore::Entry ClusterStore::FromWire(const wire::NamespaceRecord& w) const {
  Entry e;
  ObjectRecord& r = e.rec;
  r.id = w.id;
  r.parent = w.parent;
  r.name = w.name;
  r.type = w.type;
  r.mode = w.mode;
  r.uid = w.uid;
  r.gid = w.gid;
  r.flags = w.flags;
  r.atime = w.atime;
  r.mtime = w.mtime;
  r.ctime = w.ctime;
  r.symlink_target = w.symlink_target;
  r.prefix_parent = w.prefix_parent;
  r.rdev = w.rdev;
  r.extra_links = w.extra_links;
  if (!w.chunk_key.empty()) {
    auto layout = std::make_shared<ClusterLayout>();
    layout->size = w.size;
    layout->chunk_key = w.chunk_key;
    layout->replicas = w.replicas;
    layout->local = HeldLocked(w.chunk_key);
    r.layout = std::move(layout);
  }
  e.stamp = w.stamp;
  e.origin = w.origin;
  return e;
}

// ---- RequestHandler: what peers ask of this node ----

Result<wire::LookupReply> ClusterStore::Lookup(const wire::LookupRequest&) {
  return Status::Error(EOPNOTSUPP, "cluster nodes answer lookups locally");
}
Result<wire::ListReply> ClusterStore::List(const wire::ListRequest&) {
  return Status::Error(EOPNOTSUPP, "cluster nodes answer listings locally");
}
Status ClusterStore::Remove(const wire::RemoveRequest&) {
  return Status::Error(EOPNOTSUPP, "removes travel as namespace pushes");
}
Status ClusterStore::Rename(const wire::RenameRequest&) {
  return Status::Error(EOPNOTSUPP, "renames travel as namespace pushes");
}

Result<wire::GetReply> ClusterStore::Get(const wire::GetRequest& req, std::span<uint8_t> out) {
  LayoutRef held;
  {
    std::lock_guard lock(mu_);
    held = HeldLocked(req.key);
  }
  if (!held) return Status::NotFound("chunk " + req.key + " not held here");
  ++gets_served_;
  wire::GetReply reply;
  reply.object_size = held->size;
  if (req.offset < held->size) {
    KVFS_ASSIGN_OR_RETURN(size_t n, local_->Read(held, req.offset, out.data(), out.size()));
    reply.length = n;
  }
  return reply;
}

Result<wire::PutReply> ClusterStore::Put(const wire::PutRequest& req,
                                         std::span<const uint8_t> data) {
  if (req.key.empty() || req.key.size() > wire::kMaxChunkKeyLen ||
      req.key.find('/') != std::string::npos) {
    return Status::Invalid("bad chunk key");
  }
  ++puts_received_;
  KVFS_ASSIGN_OR_RETURN(std::unique_ptr<ChunkWriter> writer, local_->NewWriter(nullptr));
  KVFS_RETURN_IF_ERROR(writer->Write(0, data.data(), data.size()));
  KVFS_ASSIGN_OR_RETURN(LayoutRef layout, writer->Finish());
  wire::PutReply reply;
  {
    std::lock_guard lock(mu_);
    // A record that arrived before its chunk says whether it is pinned, and now reads locally.
    auto named = named_by_.find(req.key);
    auto entry = named != named_by_.end() ? ns_.find(named->second) : ns_.end();
    const uint32_t flags = entry != ns_.end() ? (entry->second.rec.flags & kFlagPinned) : 0;
    KVFS_RETURN_IF_ERROR(StoreChunkLocked(req.key, layout, flags));
    if (entry != ns_.end()) {
      auto* cl = AsClusterLayout(entry->second.rec.layout.get());
      if (cl && !cl->local) {
        auto copy = std::make_shared<ClusterLayout>(*cl);
        copy->local = layout;
        entry->second.rec.layout = std::move(copy);
      }
    }
    reply = wire::PutReply{chunks_[req.key].local_id, 0};
  }
  DrainLocalRemovals();
  return reply;
}

Status ClusterStore::ApplyNamespace(const wire::NamespaceUpdate& update) {
  ++pushes_received_;
  if (TrafficCounters* t = TrafficFor(update.origin)) ++t->pushes_received;
  return Merge(update);
}

Status ClusterStore::Merge(const wire::NamespaceUpdate& update) {
  std::vector<ObjectRecord> put_events;
  std::vector<ObjectId> remove_events;
  {
    std::lock_guard lock(mu_);
    for (const wire::NamespaceRemove& r : update.removes) {
      auto tomb = tombstones_.find(r.id);
      if (tomb != tombstones_.end() &&
          !Newer(r.stamp, r.origin, tomb->second.stamp, tomb->second.origin)) {
        continue;
      }
      auto it = ns_.find(r.id);
      if (it != ns_.end() && Newer(it->second.stamp, it->second.origin, r.stamp, r.origin)) {
        continue;  // a later put of this id wins over the remove
      }
      tombstones_[r.id] = {r.stamp, r.origin};
      last_stamp_ = std::max(last_stamp_, r.stamp);
      ++ns_version_;
      if (it == ns_.end()) continue;
      if (auto* cl = AsClusterLayout(it->second.rec.layout.get())) {
        DropChunkLocked(cl->chunk_key);
      }
      EraseEntryLocked(it);
      remove_events.push_back(r.id);
    }
    for (const wire::NamespaceRecord& w : update.puts) {
      auto tomb = tombstones_.find(w.id);
      if (tomb != tombstones_.end() &&
          !Newer(w.stamp, w.origin, tomb->second.stamp, tomb->second.origin)) {
        continue;
      }
      auto it = ns_.find(w.id);
      if (it != ns_.end() && !Newer(w.stamp, w.origin, it->second.stamp, it->second.origin)) {
        continue;  // already have this change or a later one
      }
      Entry e = FromWire(w);
      if (it != ns_.end()) {
        auto* old_cl = AsClusterLayout(it->second.rec.layout.get());
        if (old_cl && old_cl->chunk_key != w.chunk_key) DropChunkLocked(old_cl->chunk_key);
      }
      tombstones_.erase(w.id);
      // Our next stamp follows every change we have seen, even from a peer whose clock leads.
      last_stamp_ = std::max(last_stamp_, w.stamp);
      put_events.push_back(e.rec);
      SyncChunkFlagsLocked(e);
      SetEntryLocked(w.id, std::move(e));
    }
  }
  // The listener runs outside the lock: it may call back into Read or Records.
  if (ClusterListener* l = listener_.load()) {
    for (ObjectId id : remove_events) l->OnRemove(id);
    for (const ObjectRecord& r : put_events) l->OnPut(r);
  }
  return Status::Ok();
}

Result<wire::NamespaceUpdate> ClusterStore::PullNamespace(const wire::NamespacePullRequest&) {
  wire::NamespaceUpdate all;
  all.origin = options_.self;
  std::lock_guard lock(mu_);
  if (ns_.size() + tombstones_.size() > wire::kMaxNamespaceRecords) {
    return Status::Error(EMSGSIZE, "namespace too large for one pull");
  }
  for (const auto& [id, e] : ns_) all.puts.push_back(ToWire(e));
  for (const auto& [id, t] : tombstones_) all.removes.push_back({id, t.stamp, t.origin});
  return all;
}

void ClusterStore::PullFrom(NodeId peer) {
  PeerClient* client = membership_ ? membership_->Client(peer) : nullptr;
  if (!client) return;
  CallOptions call;
  call.timeout = options_.request_timeout;
  wire::NamespacePullRequest req;
  req.node = options_.self;
  auto r = client->PullNamespace(req, call);
  if (!r.ok()) {
    spdlog::info("cluster: namespace pull from node {} failed: {}", peer, r.status().ToString());
    return;
  }
  Status st = Merge(*r);
  if (!st.ok()) spdlog::warn("cluster: merging node {}'s namespace: {}", peer, st.ToString());
}

}  // namespace kvfs::cluster
