// ClusterStore's peers: a client for each member, its counters, and which peers answer. A peer
// that let a request time out is suspect: reads skip it and placement leaves it out until a
// ping finds it again (ProbeSuspects from the housekeeping, Probe from a read that has no one
// else to ask).
#include <spdlog/spdlog.h>

#include <algorithm>
#include <span>

#include "cluster_store.h"
#include "rendezvous_placement.h"
#include "task_pool.h"

namespace kvfs::cluster {
namespace {

constexpr auto kSuspectFor = std::chrono::seconds(10);
// How long a read whose holders are all suspect waits for their pings: a holder that resumed
// answers within a round trip; one still frozen costs each such read this, not a timeout.
constexpr auto kProbeWait = std::chrono::milliseconds(100);
// A live peer that no ping has found for this long is pinged (CheckPeers): one that froze or
// was cut off while no request went to it was found only by the next request, which waited a
// timeout on it (a publish placing there), and kvfsctl nodes did not name it meanwhile.
constexpr auto kIdleCheck = std::chrono::seconds(5);

}  // namespace

ClientOptions ClusterStore::PeerClientOptions(NodeId node) const {
  ClientOptions co;
  co.kind = options_.transport;
  co.secret = options_.secret;
  co.node_name = NodeName(options_.node_id);
  // The node it means to reach: two nodes advertising one address (or a registration that
  // outlived its node, its address now another's) must not pass one for the other.
  co.expect_node = NodeName(node);
  co.connect_timeout = options_.request_timeout;
  co.request_timeout = options_.request_timeout;
  return co;
}

Status ClusterStore::CheckAdvertised(const std::string& address) {
  KVFS_ASSIGN_OR_RETURN(PeerAddress peer, ParsePeerAddress(address));
  ClientOptions co = PeerClientOptions(options_.node_id);
  co.connect_timeout =
      std::min<std::chrono::milliseconds>(options_.request_timeout, std::chrono::seconds(2));
  co.request_timeout = co.connect_timeout;
  CallOptions call;
  call.timeout = co.request_timeout;
  auto client = MakePeerClient(peer, co);
  const Status st = client.ok() ? (*client)->Ping(call) : client.status();
  if (st.ok()) return st;
  if (st.err() == ENXIO || st.err() == EACCES || st.err() == EPROTO) {
    const std::string what = st.err() == EPROTO
                                 ? "something that is not a kvfs node of this version"
                                 : "another kvfs node";
    return Status::Error(st.err(), "the address this node would register, " + address +
                                       ", reaches " + what + " (" + st.message() +
                                       "): give --advertise the address peers reach this "
                                       "node at");
  }
  spdlog::warn(
      "cluster: node {} does not reach itself at the address it registers, {} ({}); peers "
      "that cannot reach it either will place nothing there (check --listen and --advertise)",
      options_.node_id, address, st.ToString());
  return Status::Ok();
}

PeerClient* ClusterStore::Client(NodeId node) {
  if (node == options_.node_id) return nullptr;
  std::optional<MemberInfo> m = membership_->Find(node);
  if (!m) {
    bool known;
    {
      std::lock_guard lock(peers_mu_);
      auto it = peers_.find(node);
      known = it != peers_.end() && it->second.client;
    }
    // Never seen: a node that joined a moment ago, which the member watch has not delivered.
    // (A known node that is down keeps its client: it is asked last, at no etcd cost.)
    if (!known) m = membership_->FetchMember(node);
  }
  std::lock_guard lock(peers_mu_);
  Peer& p = peers_[node];
  if (!p.counters) p.counters = std::make_unique<PeerCounters>();
  if (m && (m->address != p.address || !p.client)) {
    ClientOptions co = PeerClientOptions(node);
    // Two pieces of a long GET in flight: one's device read and check overlap the other's
    // transfer (remotebench, one reader: 8 and 32 MiB 0.85-0.87x iperf3, against 0.62-0.85x
    // with one; see docs/transport.md).
    co.get_parallel_pieces = 2;
    auto client = MakePeerClient(m->peer, co);
    if (!client.ok()) {
      spdlog::warn("cluster: no client for node {} at {}: {}", node, m->address,
                   client.status().ToString());
      return nullptr;
    }
    p.address = m->address;
    p.client = std::move(*client);
  }
  return p.client.get();
}

PeerCounters* ClusterStore::CountersFor(NodeId node) {
  std::lock_guard lock(peers_mu_);
  Peer& p = peers_[node];
  if (!p.counters) p.counters = std::make_unique<PeerCounters>();
  return p.counters.get();
}

bool ClusterStore::IsSuspect(NodeId node) const {
  const auto now = std::chrono::steady_clock::now();
  std::lock_guard lock(peers_mu_);
  auto it = peers_.find(node);
  return it != peers_.end() && it->second.suspect_until > now;
}

bool ClusterStore::Placeable(NodeId node) const {
  const auto now = std::chrono::steady_clock::now();
  std::lock_guard lock(peers_mu_);
  auto it = peers_.find(node);
  return it == peers_.end() || (it->second.suspect_until <= now && it->second.unreachable.empty());
}

std::vector<NodeId> ClusterStore::CopyOrder(uint64_t chunk, std::span<const NodeId> targets) const {
  std::vector<NodeId> ranked = RendezvousPlacement::RankChunk(chunk, targets);
  std::erase_if(ranked, [this](NodeId n) { return !Placeable(n); });
  return ranked;
}

std::vector<NodeId> ClusterStore::ReadOrder(const HolderList& holders, bool demanded) {
  std::vector<NodeId> good, down, suspect;
  for (NodeId n : holders) {
    if (n == options_.node_id) continue;
    // A node that timed out a moment ago is not asked until a ping finds it again (see
    // ProbeSuspects). A node whose lease is gone is asked last (a refused connection costs
    // nothing).
    if (IsSuspect(n)) {
      suspect.push_back(n);
    } else if (!membership_->IsLive(n)) {
      down.push_back(n);
    } else {
      good.push_back(n);
    }
  }
  good.insert(good.end(), down.begin(), down.end());
  if (!good.empty() || suspect.empty() || !demanded) return good;
  const auto asked = std::chrono::steady_clock::now();
  Probe(suspect, /*ahead_of_a_read=*/true);
  {
    std::unique_lock lock(peers_mu_);
    // Answered a ping since this read asked, or no longer suspect (a ping of the housekeeping
    // ended it; then its answer may predate `asked`).
    auto answers = [&](NodeId n) {
      const Peer& p = peers_[n];
      return p.answered_at >= asked || p.suspect_until <= asked;
    };
    probe_cv_.wait_for(lock, kProbeWait, [&] {
      return std::any_of(suspect.begin(), suspect.end(), answers) ||
             std::none_of(suspect.begin(), suspect.end(),
                          [&](NodeId n) { return peers_[n].probing; });
    });
    std::erase_if(suspect, [&](NodeId n) { return !answers(n); });
  }
  return suspect;
}

void ClusterStore::NoteFailure(NodeId node, const Status& st) {
  std::lock_guard lock(peers_mu_);
  Peer& p = peers_[node];
  if (!p.counters) p.counters = std::make_unique<PeerCounters>();
  ++p.counters->failures;
  p.recheck = true;
  // A peer that let a request time out is skipped for a while (see ReadOrder).
  if (st.err() == ETIMEDOUT || st.err() == EHOSTUNREACH || st.err() == ENETUNREACH)
    p.suspect_until = std::chrono::steady_clock::now() + kSuspectFor;
}

void ClusterStore::ProbeSuspects() {
  std::vector<NodeId> suspect;
  {
    const auto now = std::chrono::steady_clock::now();
    std::lock_guard lock(peers_mu_);
    for (const auto& [node, p] : peers_) {
      if (p.suspect_until > now) suspect.push_back(node);
    }
  }
  Probe(suspect, /*ahead_of_a_read=*/false);
}

std::string ClusterStore::Unreachable(NodeId node) const {
  std::lock_guard lock(peers_mu_);
  auto it = peers_.find(node);
  return it == peers_.end() ? std::string() : it->second.unreachable;
}

void ClusterStore::NoteProbed(Peer& p, const Status& st) {
  p.probing = false;
  if (st.ok()) {
    p.answered_at = std::chrono::steady_clock::now();
    p.recheck = false;
    p.unreachable.clear();
  } else {
    p.unreachable = st.ToString();
  }
}

Status ClusterStore::Ping(PeerClient* client) const {
  if (client == nullptr) {
    return Status::Error(EHOSTUNREACH, "not a member, or no client for its registered address");
  }
  CallOptions call;
  call.timeout = options_.request_timeout;
  return client->Ping(call);
}

void ClusterStore::CheckPeers() {
  std::vector<NodeId> due;
  {
    const auto now = std::chrono::steady_clock::now();
    std::lock_guard lock(peers_mu_);
    for (const auto& [node, p] : peers_) {
      // Suspects are ProbeSuspects' (a frozen node's ping holds a pool thread a timeout).
      if (node == options_.node_id || p.probing || p.suspect_until > now) continue;
      if (p.recheck || now - p.answered_at >= kIdleCheck) due.push_back(node);
    }
  }
  // A node whose lease is gone is down already; its client stays for the reads that ask it
  // last, but nothing needs to know whether it answers.
  std::erase_if(due, [&](NodeId n) { return !membership_->IsLive(n); });
  {
    std::lock_guard lock(peers_mu_);
    for (NodeId node : due) peers_[node].probing = true;
  }
  for (NodeId node : due) {
    pushing_->Post([this, node] {
      PeerClient* client = Client(node);
      const Status st = Ping(client);
      if (!st.ok()) NoteFailure(node, st);  // a timeout makes it suspect (ProbeSuspects')
      bool was_unreachable;
      {
        std::lock_guard lock(peers_mu_);
        Peer& p = peers_[node];
        was_unreachable = !p.unreachable.empty();
        NoteProbed(p, st);
      }
      probe_cv_.notify_all();
      // Not for the first ping of a node that joined, nor after a request that failed once.
      if (st.ok() && was_unreachable)
        spdlog::info("cluster: node {} answers this node again", node);
    });
  }
}

void ClusterStore::Probe(const std::vector<NodeId>& nodes, bool ahead_of_a_read) {
  const auto now = std::chrono::steady_clock::now();
  std::vector<std::pair<NodeId, bool>> due;  // node, whether its answer ends the suspicion
  {
    std::lock_guard lock(peers_mu_);
    for (NodeId node : nodes) {
      Peer& p = peers_[node];
      if (p.suspect_until <= now || p.probing) continue;
      const bool flapping = p.cleared_at != std::chrono::steady_clock::time_point{} &&
                            now - p.cleared_at < kSuspectFor;
      if (flapping && !ahead_of_a_read) continue;
      p.probing = true;
      due.emplace_back(node, !flapping);
    }
  }
  // Posted outside peers_mu_: a pool that is stopping runs the task on this thread.
  for (const auto& [node, clears] : due) {
    // On the push pool: a ping of a cut-off node waits a whole request timeout.
    pushing_->Post([this, node, clears] {
      PeerClient* client = Client(node);
      const Status st = Ping(client);
      {
        std::lock_guard lock(peers_mu_);
        Peer& p = peers_[node];
        NoteProbed(p, st);
        if (st.ok() && clears) {
          p.suspect_until = {};
          p.cleared_at = p.answered_at;
        }
      }
      probe_cv_.notify_all();
      if (st.ok() && !clears) {
        spdlog::debug(
            "cluster: node {} answers a ping again, soon after the last time; only the "
            "reads waiting for it use it until its suspicion runs out",
            node);
      } else if (st.ok()) {
        spdlog::info("cluster: node {} answers again; reads and placement use it", node);
      } else if (client) {
        NoteFailure(node, st);
      }
    });
  }
}

}  // namespace kvfs::cluster
