// ClusterStore: its life cycle (open, listen, join, shutdown, sync), the bookkeeping of the
// namespace map and per-peer traffic, and the local chunk keeping (the hidden chunk directory
// in the local store). The ChunkStore calls are in cluster_store_chunks.cc, what peers ask of
// this node (RequestHandler, namespace merge) in cluster_store_peers.cc.
#include "cluster_store.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <ctime>

namespace kvfs::cluster {
namespace {

// The hidden directory of the local store that holds this node's chunks, one file per key.
constexpr char kChunkDirName[] = ".kvfs-cluster-chunks";

}  // namespace

Result<std::unique_ptr<ClusterStore>> ClusterStore::Open(ChunkStore* local,
                                                         ClusterOptions options) {
  if (local == nullptr) return Status::Invalid("no local store");
  if (options.self == 0) return Status::Invalid("node id 0 is reserved");
  if (options.secret.empty()) return Status::Invalid("a cluster needs a shared secret");
  std::unique_ptr<ClusterStore> store(new ClusterStore(local, std::move(options)));
  KVFS_RETURN_IF_ERROR(store->LoadHeldChunks());
  KVFS_RETURN_IF_ERROR(store->LoadSnapshot());
  // The local store's evictions and corrupt drops are about held chunks, not names: they come
  // here first (local_removal.cc).
  local->SetListener(&store->local_events_);
  store->house_ = std::thread([s = store.get()] { s->Housekeeping(); });
  return store;
}

ClusterStore::~ClusterStore() {
  Shutdown();
  local_->SetListener(nullptr);
}

Status ClusterStore::LoadHeldChunks() {
  std::lock_guard lock(mu_);
  std::vector<ObjectRecord> records = local_->Records();
  for (const ObjectRecord& r : records) {
    if (r.parent == kRootId && r.name == kChunkDirName && r.type == ObjectType::kDirectory) {
      chunk_dir_ = r.id;
    }
  }
  if (chunk_dir_ == kInvalidId) return Status::Ok();
  for (const ObjectRecord& r : records) {
    if (r.parent == chunk_dir_ && r.type == ObjectType::kFile) {
      chunks_[r.name] = {r.id, r.layout, r.flags};
      key_of_local_[r.id] = r.name;
    }
  }
  spdlog::info("cluster node {}: {} chunks held locally", options_.self, chunks_.size());
  return Status::Ok();
}

Result<uint16_t> ClusterStore::Listen(const std::string& host, uint16_t port) {
  if (server_) return Status::Invalid("already listening");
  ServerOptions so;
  so.host = host;
  so.port = port;
  so.secret = options_.secret;
  so.node_name = "node" + std::to_string(options_.self);
  so.threads = 4;
  so.kind = options_.transport;
  auto server = StartPeerServer(so, this);
  if (!server.ok()) return server.status();
  server_ = std::move(*server);
  return server_->port();
}

Status ClusterStore::Join(const std::vector<NodeInfo>& nodes) {
  if (membership_) return Status::Invalid("already joined");
  MembershipOptions mo;
  mo.ping_interval = options_.ping_interval;
  mo.ping_timeout = options_.ping_timeout;
  mo.misses_to_down = options_.misses_to_down;
  mo.client.secret = options_.secret;
  mo.client.node_name = "node" + std::to_string(options_.self);
  mo.client.connect_timeout = options_.request_timeout;
  mo.client.request_timeout = options_.request_timeout;
  mo.client.connections = 2;
  mo.client.kind = options_.transport;
  for (const NodeInfo& n : nodes) {
    if (n.id != options_.self) traffic_.emplace(n.id, std::make_unique<TrafficCounters>());
  }
  KVFS_ASSIGN_OR_RETURN(membership_, Membership::Create(options_.self, nodes, mo));
  // A peer that comes back may have changed things while we could not hear it.
  membership_->SetOnUp([this](NodeId id) { PullFrom(id); });
  for (NodeId id : membership_->AllNodes()) {
    if (id != options_.self) PullFrom(id);
  }
  membership_->Start();
  return Status::Ok();
}

void ClusterStore::Shutdown() {
  if (server_) server_->Stop();
  if (membership_) membership_->Stop();
  {
    std::lock_guard lock(house_mu_);
    house_stop_ = true;
  }
  house_cv_.notify_all();
  if (house_.joinable()) house_.join();
  DrainLocalRemovals();
  if (Status st = SaveSnapshot(); !st.ok())
    spdlog::error("cluster: final namespace snapshot failed: {}", st.ToString());
}

Status ClusterStore::Sync() {
  KVFS_RETURN_IF_ERROR(SaveSnapshot());
  return local_->Sync();
}

ClusterStore::TrafficCounters* ClusterStore::TrafficFor(NodeId peer) const {
  auto it = traffic_.find(peer);
  return it == traffic_.end() ? nullptr : it->second.get();
}

PeerTraffic ClusterStore::traffic(NodeId peer) const {
  PeerTraffic t;
  if (TrafficCounters* c = TrafficFor(peer)) {
    t.gets_sent = c->gets_sent;
    t.puts_sent = c->puts_sent;
    t.pushes_sent = c->pushes_sent;
    t.pushes_received = c->pushes_received;
  }
  return t;
}

std::string ClusterStore::transport_name() const {
  if (options_.transport == TransportKind::kTcp) return "tcp";
  if (options_.transport == TransportKind::kRdma) return "rdma";
  return RdmaDeviceAvailable() ? "rdma" : "tcp";
}

Result<ChunkLocation> ClusterStore::Location(ObjectId id) const {
  std::lock_guard lock(mu_);
  auto it = ns_.find(id);
  if (it == ns_.end()) return Status::NotFound("no such record in the cluster namespace");
  ChunkLocation loc;
  if (auto* cl = AsClusterLayout(it->second.rec.layout.get())) {
    loc.chunk_key = cl->chunk_key;
    loc.replicas = cl->replicas;
    loc.local = chunks_.count(cl->chunk_key) != 0;
  }
  return loc;
}

void ClusterStore::SetEntryLocked(ObjectId id, Entry e) {
  auto old = ns_.find(id);
  if (old != ns_.end()) {
    if (auto* cl = AsClusterLayout(old->second.rec.layout.get())) {
      auto n = named_by_.find(cl->chunk_key);
      if (n != named_by_.end() && n->second == id) named_by_.erase(n);
    }
  }
  if (auto* cl = AsClusterLayout(e.rec.layout.get())) named_by_[cl->chunk_key] = id;
  ns_[id] = std::move(e);
  ++ns_version_;
}

void ClusterStore::EraseEntryLocked(std::map<ObjectId, Entry>::iterator it) {
  if (auto* cl = AsClusterLayout(it->second.rec.layout.get())) {
    auto n = named_by_.find(cl->chunk_key);
    if (n != named_by_.end() && n->second == it->first) named_by_.erase(n);
  }
  ns_.erase(it);
  ++ns_version_;
}

ClusterCounters ClusterStore::counters() const {
  ClusterCounters c;
  c.puts_sent = puts_sent_;
  c.puts_received = puts_received_;
  c.gets_sent = gets_sent_;
  c.gets_served = gets_served_;
  c.pushes_sent = pushes_sent_;
  c.pushes_received = pushes_received_;
  return c;
}

bool ClusterStore::HoldsChunk(const std::string& key) const {
  std::lock_guard lock(mu_);
  return chunks_.count(key) != 0;
}

uint64_t ClusterStore::Now() const {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

// ---- local chunk keeping ----

Status ClusterStore::StoreChunkLocked(const std::string& key, LayoutRef layout, uint32_t flags) {
  MetaBatch batch;
  if (chunk_dir_ == kInvalidId) {
    ObjectRecord dir;
    dir.id = local_->NewId();
    dir.parent = kRootId;
    dir.name = kChunkDirName;
    dir.type = ObjectType::kDirectory;
    dir.mode = 0700;
    batch.puts.push_back(dir);
  }
  const ObjectId dir_id = chunk_dir_ != kInvalidId ? chunk_dir_ : batch.puts.front().id;
  ObjectRecord rec;
  auto held = chunks_.find(key);
  rec.id = held != chunks_.end() ? held->second.local_id : local_->NewId();
  rec.parent = dir_id;
  rec.name = key;
  rec.type = ObjectType::kFile;
  rec.mode = 0600;
  rec.flags = flags;
  rec.layout = layout;
  batch.puts.push_back(rec);
  KVFS_RETURN_IF_ERROR(local_->Apply(batch));
  chunk_dir_ = dir_id;
  chunks_[key] = {rec.id, std::move(layout), flags};
  key_of_local_[rec.id] = key;
  return Status::Ok();
}

void ClusterStore::SyncChunkFlagsLocked(const Entry& e) {
  auto* cl = AsClusterLayout(e.rec.layout.get());
  if (!cl) return;
  auto it = chunks_.find(cl->chunk_key);
  const uint32_t want = e.rec.flags & kFlagPinned;
  if (it == chunks_.end() || it->second.flags == want) return;
  Status st = StoreChunkLocked(cl->chunk_key, it->second.layout, want);
  if (!st.ok()) spdlog::warn("cluster: pinning chunk {}: {}", cl->chunk_key, st.ToString());
}

void ClusterStore::DropChunkLocked(const std::string& key) {
  auto it = chunks_.find(key);
  if (it == chunks_.end()) return;
  MetaBatch batch;
  batch.removes.push_back(it->second.local_id);
  Status st = local_->Apply(batch);
  if (!st.ok()) {
    spdlog::warn("cluster: dropping chunk {} failed: {}", key, st.ToString());
    return;
  }
  key_of_local_.erase(it->second.local_id);
  chunks_.erase(it);
}

LayoutRef ClusterStore::HeldLocked(const std::string& key) const {
  auto it = chunks_.find(key);
  return it == chunks_.end() ? nullptr : it->second.layout;
}

}  // namespace kvfs::cluster
