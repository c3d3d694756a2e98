#include "cluster_store.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <ctime>

namespace kvfs::cluster {
namespace {

// The hidden directory of the local store that holds this node's chunks, one file per key.
constexpr char kChunkDirName[] = ".kvfs-cluster-chunks";
// Object ids carry the node id in the high 16 bits, the local store's counter below.
constexpr int kNodeShift = 48;
constexpr uint64_t kLocalMask = (uint64_t{1} << kNodeShift) - 1;
// The most bytes moved by one GET or PUT frame (under the transport's default frame cap).
constexpr size_t kMaxPiece = 16u << 20;
constexpr size_t kMaxPutBytes = wire::kDefaultMaxFrame - (1u << 20);

bool Newer(uint64_t stamp_a, NodeId origin_a, uint64_t stamp_b, NodeId origin_b) {
  return stamp_a != stamp_b ? stamp_a > stamp_b : origin_a > origin_b;
}

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

// ---- ChunkStore ----

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
