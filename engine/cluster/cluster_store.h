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
// under a hidden directory. The namespace itself is in memory and rebuilt from peers on restart
// (a node alone in the cluster loses its namespace across a restart; its chunks survive).
//
// Also the RequestHandler peers talk to (GET/PUT of chunks by key, namespace push and pull).
#pragma once

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <string>
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
  Status Sync() override { return local_->Sync(); }

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
  };

  ClusterStore(ChunkStore* local, ClusterOptions options)
      : local_(local), options_(std::move(options)) {}
  Status LoadHeldChunks();
  // Keeps `layout` in the local store as the chunk `key`. Caller holds mu_.
  Status StoreChunkLocked(const std::string& key, LayoutRef layout);
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
  wire::NamespaceRecord ToWire(const Entry& e) const;
  Entry FromWire(const wire::NamespaceRecord& r) const;  // caller holds mu_
  uint64_t Now() const;

  ChunkStore* const local_;
  const ClusterOptions options_;
  std::unique_ptr<PeerServer> server_;
  std::unique_ptr<Membership> membership_;
  std::atomic<ClusterListener*> listener_{nullptr};

  mutable std::mutex mu_;
  std::map<ObjectId, Entry> ns_;
  std::map<ObjectId, Tombstone> tombstones_;
  std::map<std::string, HeldChunk> chunks_;
  ObjectId chunk_dir_ = kInvalidId;
  uint64_t last_stamp_ = 0;  // keeps this node's stamps strictly increasing

  std::atomic<uint64_t> puts_sent_{0}, puts_received_{0}, gets_sent_{0}, gets_served_{0},
      pushes_sent_{0}, pushes_received_{0};
};

}  // namespace kvfs::cluster
