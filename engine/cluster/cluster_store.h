// ClusterStore: a ChunkStore over many nodes (docs/cluster.md). Every node holds the whole
// namespace in memory, so lookups stay local; each file's chunk lives on the writer's node and
// on the first R live nodes of the rendezvous ranking of its chunk key.
//
//   publish (Apply put with a fresh layout): keep the chunk locally, PUT it to the ranked
//     replicas, then push the namespace record (with chunk key and replica list) to every live
//     peer. Renames, attribute changes and unlinks are namespace pushes only: the chunk key is
//     fixed at publish, so data never moves.
//   read: the local copy if held, else each replica in turn with a per-request deadline; a dead
//     peer costs one timeout; when all fail, EIO.
//   peer changes: applied last-writer-wins by (stamp, origin node) and reported to the
//     ClusterListener.
//   (re)join: pulls every reachable peer's namespace and merges it the same way, again whenever
//     a peer comes back up.
//
// The local ChunkStore keeps only chunk bytes: one file record per held chunk, named by its key,
// under a hidden directory. The namespace is in memory; with a state_dir it is also written to a
// snapshot file there (when changed, at most every ~200 ms, and at Shutdown) and loaded by Open,
// so a node that restarts alone keeps its names; peers' newer changes then merge in by stamp.
//
// The local store's own removals (eviction, a corrupt chunk) drop only this node's copy: the
// name stays while another node is listed as holding the chunk (reads go there); when this node
// was the only holder, the name is removed cluster-wide like an unlink (local_removal.cc).
//
// Also the RequestHandler peers talk to (GET/PUT of chunks by key, namespace push and pull).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "cluster_layout.h"
#include "cluster_listener.h"
#include "kvfs/chunk_store.h"
#include "kvfs/transport.h"
#include "membership.h"

namespace kvfs::cluster {

struct ClusterOptions {
  NodeId self = 0;      // non-zero, unique in the cluster
  size_t replicas = 2;  // R: remote copies placed by ranking (the writer keeps its own besides)
  SharedSecret secret;
  std::chrono::milliseconds request_timeout{2000};  // each GET/PUT/push to one peer
  std::chrono::milliseconds ping_interval{1000};
  std::chrono::milliseconds ping_timeout{1000};
  int misses_to_down = 3;
  TransportKind transport = TransportKind::kTcp;  // kAuto: RDMA when the host has a device
  // The writer keeps its copy besides the R ranked ones. When false, the writer's copy is
  // dropped once at least one PUT succeeded (unless the writer ranks among the R itself).
  bool keep_local_copy = true;
  // Where the namespace snapshot lives (the local engine's data dir); empty: not persisted.
  std::string state_dir;
  std::chrono::milliseconds snapshot_interval{200};
};

// What kvfsctl where / user.kvfs.location shows about one file.
struct ChunkLocation {
  std::string chunk_key;         // "" for files without data, directories, symlinks
  std::vector<NodeId> replicas;  // as recorded in the namespace, ranking order
  bool local = false;            // this node's store holds a copy now
};

// Traffic between this node and one peer, as this node saw it.
struct PeerTraffic {
  uint64_t gets_sent = 0, puts_sent = 0, pushes_sent = 0, pushes_received = 0;
};

// Counters for tests and kvfsctl.
struct ClusterCounters {
  uint64_t puts_sent = 0, puts_received = 0;
  uint64_t gets_sent = 0, gets_served = 0;
  uint64_t pushes_sent = 0, pushes_received = 0;
};

class ClusterStore : public ChunkStore, public RequestHandler {
 public:
  // `local` must outlive the store. Finds the chunks `local` already holds.
  static Result<std::unique_ptr<ClusterStore>> Open(ChunkStore* local, ClusterOptions options);
  ~ClusterStore() override;

  // Serves peers on host:port (port 0 = ephemeral); returns the bound port.
  Result<uint16_t> Listen(const std::string& host, uint16_t port);
  // Starts membership over `nodes` (self may be included) and pulls the namespace from every
  // peer that answers.
  Status Join(const std::vector<NodeInfo>& nodes);
  // Stops serving and pinging. Idempotent; the destructor calls it.
  void Shutdown();

  void SetClusterListener(ClusterListener* listener) { listener_.store(listener); }
  ClusterCounters counters() const;
  PeerTraffic traffic(NodeId peer) const;
  const ClusterOptions& options() const { return options_; }
  // The transport peers are reached with ("tcp" or "rdma"; auto resolved).
  std::string transport_name() const;
  // Chunk key, replica list and local copy of the record `id`; ENOENT when no such record.
  Result<ChunkLocation> Location(ObjectId id) const;
  // Writes the namespace snapshot now when it changed since the last one (no-op without a
  // state_dir). Shutdown calls it; a background thread calls it every snapshot_interval.
  Status SaveSnapshot();
  Membership* membership() { return membership_.get(); }
  NodeId self() const { return options_.self; }
  // Whether this node's local store holds the chunk (tests, kvfsctl where).
  bool HoldsChunk(const std::string& key) const;

  // ChunkStore
  std::vector<ObjectRecord> Records() const override;
  ObjectId NewId() override;
  Status Apply(const MetaBatch& batch) override;
  Result<std::unique_ptr<ChunkWriter>> NewWriter(LayoutRef base) override;
  Result<size_t> Read(const LayoutRef& layout, uint64_t offset, void* out, size_t len) override;
  StoreStats Stats() const override;
  Status Sync() override;
  // Forwarded to the local store for the chunk the record names (namespace ids are not the
  // local store's ids). Evict drops this node's copy (see the top of this file); EINVAL when
  // this node holds none. Verify checks the local copy, or reads every byte from a replica.
  void Touch(ObjectId id, uint64_t stream) override;
  Status Evict(ObjectId id) override;
  Status Verify(const LayoutRef& layout) override;
  // The fs's StoreListener: told (with namespace ids) about names the cluster store removed
  // because the only copy was evicted or corrupt here.
  void SetListener(StoreListener* listener) override;

  // RequestHandler
  Result<wire::LookupReply> Lookup(const wire::LookupRequest& req) override;
  Result<wire::ListReply> List(const wire::ListRequest& req) override;
  Result<wire::GetReply> Get(const wire::GetRequest& req, std::span<uint8_t> out) override;
  Result<wire::PutReply> Put(const wire::PutRequest& req, std::span<const uint8_t> data) override;
  Status Remove(const wire::RemoveRequest& req) override;
  Status Rename(const wire::RenameRequest& req) override;
  Result<StoreStats> Stats() override { return static_cast<const ClusterStore*>(this)->Stats(); }
  Status ApplyNamespace(const wire::NamespaceUpdate& update) override;
  Result<wire::NamespaceUpdate> PullNamespace(const wire::NamespacePullRequest& req) override;

 private:
  struct Entry {
    ObjectRecord rec;  // layout is a ClusterLayout (files with data) or null
    uint64_t stamp = 0;
    NodeId origin = 0;
  };
  struct Tombstone {
    uint64_t stamp = 0;
    NodeId origin = 0;
  };
  struct HeldChunk {
    ObjectId local_id = kInvalidId;
    LayoutRef layout;
    uint32_t flags = 0;  // the record's flags mirrored (pin)
  };

  struct LocalRemoval {
    ObjectId local_id;
    bool corrupt;
  };
  // Hears the local store's own removals and queues them (the store may call from inside an
  // Apply this ClusterStore makes under mu_, so nothing is done in the callback itself).
  class LocalEvents : public StoreListener {
   public:
    explicit LocalEvents(ClusterStore* cs) : cs_(cs) {}
    void OnDropped(ObjectId id) override { cs_->QueueLocalRemoval(id, true); }
    void OnEvicted(ObjectId id) override { cs_->QueueLocalRemoval(id, false); }

   private:
    ClusterStore* cs_;
  };

  ClusterStore(ChunkStore* local, ClusterOptions options)
      : local_(local), options_(std::move(options)), local_events_(this) {}
  Status LoadHeldChunks();
  // Keeps `layout` in the local store as the chunk `key`. Caller holds mu_.
  Status StoreChunkLocked(const std::string& key, LayoutRef layout, uint32_t flags = 0);
  // Mirrors the record's pin flag onto the held chunk, so the local store's eviction honours
  // it. Caller holds mu_.
  void SyncChunkFlagsLocked(const Entry& e);
  // ns_ changes go through these two so the chunk key -> id index stays right. mu_ held.
  void SetEntryLocked(ObjectId id, Entry e);
  void EraseEntryLocked(std::map<ObjectId, Entry>::iterator it);
  // Local removals (local_removal.cc).
  void QueueLocalRemoval(ObjectId local_id, bool corrupt);
  void DrainLocalRemovals();
  // Snapshot (namespace_snapshot.cc).
  Status LoadSnapshot();
  void Housekeeping();
  // Drops the local copy of `key`, if any (open readers keep their LayoutRef). Caller holds mu_.
  void DropChunkLocked(const std::string& key);
  LayoutRef HeldLocked(const std::string& key) const;
  // Turns a fresh local layout into a replicated ClusterLayout.
  Result<LayoutRef> Publish(ObjectId id, const LayoutRef& fresh);
  Result<size_t> ReadRemote(const ClusterLayout& layout, uint64_t offset, uint8_t* out, size_t len);
  void Broadcast(const wire::NamespaceUpdate& update);
  // Applies peer changes last-writer-wins and tells the listener (pushes and pulls alike).
  Status Merge(const wire::NamespaceUpdate& update);
  void PullFrom(NodeId peer);
  struct TrafficCounters {
    std::atomic<uint64_t> gets_sent{0}, puts_sent{0}, pushes_sent{0}, pushes_received{0};
  };
  TrafficCounters* TrafficFor(NodeId peer) const;  // null for self and unknown ids
  wire::NamespaceRecord ToWire(const Entry& e) const;
  Entry FromWire(const wire::NamespaceRecord& r) const;  // caller holds mu_
  uint64_t Now() const;

  ChunkStore* const local_;
  const ClusterOptions options_;
  std::unique_ptr<PeerServer> server_;
  std::unique_ptr<Membership> membership_;
  std::atomic<ClusterListener*> listener_{nullptr};
  std::atomic<StoreListener*> store_listener_{nullptr};
  LocalEvents local_events_;

  mutable std::mutex mu_;
  std::map<ObjectId, Entry> ns_;
  std::map<ObjectId, Tombstone> tombstones_;
  std::map<std::string, HeldChunk> chunks_;
  std::unordered_map<ObjectId, std::string> key_of_local_;  // local id -> held chunk key
  std::unordered_map<std::string, ObjectId> named_by_;      // chunk key -> record naming it
  ObjectId chunk_dir_ = kInvalidId;
  uint64_t last_stamp_ = 0;  // keeps this node's stamps strictly increasing
  uint64_t ns_version_ = 0;  // bumped by every namespace change (snapshot when it moved)

  std::mutex removals_mu_;
  std::vector<LocalRemoval> removals_;

  std::mutex snapshot_mu_;  // one snapshot write at a time
  uint64_t saved_version_ = 0;
  std::mutex house_mu_;
  std::condition_variable house_cv_;
  bool house_stop_ = false;
  std::thread house_;

  // Per-peer traffic counters; the map is filled at Join and fixed afterwards.
  std::map<NodeId, std::unique_ptr<TrafficCounters>> traffic_;

  std::atomic<uint64_t> puts_sent_{0}, puts_received_{0}, gets_sent_{0}, gets_served_{0},
      pushes_sent_{0}, pushes_received_{0};
};

}  // namespace kvfs::cluster
