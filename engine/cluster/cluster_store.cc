// ClusterStore: life cycle (open, register, load, shut down) and how the namespace's changes
// reach the fs and the holdings. The held chunks themselves are in cluster_store_holdings.cc,
// publishing and reading chunks in cluster_store_io.cc, what peers ask in
// cluster_store_serve.cc, what kvfsctl sees in cluster_store_views.cc.
#include "cluster_store.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <thread>

#include "repair.h"

namespace kvfs::cluster {
namespace {

// The engine's hidden directory of held chunks, one file record per chunk named by its id.
constexpr char kChunkDirName[] = ".kvfs-cluster-chunks";
constexpr int kNodeShift = 48;
constexpr uint64_t kLocalMask = (uint64_t{1} << kNodeShift) - 1;
// A read of the namespace at start that failed midway is tried again this often in all, a
// second apart: long enough for a node that was frozen past its lease to register again (its
// next read is then under a compaction hold), short enough that a node whose etcd is gone
// says so within seconds.
constexpr int kLoadAttempts = 5;
constexpr auto kLoadRetryPause = std::chrono::seconds(1);

}  // namespace

ClusterStore::ClusterStore(std::unique_ptr<ChunkStore> local, ClusterOptions options)
    : local_(std::move(local)),
      options_(std::move(options)),
      keys_(options_.etcd_prefix),
      local_events_(this),
      compactor_(options_.etcd_history) {}

Result<std::unique_ptr<ClusterStore>> ClusterStore::Open(std::unique_ptr<ChunkStore> local,
                                                         ClusterOptions options) {
  if (!local) return Status::Invalid("no local store");
  if (options.node_id == 0) return Status::Invalid("node id 0 is reserved");
  if (options.secret.empty()) return Status::Invalid("a cluster needs a shared secret");
  static_assert(kMaxReplicas == HolderList::kMaxHolders);
  if (options.replicas == 0 || options.replicas > HolderList::kMaxHolders)
    return Status::Invalid("replicas must be 1.." + std::to_string(HolderList::kMaxHolders));
  if (options.etcd_prefix.empty() || options.etcd_prefix.back() != '/')
    return Status::Invalid("the etcd prefix must end with '/'");
  std::unique_ptr<ClusterStore> store(new ClusterStore(std::move(local), std::move(options)));
  KVFS_RETURN_IF_ERROR(store->Start());
  return store;
}

Status ClusterStore::Start() {
  KVFS_ASSIGN_OR_RETURN(etcd_, etcd::MakeClient(options_.etcd));
  spdlog::info("cluster: etcd at {} through {}", etcd_->endpoint(),
               options_.etcd.api == etcd::ClientOptions::Api::kGrpc ? "its gRPC API"
                                                                    : "its v3 JSON gateway");
  KVFS_RETURN_IF_ERROR(LoadHoldings());
  retire_budget_ = local_->Stats().capacity_bytes / kRetireShare;
  ServerOptions so;
  so.host = options_.listen_host;
  so.port = options_.listen_port;
  so.secret = options_.secret;
  so.node_name = NodeName(options_.node_id);
  so.threads = 8;
  so.kind = options_.transport;
  KVFS_ASSIGN_OR_RETURN(server_, StartPeerServer(so, this));
  std::string address = options_.advertise;
  if (address.empty()) address = options_.listen_host + ":" + std::to_string(server_->port());
  KVFS_RETURN_IF_ERROR(CheckAdvertised(address));
  // Object ids carry this node's id above the engine's counter; after a lost data directory
  // the counter may restart, so it starts above the highest id etcd has from this node.
  KVFS_ASSIGN_OR_RETURN(ObjectId highest,
                        NamespaceLog(etcd_.get(), &keys_, {}, {}).HighestId(options_.node_id));
  next_id_ = std::max<uint64_t>((highest & kLocalMask) + 1, local_->NewId() & kLocalMask);
  MembershipOptions mo;
  mo.self = options_.node_id;
  mo.address = address;
  mo.ttl = options_.lease_ttl;
  mo.replicas = options_.replicas;
  mo.usage = [this] {
    StoreStats s = local_->Stats();
    return std::make_pair(s.capacity_bytes, s.used_bytes);
  };
  KVFS_ASSIGN_OR_RETURN(
      membership_, Membership::Start(etcd_.get(), &keys_, mo, [this] { MembershipChanged(); }));
  NamespaceLogOptions lo;
  lo.self = options_.node_id;
  NamespaceLogHooks hooks;
  hooks.apply = [this](std::vector<ObjectRecord>&& puts, std::vector<ObjectId>&& removes) {
    OnRemote(std::move(puts), std::move(removes));
  };
  hooks.resync = [this](const std::vector<ObjectId>& present, int64_t revision) {
    OnResync(present, revision);
  };
  hooks.reset = [this](ObjectId id, const ObjectRecord* rec, ResetOrigin origin) {
    OnReset(id, rec, origin);
  };
  hooks.history_lost = [this] {
    if (StoreListener* l = listener_.load()) l->OnRemoteHistoryLost();
  };
  hooks.writable = [this] { return membership_->etcd_reachable(); };
  hooks.unreachable = [this](const Status& why) { membership_->NoteUnreachable(why); };
  hooks.lease = [this] { return membership_->lease(); };
  hooks.committed = [this](uint64_t seq, int64_t revision) {
    if (StoreListener* l = listener_.load()) l->OnCommitted(seq, static_cast<uint64_t>(revision));
  };
  log_ = std::make_unique<NamespaceLog>(etcd_.get(), &keys_, lo, std::move(hooks));
  repair_ = std::make_unique<Repairer>(this);
  local_->SetListener(&local_events_);
  spdlog::info("cluster: node {} serving peers at {}, etcd {}, replicas {}", options_.node_id,
               address, etcd_->endpoint(), options_.replicas);
  house_ = std::thread([this] {
    // Losses are handled as they come (until the holder lists say so, readers elsewhere are
    // sent to a copy that is gone); the rest once a second.
    auto tick = std::chrono::steady_clock::now();
    for (;;) {
      {
        std::unique_lock lock(house_mu_);
        house_cv_.wait_until(lock, tick, [&] { return stop_ || !losses_.empty(); });
        if (stop_) return;
      }
      HandleLocalLosses();
      const auto now = std::chrono::steady_clock::now();
      if (now < tick) continue;
      // Woken seconds past its tick, this process did not run (SIGSTOP, a paused VM, a host
      // stalled): the keep-alives of readers elsewhere could not reach it meanwhile, and time it
      // did not run must not end the grace of the copies they read.
      ExpireRetiring(/*resumed=*/now - tick > std::chrono::seconds(2));
      KeepReadsAlive();
      RetryLeaves();
      ProbeSuspects();
      CheckPeers();
      log_->ReleaseScanHold();
      CompactHistory();
      tick = std::chrono::steady_clock::now() + std::chrono::seconds(1);
    }
  });
  return Status::Ok();
}

void ClusterStore::CompactHistory() {
  const auto now = std::chrono::steady_clock::now();
  // The revision this node has applied: etcd was there or past it by now.
  int64_t target = compactor_.Due(now, log_->applied_revision());
  if (target == 0 || !membership_->etcd_reachable()) return;
  const std::vector<MemberInfo> members = membership_->Members();
  if (members.empty() || members.front().id != options_.node_id) return;  // not the lowest id
  // Never past a node's read of the whole namespace (NamespaceLog::HeldScan).
  etcd::RangeRequest holds;
  holds.key = keys_.ScanHoldPrefix();
  holds.range_end = etcd::PrefixEnd(holds.key);
  holds.keys_only = true;
  auto held = etcd_->Range(holds);
  if (!held.ok()) return;  // again in a second
  uint16_t held_by = 0;
  for (const etcd::KeyValue& kv : held->kvs) {
    // Only what kvfs writes: a hold without a lease (by hand) would stop compaction for good.
    auto node = keys_.ParseScanHold(kv.key);
    if (!node || kv.lease == 0 || kv.mod_revision >= target) continue;
    target = kv.mod_revision;
    held_by = *node;
  }
  const int64_t held_at = held_by != 0 ? target : 0;
  if (held_by != 0 && held_at != compaction_held_at_.load()) {
    spdlog::info("cluster: compaction held at revision {} while node {} reads the namespace",
                 held_at, held_by);
  }
  compaction_held_at_ = held_at;
  compaction_held_by_ = held_by;
  if (target <= compactor_.compacted()) return;
  Status st = etcd_->Compact(target);
  if (st.ok() || etcd::IsCompacted(st)) {
    spdlog::log(compactor_.compacted() == 0 ? spdlog::level::info : spdlog::level::debug,
                "cluster: compacted etcd's history to revision {} (kept {} s of it)", target,
                options_.etcd_history.count());
    compactor_.Done(now, target);
    compacted_revision_ = compactor_.compacted();
    return;
  }
  spdlog::warn("cluster: compacting etcd's history to revision {} failed: {}", target,
               st.ToString());
  compactor_.Done(now, 0);  // try again after the gap, not every second
}

ClusterStore::~ClusterStore() {
  Shutdown();
  local_->SetListener(nullptr);
}

void ClusterStore::Shutdown() {
  {
    std::lock_guard lock(house_mu_);
    if (stop_) return;
    stop_ = true;
  }
  house_cv_.notify_all();
  if (house_.joinable()) house_.join();
  // Fetches of released readers still use this store (each GET has a deadline).
  {
    std::unique_lock lock(fetch_mu_);
    fetch_cv_.wait(lock, [&] { return fetches_ == 0; });
  }
  // Placements in flight finish (their PUTs have deadlines) before the log that awaits them
  // stops; a publish after this places on its caller's thread.
  placing_->Stop();
  pushing_->Stop();
  if (repair_) repair_->Stop();
  if (log_) log_->Stop();
  if (membership_) membership_->Leave();
  if (server_) server_->Stop();
}

void ClusterStore::FetchPosted() {
  std::lock_guard lock(fetch_mu_);
  ++fetches_;
}

void ClusterStore::FetchDone() {
  std::lock_guard lock(fetch_mu_);
  if (--fetches_ == 0) fetch_cv_.notify_all();
}

uint16_t ClusterStore::port() const { return server_ ? server_->port() : 0; }

Status ClusterStore::LoadHoldings() {
  std::vector<ObjectRecord> records = local_->Records();
  std::lock_guard lock(mu_);
  for (const ObjectRecord& r : records) {
    if (r.parent == kRootId && r.name == kChunkDirName && r.type == ObjectType::kDirectory)
      chunk_dir_ = r.id;
  }
  if (chunk_dir_ == kInvalidId) {
    ObjectRecord dir;
    dir.id = local_->NewId();
    dir.parent = kRootId;
    dir.name = kChunkDirName;
    dir.type = ObjectType::kDirectory;
    dir.mode = 0700;
    MetaBatch b;
    b.puts.push_back(dir);
    KVFS_RETURN_IF_ERROR(local_->Apply(b));
    chunk_dir_ = dir.id;
  }
  for (const ObjectRecord& r : records) {
    if (r.parent != chunk_dir_ || r.type != ObjectType::kFile) continue;
    const uint64_t chunk = ParseChunkName(r.name);
    if (chunk == 0) continue;
    Holding h;
    h.local_id = r.id;
    h.local = r.layout;
    h.flags = r.flags;
    h.from_before_start = true;
    held_[chunk] = std::move(h);
    chunk_of_local_[r.id] = chunk;
  }
  spdlog::info("cluster: node {} holds {} chunks", options_.node_id, held_.size());
  return Status::Ok();
}

ObjectId ClusterStore::NewId() {
  return (static_cast<uint64_t>(options_.node_id) << kNodeShift) | (next_id_++ & kLocalMask);
}

std::vector<ObjectRecord> ClusterStore::Records() const {
  std::vector<ObjectRecord> out;
  Status st = const_cast<ClusterStore*>(this)->LoadRecords(
      [&](ObjectRecord&& rec) { out.push_back(std::move(rec)); }, [&] { out.clear(); });
  if (!st.ok()) spdlog::error("cluster: loading the namespace failed: {}", st.ToString());
  return out;
}

Status ClusterStore::LoadRecords(const std::function<void(ObjectRecord&&)>& fn,
                                 const std::function<void()>& start_over) {
  std::vector<std::pair<ObjectId, uint64_t>> listed_not_held;
  for (int attempt = 1;; ++attempt) {
    {
      std::lock_guard lock(mu_);
      chunk_of_record_.clear();
      for (auto& [chunk, h] : held_) h.record = kInvalidId;
    }
    listed_not_held.clear();
    Status st = log_->Load([&](ObjectRecord&& rec) {
      if (const ClusterLayout* cl = AsClusterLayout(rec.layout)) {
        std::lock_guard lock(mu_);
        auto it = held_.find(cl->chunk);
        const bool listed = cl->holders.Contains(options_.node_id);
        // A held copy its record does not list is surplus once the list has R holders (repair
        // copied it elsewhere while this node was away): left unnamed, dropped below. On a
        // shorter list it stays (as before): repair lists it again without a new copy, or
        // lists another node, whose record then drops it (NoteRecords).
        if (it != held_.end() && (listed || cl->holders.size() < options_.replicas)) {
          it->second.record = rec.id;
          it->second.revision = rec.revision;
          it->second.holders = cl->holders;
          chunk_of_record_[rec.id] = cl->chunk;
        } else if (it == held_.end() && listed) {
          listed_not_held.emplace_back(rec.id, cl->chunk);
        }
      }
      fn(std::move(rec));
    });
    if (st.ok()) break;
    if (attempt >= kLoadAttempts) return st;
    // What the failed read gave is of a revision the next read does not see: names removed
    // since would linger. Everything is read again.
    spdlog::warn("cluster: reading the namespace failed ({}); reading it again ({} of {})",
                 st.ToString(), attempt + 1, kLoadAttempts);
    start_over();
    std::this_thread::sleep_for(kLoadRetryPause);
  }
  loaded_ = true;
  // Copies held from before the start that no record names go (unlinked, replaced, or copied
  // elsewhere by repair while this node was away: before, such a copy was kept, and only
  // eviction ever freed it). A copy taken since this node registered stays: its record commits
  // after the revision read, and only the watch brings it (dropped here, the node stayed listed
  // as a holder of a copy it did not have); one that no record ever names goes after
  // kUnnamedFor (Repairer). Records that list this node for a chunk it lost (a crash with
  // durability=async) drop it from their holder list, so repair copies it from another holder.
  std::vector<uint64_t> orphans;
  {
    std::lock_guard lock(mu_);
    for (const auto& [chunk, h] : held_)
      if (h.record == kInvalidId && h.from_before_start) orphans.push_back(chunk);
  }
  for (uint64_t chunk : orphans) DropHolding(chunk, "no record needs this copy");
  for (const auto& [record, chunk] : listed_not_held) {
    // One that fails (etcd went away since the read) is tried again by the housekeeping.
    if (!LeaveHolderList(record, chunk, "not held here after a restart"))
      QueueLeave({chunk, record, LossKind::kNotHere});
  }
  if (!orphans.empty() || !listed_not_held.empty())
    spdlog::info("cluster: dropped {} copies no record needs, left {} holder lists", orphans.size(),
                 listed_not_held.size());
  return Status::Ok();
}

void ClusterStore::SetListener(StoreListener* listener) {
  listener_.store(listener);
  if (listener != nullptr) {
    log_->Start();  // idempotent: the watch starts after the load, so nothing falls between
    repair_->Start();
  }
}

void ClusterStore::NoteRecords(const std::vector<ObjectRecord>& puts,
                               const std::vector<ObjectId>& removes) {
  std::vector<std::pair<uint64_t, const char*>> drop;
  std::vector<LocalLoss> not_here;  // records naming this node for a copy it does not have
  std::vector<std::pair<LayoutRef, uint32_t>> repin;  // held layouts whose pin changed
  std::vector<uint64_t> repin_chunks;
  bool held_changed = false;  // a chunk this node holds: its record or holders
  {
    std::lock_guard lock(mu_);
    for (ObjectId id : removes) {
      auto it = chunk_of_record_.find(id);
      if (it != chunk_of_record_.end()) drop.emplace_back(it->second, "its record was removed");
    }
    for (const ObjectRecord& rec : puts) {
      const ClusterLayout* cl = AsClusterLayout(rec.layout);
      auto old = chunk_of_record_.find(rec.id);
      if (old != chunk_of_record_.end() && (!cl || cl->chunk != old->second))
        drop.emplace_back(old->second, "a new version replaced it");
      if (!cl) continue;
      auto it = held_.find(cl->chunk);
      if (it == held_.end()) {
        // A record is committed only once each holder it lists has its copy, so this one went
        // since or etcd was restored from a backup. Seen in a stress run: repair's PUT found
        // the copy a PUT abandoned by its writer had left here, then the writer's record (not
        // listing this node) dropped it, then repair's record listed it. Listed, this node
        // would count as a copy it is not.
        if (cl->holders.Contains(options_.node_id))
          not_here.push_back({cl->chunk, rec.id, LossKind::kNotHere});
        continue;
      }
      if (!cl->holders.Contains(options_.node_id)) {
        // Repair or a drain took this node off the list: its copy is surplus. (A copy that
        // repair PUT here a moment ago, whose record changed before repair listed it, goes
        // too; once listed, the not_here leave above sends repair round again.)
        drop.emplace_back(cl->chunk, "the holder list no longer names this node");
        continue;
      }
      held_changed = true;
      it->second.record = rec.id;
      it->second.revision = rec.revision;
      it->second.holders = cl->holders;
      chunk_of_record_[rec.id] = cl->chunk;
      const uint32_t pin = rec.flags & kFlagPinned;
      if ((it->second.flags & kFlagPinned) != pin) repin_chunks.push_back(cl->chunk);
    }
  }
  for (const auto& [chunk, why] : drop) DropHolding(chunk, why);
  for (const LocalLoss& loss : not_here) QueueLeave(loss);
  for (uint64_t chunk : repin_chunks) {
    LayoutRef l;
    uint32_t flags;
    {
      std::lock_guard lock(mu_);
      auto it = held_.find(chunk);
      if (it == held_.end()) continue;
      l = it->second.local;
      flags = it->second.flags ^ kFlagPinned;
    }
    (void)Hold(chunk, l, flags);  // the engine's eviction must see the pin
  }
  // Repair looks only at held chunks: another node's change of anything else needs no pass
  // (each was a pass a second on every node of a busy cluster, over all it holds).
  if (repair_ && (held_changed || !drop.empty())) repair_->Poke();
}

void ClusterStore::OnRemote(std::vector<ObjectRecord>&& puts, std::vector<ObjectId>&& removes) {
  // The fs switches to the new versions first; then copies of the versions they replaced go.
  if (StoreListener* l = listener_.load()) l->OnRemoteChanges(puts, removes);
  NoteRecords(puts, removes);
}

void ClusterStore::OnResync(const std::vector<ObjectId>& present, int64_t revision) {
  std::vector<ObjectId> gone;
  {
    std::lock_guard lock(mu_);
    for (const auto& [record, chunk] : chunk_of_record_)
      if (!std::binary_search(present.begin(), present.end(), record)) gone.push_back(record);
  }
  NoteRecords({}, gone);
  if (StoreListener* l = listener_.load())
    l->OnRemoteResync(present, static_cast<uint64_t>(revision));
}

void ClusterStore::OnReset(ObjectId id, const ObjectRecord* rec, ResetOrigin origin) {
  // A read older than the version of the record this node holds a copy of (its own commit
  // since): the copy stays. Dropping it as "replaced" would drop the current version's data.
  bool stale = false;
  {
    std::lock_guard lock(mu_);
    if (auto it = chunk_of_record_.find(id); it != chunk_of_record_.end()) {
      auto held = held_.find(it->second);
      stale = held != held_.end() && held->second.revision > (rec ? rec->revision : origin.as_of);
    }
  }
  if (!stale && rec) NoteRecords({*rec}, {});
  if (!stale && !rec) NoteRecords({}, {id});
  if (StoreListener* l = listener_.load()) l->OnRolledBack(id, rec, origin);
}

void ClusterStore::MembershipChanged() {
  const bool reachable = membership_ && membership_->etcd_reachable();
  bool repair_view_changed = false;
  std::vector<NodeId> arrived;  // live now, and not (or at another address) before
  if (membership_) {
    std::lock_guard lock(seen_mu_);
    RepairView view{reachable, {}};
    std::map<NodeId, std::string> live;
    for (const MemberInfo& m : membership_->Members()) {
      view.members.emplace_back(m.id, m.draining, m.drained);
      if (m.drained) {
        seen_.erase(m.id);
      } else {
        seen_[m.id] = m.address;
      }
      auto before = live_.find(m.id);
      if (m.id != options_.node_id && (before == live_.end() || before->second != m.address))
        arrived.push_back(m.id);
      live.emplace(m.id, m.address);
    }
    live_ = std::move(live);
    std::sort(view.members.begin(), view.members.end());
    repair_view_changed = view != repair_view_;
    repair_view_ = std::move(view);
  }
  // Each node that joins (or comes back) is pinged once by the housekeeping (CheckPeers):
  // one this node cannot reach is named in kvfsctl nodes at once, not after a request to it
  // failed (a node no publish had placed on yet was not named at all).
  if (!arrived.empty()) {
    std::lock_guard lock(peers_mu_);
    for (NodeId n : arrived) peers_[n].recheck = true;
  }
  // Only what repair looks at: every node's usage changes every few seconds while it writes,
  // and each such change was a pass on every node.
  if (repair_ && repair_view_changed) repair_->Poke();
  // etcd answered again after an outage: the watch may have stalled on a dead stream.
  if (reachable && !was_reachable_.exchange(reachable) && log_) log_->RestartWatch();
  was_reachable_ = reachable;
}

Status ClusterStore::Sync() { return local_->Sync(); }

StoreStats ClusterStore::Stats() const {
  StoreStats s = local_->Stats();
  // Counts of names are the fs's business (it holds the namespace); these are the engine's.
  return s;
}

void ClusterStore::CheckRepairs() { repair_->RunOnce(); }

}  // namespace kvfs::cluster
