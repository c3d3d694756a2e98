// Membership on etcd leases (docs/cluster.md, "Membership"). A node registers its id, address,
// capacity and state under a lease it renews every TTL/3; a node whose lease expires is down and
// its key vanishes. Every node watches the member keys (and the operators' drain marks), so
// nodes join and leave without config edits or restarts.
//
// Registration refuses a node id that a live node with another address holds (EEXIST); the
// same address means a previous run of this node that died, whose key is taken over.
//
// The renewal loop is also how a node knows whether it can reach etcd: while renewals fail it
// reports etcd unreachable (the cluster store then refuses namespace changes), and when etcd
// answers again after the lease expired it registers anew. When the watch sees this node's own
// key gone while the node runs (an etcd wiped and restarted, a key deleted by hand), the loop
// puts it back at once: until then no other node reads from this one.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "cluster_layout.h"
#include "kvfs/etcd.h"
#include "kvfs/status.h"
#include "kvfs/transport.h"
#include "namespace_keys.h"

namespace kvfs::cluster {

struct MemberInfo {
  NodeId id = 0;
  std::string address;  // HOST:PORT of its peer server, as registered
  PeerAddress peer;     // the same, parsed (a registration that does not parse is no member)
  uint64_t capacity_bytes = 0, used_bytes = 0;
  uint32_t replicas = 0;  // its --replicas (0: not published, a node of an older kvfs)
  bool draining = false;  // an operator's drain mark (x/ key)
  bool drained = false;   // the node says every chunk it holds has R copies elsewhere
};

struct MembershipOptions {
  NodeId self = 0;
  std::string address;
  std::chrono::seconds ttl{5};
  uint32_t replicas = 0;  // published, so that nodes started with another R are seen
  // Capacity and usage to publish (called every few seconds from the renewal thread).
  std::function<std::pair<uint64_t, uint64_t>()> usage;
};

class Membership {
 public:
  // Registers and starts renewing and watching. `on_change` is called (from the watch thread,
  // no lock held) whenever the member set or a drain mark changes.
  static Result<std::unique_ptr<Membership>> Start(etcd::Client* etcd, const NamespaceKeys* keys,
                                                   MembershipOptions options,
                                                   std::function<void()> on_change);
  ~Membership();
  // Stops the threads and revokes the lease, so the others see this node leave at once.
  void Leave();

  std::vector<MemberInfo> Members() const;  // live members (this node included), by id
  std::optional<MemberInfo> Find(NodeId id) const;
  // etcd's member key of `id`, read now: a node that registered a moment ago, before the member
  // watch delivered it (a chunk it published is read here right away). Asked at most once a
  // second per id, and not while etcd is unreachable (a read must not wait on etcd).
  std::optional<MemberInfo> FetchMember(NodeId id);
  bool IsLive(NodeId id) const;
  bool IsDraining(NodeId id) const;
  // Live, not draining: where new copies may go.
  std::vector<NodeId> PlacementTargets() const;
  bool etcd_reachable() const { return reachable_.load(); }
  // The lease this node is registered under (0: none at the moment).
  int64_t lease() const { return lease_.load(); }
  // A namespace change found etcd unreachable: refuse changes from now on (one log line, not
  // one per change) and have the renewal loop find out at once, then every half second, when
  // etcd is back, instead of at its next keepalive.
  void NoteUnreachable(const Status& why);
  void SetDrained(bool drained);

 private:
  Membership(etcd::Client* etcd, const NamespaceKeys* keys, MembershipOptions options,
             std::function<void()> on_change)
      : etcd_(etcd), keys_(keys), options_(std::move(options)), on_change_(std::move(on_change)) {}
  Status Register();
  std::string SelfValue() const;
  void RenewLoop();
  void WatchLoop();
  Status Reload(int64_t* revision);  // re-reads every member and drain key
  void ApplyEvent(const etcd::Event& ev);
  void RenewIfSelfMissing();                // from the watch thread
  void MarkUnreachable(const Status& why);  // logs and tells on_change_ once per outage
  // Logs (once per node and value) a member that joins or re-registers keeping another number
  // of replicas than this node: what each node publishes keeps its own node's R, so the
  // operator must hear of it. (At this node's own start, kvfs notes the members it finds.)
  void WarnIfReplicasDiffer(const MemberInfo& m);  // mu_ held

  etcd::Client* const etcd_;
  const NamespaceKeys* const keys_;
  const MembershipOptions options_;
  const std::function<void()> on_change_;

  std::atomic<int64_t> lease_{0};
  std::atomic<bool> reachable_{true};
  std::atomic<bool> drained_{false};
  std::atomic<bool> stop_{false};
  // Set by the watch when this node's own key is missing (etcd wiped, or the key deleted by
  // hand): the renewal loop puts it back at once instead of at its next keepalive.
  std::atomic<bool> renew_now_{false};
  std::atomic<bool> check_now_{false};  // NoteUnreachable: ask etcd now
  std::mutex wake_mu_;
  std::condition_variable wake_cv_;
  std::thread renew_, watch_;

  mutable std::mutex mu_;
  std::map<NodeId, MemberInfo> members_;                             // from m/ keys
  std::map<NodeId, std::chrono::steady_clock::time_point> fetched_;  // FindOrFetch's last read
  std::map<NodeId, bool> drains_;                                    // from x/ keys
  std::map<NodeId, uint32_t> replicas_warned_;  // WarnIfReplicasDiffer's last warning per node
};

}  // namespace kvfs::cluster
