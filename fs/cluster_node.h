// ClusterNode: the daemon as a member of a kvfs cluster (docs/cluster.md). Wraps the local
// engine in a ClusterStore, serves peers, joins them, carries peer changes into the Namespace
// (and so to the kernel), and answers .kvfs/nodes and user.kvfs.location.
//
// Start order in kvfs_main: Start (open, listen, join: pulls the peers' namespaces) ->
// BeginLoad -> Namespace::Load over store() -> Attach(ns). Peer changes that arrive while the
// namespace loads are queued and replayed by Attach (applying one twice is harmless), so none
// falls between the store's Records() and the first live change.
#pragma once

#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cluster_listener.h"
#include "cluster_store.h"
#include "kvfs/status.h"
#include "mount_options.h"
#include "namespace.h"

namespace kvfs::fs {

class ClusterNode : public cluster::ClusterListener {
 public:
  // `local` (the LocalEngine) must outlive the node. The namespace snapshot lives in data_dir.
  static Result<std::unique_ptr<ClusterNode>> Start(const MountOptions& options, ChunkStore* local);
  ~ClusterNode() override;

  cluster::ClusterStore* store() { return store_.get(); }
  void BeginLoad();
  void Attach(Namespace* ns);
  // Stops delivering changes to the namespace, stops serving and pinging, writes the final
  // namespace snapshot. Idempotent.
  void Shutdown();

  // .kvfs/nodes and user.kvfs.location (formats in docs/cluster.md; kvfsctl reads them).
  nlohmann::json NodesJson();
  Result<nlohmann::json> LocationJson(uint64_t ino, Namespace* ns);

  // cluster::ClusterListener: called from transport workers.
  void OnPut(const ObjectRecord& record) override;
  void OnRemove(ObjectId id) override;
  void OnLayoutReplaced(ObjectId id, const LayoutRef& from, const LayoutRef& to) override;

 private:
  enum class Phase { kJoining, kLoading, kLive, kStopped };
  struct Pending {
    bool remove = false;
    ObjectRecord record;       // puts
    ObjectId id = kInvalidId;  // removes
  };
  ClusterNode() = default;
  std::string AddressOf(uint16_t id) const;
  std::string StateOf(uint16_t id);

  std::unique_ptr<cluster::ClusterStore> store_;
  std::string listen_;
  std::vector<PeerSpec> peers_;

  std::mutex mu_;  // phase_, ns_, pending_
  Phase phase_ = Phase::kJoining;
  Namespace* ns_ = nullptr;
  std::vector<Pending> pending_;
};

// The same two views for a single-node mount (node id 0, no peers).
nlohmann::json SingleNodeNodesJson(const StoreStats& stats);
nlohmann::json SingleNodeLocationJson();

}  // namespace kvfs::fs
