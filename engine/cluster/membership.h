// Membership: the static list of cluster nodes and which of them answer. A background thread
// PINGs every peer each interval with a deadline; a peer that misses `misses_to_down` pings in a
// row is down (it leaves the placement ranking for new writes), and the first answered ping
// brings it back up. Peers start up, so a freshly started cluster places data at once and a dead
// peer is found within misses_to_down intervals.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "kvfs/transport.h"
#include "rendezvous_placement.h"

namespace kvfs::cluster {

struct NodeInfo {
  NodeId id = 0;
  PeerAddress address;
};

struct MembershipOptions {
  std::chrono::milliseconds ping_interval{1000};
  std::chrono::milliseconds ping_timeout{1000};
  int misses_to_down = 3;
  ClientOptions client;  // secret, timeouts, connections for every PeerClient
};

class Membership {
 public:
  // `nodes` may include `self` (it is skipped: the local node is always up). Node ids must be
  // unique and non-zero. Starts no thread; call Start().
  static Result<std::unique_ptr<Membership>> Create(NodeId self, const std::vector<NodeInfo>& nodes,
                                                    MembershipOptions options);
  ~Membership();

  void Start();
  void Stop();  // idempotent; joins the pinger
  // One round of pings (what the thread does each interval), for tests and for Start.
  void PingOnce();
  // Called (from the pinger thread) when a peer goes from down to up. Set before Start().
  void SetOnUp(std::function<void(NodeId)> fn) { on_up_ = std::move(fn); }

  NodeId self() const { return self_; }
  std::vector<NodeId> AllNodes() const;   // self included, ascending
  std::vector<NodeId> LiveNodes() const;  // self included, ascending
  bool IsUp(NodeId id) const;
  PeerClient* Client(NodeId id) const;  // null for self and unknown ids

 private:
  struct Peer {
    std::unique_ptr<PeerClient> client;
    std::atomic<bool> up{true};
    int misses = 0;  // pinger thread only
  };
  Membership(NodeId self, MembershipOptions options) : self_(self), options_(std::move(options)) {}
  void Run();

  const NodeId self_;
  const MembershipOptions options_;
  std::map<NodeId, std::unique_ptr<Peer>> peers_;  // fixed after Create
  std::function<void(NodeId)> on_up_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace kvfs::cluster
