// The ChunkStore side of ClusterStore: records and ids, Publish (placing a chunk on its
// replicas), Apply with the broadcast of namespace updates to peers, writers, reads (local copy
// first, then the replicas) and stats. Split out of cluster_store.cc to keep each file to one
// job.
#include <spdlog/spdlog.h>

#include <algorithm>

#include "cluster_store.h"

namespace kvfs::cluster {
namespace {

// Object ids carry the node id in the high 16 bits, the local store's counter below.
constexpr int kNodeShift = 48;
constexpr uint64_t kLocalMask = (uint64_t{1} << kNodeShift) - 1;
// The most bytes moved by one GET or PUT frame (under the transport's default frame cap).
constexpr size_t kMaxPiece = 16u << 20;
constexpr size_t kMaxPutBytes = wire::kDefaultMaxFrame - (1u << 20);

}  // namespace

std::vector<ObjectRecord> ClusterStore::Records() const {
  std::lock_guard lock(mu_);
  std::vector<ObjectRecord> out;
  out.reserve(ns_.size());
  for (const auto& [id, e] : ns_) out.push_back(e.rec);
  return out;
}

ObjectId ClusterStore::NewId() {
  return (static_cast<uint64_t>(options_.self) << kNodeShift) | (local_->NewId() & kLocalMask);
}

Result<LayoutRef> ClusterStore::Publish(ObjectId id, const LayoutRef& fresh) {
  (void)id;
  // A fresh key per published version: an overwrite never aliases the chunk a reader holds.
  const std::string key = ChunkKey(options_.self, NewId());
  const uint64_t size = fresh->size;
  {
    std::lock_guard lock(mu_);
    KVFS_RETURN_IF_ERROR(StoreChunkLocked(key, fresh));
  }
  std::vector<NodeId> replicas;
  std::vector<NodeId> live = membership_ ? membership_->LiveNodes() : std::vector<NodeId>{};
  std::vector<NodeId> ranked = RendezvousPlacement::Rank(key, live);
  if (ranked.size() > options_.replicas) ranked.resize(options_.replicas);
  std::string bytes;
  for (NodeId n : ranked) {
    if (n == options_.self) {
      replicas.push_back(n);
      continue;
    }
    if (size > kMaxPutBytes) return Status::Error(EFBIG, "chunk too large to replicate");
    if (bytes.size() != size) {
      bytes.resize(size);
      uint64_t done = 0;
      while (done < size) {
        auto r = local_->Read(fresh, done, bytes.data() + done, size - done);
        if (!r.ok()) return r.status();
        if (*r == 0) return Status::IoError("short read of a fresh chunk");
        done += *r;
      }
    }
    wire::PutRequest req;
    req.key = key;
    req.mode = 0600;
    CallOptions call;
    call.timeout = options_.request_timeout;
    ++puts_sent_;
    if (TrafficCounters* t = TrafficFor(n)) ++t->puts_sent;
    auto put = membership_->Client(n)->Put(req, wire::AsBytes(bytes), call);
    if (put.ok()) {
      replicas.push_back(n);
    } else {
      spdlog::warn("cluster: PUT {} to node {} failed: {}", key, n, put.status().ToString());
    }
  }
  const bool ranked_self =
      std::find(replicas.begin(), replicas.end(), options_.self) != replicas.end();
  bool keep = true;
  if (!ranked_self) {
    if (options_.keep_local_copy || replicas.empty()) {
      // The writer's own copy is listed last: readers elsewhere try the ranked nodes first.
      replicas.push_back(options_.self);
    } else {
      keep = false;
      std::lock_guard lock(mu_);
      DropChunkLocked(key);
    }
  }
  auto layout = std::make_shared<ClusterLayout>();
  layout->size = size;
  layout->chunk_key = key;
  layout->replicas = std::move(replicas);
  if (keep) layout->local = fresh;
  return LayoutRef(std::move(layout));
}

Status ClusterStore::Apply(const MetaBatch& batch) {
  // Publish first (network I/O, no lock held), then change the namespace in one step.
  std::vector<ObjectRecord> puts = batch.puts;
  std::vector<std::pair<ObjectRecord*, LayoutRef>> published;  // record, the caller's layout
  for (ObjectRecord& rec : puts) {
    if (!rec.layout || rec.type != ObjectType::kFile || AsClusterLayout(rec.layout.get())) {
      continue;
    }
    {
      // A caller that still holds the local layout of a version published before (a rename or
      // chmod right after the publish) means that version, not a new one.
      std::lock_guard lock(mu_);
      auto it = ns_.find(rec.id);
      const ClusterLayout* cl =
          it != ns_.end() ? AsClusterLayout(it->second.rec.layout.get()) : nullptr;
      if (cl && cl->local == rec.layout) {
        rec.layout = it->second.rec.layout;
        continue;
      }
    }
    LayoutRef fresh = rec.layout;
    KVFS_ASSIGN_OR_RETURN(rec.layout, Publish(rec.id, rec.layout));
    published.emplace_back(&rec, std::move(fresh));
  }
  wire::NamespaceUpdate update;
  update.origin = options_.self;
  {
    std::lock_guard lock(mu_);
    uint64_t stamp = std::max(Now(), last_stamp_ + 1);
    for (ObjectId id : batch.removes) {
      auto it = ns_.find(id);
      if (it != ns_.end()) {
        if (auto* cl = AsClusterLayout(it->second.rec.layout.get())) {
          DropChunkLocked(cl->chunk_key);
        }
        EraseEntryLocked(it);
      }
      tombstones_[id] = {stamp, options_.self};
      ++ns_version_;
      update.removes.push_back({id, stamp, options_.self});
    }
    for (ObjectRecord& rec : puts) {
      auto it = ns_.find(rec.id);
      if (it != ns_.end()) {
        auto* old_cl = AsClusterLayout(it->second.rec.layout.get());
        auto* new_cl = AsClusterLayout(rec.layout.get());
        if (old_cl && (!new_cl || new_cl->chunk_key != old_cl->chunk_key)) {
          DropChunkLocked(old_cl->chunk_key);
        }
      }
      tombstones_.erase(rec.id);
      Entry e{rec, stamp, options_.self};
      update.puts.push_back(ToWire(e));
      SyncChunkFlagsLocked(e);
      SetEntryLocked(e.rec.id, std::move(e));
    }
    last_stamp_ = stamp;
  }
  Broadcast(update);
  // The caller keeps the local layout it published; point it at the cluster layout instead.
  if (ClusterListener* l = listener_.load()) {
    for (const auto& [rec, fresh] : published) l->OnLayoutReplaced(rec->id, fresh, rec->layout);
  }
  DrainLocalRemovals();
  return Status::Ok();
}

void ClusterStore::Broadcast(const wire::NamespaceUpdate& update) {
  if (!membership_) return;
  CallOptions call;
  call.timeout = options_.request_timeout;
  // Down peers are skipped: they pull the whole namespace when they come back.
  for (NodeId n : membership_->LiveNodes()) {
    if (n == options_.self) continue;
    ++pushes_sent_;
    if (TrafficCounters* t = TrafficFor(n)) ++t->pushes_sent;
    Status st = membership_->Client(n)->PushNamespace(update, call);
    if (!st.ok()) spdlog::warn("cluster: namespace push to node {} failed: {}", n, st.ToString());
  }
}

Result<std::unique_ptr<ChunkWriter>> ClusterStore::NewWriter(LayoutRef base) {
  auto* cl = AsClusterLayout(base.get());
  if (!cl) return local_->NewWriter(std::move(base));
  LayoutRef local = cl->local;
  if (!local) {
    std::lock_guard lock(mu_);
    local = HeldLocked(cl->chunk_key);
  }
  if (local) return local_->NewWriter(std::move(local));
  // The base lives elsewhere: copy it in and start the writer from that local copy, so the new
  // writer is clean (not dirty) until the caller changes something.
  KVFS_ASSIGN_OR_RETURN(std::unique_ptr<ChunkWriter> copy, local_->NewWriter(nullptr));
  std::string buf(std::min<uint64_t>(cl->size, kMaxPiece), '\0');
  for (uint64_t off = 0; off < cl->size;) {
    KVFS_ASSIGN_OR_RETURN(size_t n, Read(base, off, buf.data(), buf.size()));
    if (n == 0) return Status::IoError("short read of a remote base");
    KVFS_RETURN_IF_ERROR(copy->Write(off, buf.data(), n));
    off += n;
  }
  KVFS_ASSIGN_OR_RETURN(LayoutRef copied, copy->Finish());
  return local_->NewWriter(std::move(copied));
}

Result<size_t> ClusterStore::Read(const LayoutRef& layout, uint64_t offset, void* out, size_t len) {
  auto* cl = AsClusterLayout(layout.get());
  if (!cl) return local_->Read(layout, offset, out, len);
  if (cl->local) return local_->Read(cl->local, offset, out, len);
  LayoutRef held;
  {
    std::lock_guard lock(mu_);
    held = HeldLocked(cl->chunk_key);
  }
  if (held) return local_->Read(held, offset, out, len);
  if (offset >= cl->size) return size_t{0};
  len = static_cast<size_t>(std::min<uint64_t>(len, cl->size - offset));
  return ReadRemote(*cl, offset, static_cast<uint8_t*>(out), len);
}

Result<size_t> ClusterStore::ReadRemote(const ClusterLayout& layout, uint64_t offset, uint8_t* out,
                                        size_t len) {
  if (!membership_) return Status::IoError("chunk " + layout.chunk_key + " is not held locally");
  // Live replicas in ranking order first, then the ones believed down (they may be back).
  std::vector<NodeId> order;
  for (NodeId n : layout.replicas) {
    if (n != options_.self && membership_->IsUp(n)) order.push_back(n);
  }
  for (NodeId n : layout.replicas) {
    if (n != options_.self && !membership_->IsUp(n)) order.push_back(n);
  }
  Status last = Status::IoError("no replica of chunk " + layout.chunk_key);
  size_t done = 0;
  for (NodeId n : order) {
    PeerClient* client = membership_->Client(n);
    if (!client) continue;
    CallOptions call;
    call.timeout = options_.request_timeout;
    bool failed = false;
    while (done < len) {
      wire::GetRequest req;
      req.key = layout.chunk_key;
      req.offset = offset + done;
      req.length = std::min(len - done, kMaxPiece);
      ++gets_sent_;
      if (TrafficCounters* t = TrafficFor(n)) ++t->gets_sent;
      auto r = client->Get(req, std::span<uint8_t>(out + done, req.length), call);
      if (!r.ok()) {
        last = r.status();
        failed = true;
        break;
      }
      if (r->length == 0) break;  // the replica's chunk ends here
      done += r->length;
    }
    if (!failed) return done;
  }
  // Every replica failed. When no name refers to the chunk any more (unlinked or replaced
  // elsewhere, so its copies were dropped) that is ENOENT; otherwise the data exists but cannot
  // be reached now: EIO.
  {
    std::lock_guard lock(mu_);
    if (named_by_.count(layout.chunk_key) == 0)
      return Status::NotFound("chunk " + layout.chunk_key + " is no longer named");
  }
  return Status::IoError("chunk " + layout.chunk_key + " unreachable: " + last.ToString());
}

StoreStats ClusterStore::Stats() const {
  StoreStats s = local_->Stats();
  std::lock_guard lock(mu_);
  s.objects = ns_.size();
  s.files = 0;
  s.logical_bytes = 0;
  for (const auto& [id, e] : ns_) {
    if (e.rec.type != ObjectType::kFile) continue;
    ++s.files;
    s.logical_bytes += e.rec.size();
  }
  return s;
}

}  // namespace kvfs::cluster
