#include "cluster_node.h"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "config_file.h"

namespace kvfs::fs {
namespace {

using cluster::NodeId;

// Peers' capacity and usage come from a STATS request when .kvfs/nodes is read; a peer that is
// slow to answer must not make the read slow.
constexpr std::chrono::milliseconds kStatsDeadline{300};

nlohmann::json NodeJson(NodeId id, const std::string& address, const std::string& state,
                        uint64_t capacity, uint64_t used) {
  return nlohmann::json{{"id", id},
                        {"address", address},
                        {"state", state},
                        {"capacity_bytes", capacity},
                        {"used_bytes", used},
                        {"gets_sent", 0},
                        {"gets_served", 0},
                        {"puts_sent", 0},
                        {"puts_received", 0},
                        {"pushes_sent", 0},
                        {"pushes_received", 0}};
}

}  // namespace

nlohmann::json SingleNodeNodesJson(const StoreStats& stats) {
  return nlohmann::json{
      {"self", 0},
      {"replicas", 1},
      {"transport", "none"},
      {"nodes",
       nlohmann::json::array({NodeJson(0, "", "self", stats.capacity_bytes, stats.used_bytes)})}};
}

nlohmann::json SingleNodeLocationJson() {
  return nlohmann::json{
      {"chunk_key", ""},
      {"replicas", nlohmann::json::array()},
      {"local", true},
      {"holders", nlohmann::json::array({{{"id", 0}, {"address", ""}, {"state", "self"}}})}};
}

Result<std::unique_ptr<ClusterNode>> ClusterNode::Start(const MountOptions& o, ChunkStore* local) {
  const ClusterSettings& c = o.cluster;
  std::unique_ptr<ClusterNode> node(new ClusterNode());
  node->listen_ = c.listen;
  node->peers_ = c.peers;

  cluster::ClusterOptions co;
  co.self = c.node_id;
  co.replicas = c.replicas;
  co.request_timeout = std::chrono::milliseconds(c.request_timeout_ms);
  co.ping_interval = std::chrono::milliseconds(c.ping_interval_ms);
  co.ping_timeout = std::chrono::milliseconds(std::min(c.request_timeout_ms, c.ping_interval_ms));
  co.keep_local_copy = c.keep_local_copy;
  co.state_dir = o.store == "local" ? o.data_dir : "";
  KVFS_ASSIGN_OR_RETURN(co.secret, SharedSecret::FromFile(c.secret_file));
  KVFS_ASSIGN_OR_RETURN(TransportKind kind, ParseTransportKind(c.transport));
  if (kind == TransportKind::kAuto && !RdmaDeviceAvailable()) {
    spdlog::info("cluster: transport = auto and this host has no RDMA device: using TCP");
    kind = TransportKind::kTcp;
  }
  if (kind == TransportKind::kRdma && !RdmaDeviceAvailable())
    return Status::Error(ENODEV, "transport = rdma but this host has no RDMA device");
  co.transport = kind;

  KVFS_ASSIGN_OR_RETURN(node->store_, cluster::ClusterStore::Open(local, co));
  node->store_->SetClusterListener(node.get());
  if (!c.listen.empty()) {
    KVFS_ASSIGN_OR_RETURN(HostPort hp, ParseHostPort(c.listen));
    auto port = node->store_->Listen(hp.host, hp.port);
    if (!port.ok())
      return Status::Error(port.status().err(),
                           "cannot listen on " + c.listen + ": " + port.status().message());
  } else {
    spdlog::warn("cluster: no listen address: peers cannot push changes to this node");
  }
  std::vector<cluster::NodeInfo> nodes;
  for (const PeerSpec& p : c.peers) nodes.push_back({p.id, PeerAddress{p.host, p.port}});
  KVFS_RETURN_IF_ERROR(node->store_->Join(nodes));
  spdlog::info("cluster: node {} listening on {}, {} peers, replicas {}, transport {}", c.node_id,
               c.listen.empty() ? "-" : c.listen, c.peers.size(), c.replicas,
               node->store_->transport_name());
  return node;
}

ClusterNode::~ClusterNode() { Shutdown(); }

void ClusterNode::BeginLoad() {
  std::lock_guard lock(mu_);
  if (phase_ == Phase::kJoining) phase_ = Phase::kLoading;
}

void ClusterNode::Attach(Namespace* ns) {
  std::lock_guard lock(mu_);
  ns_ = ns;
  // Changes queued while the namespace loaded; those already in its Records() are no-ops.
  for (const Pending& p : pending_) {
    if (p.remove) {
      ns_->ApplyRemoteRemove(p.id);
    } else {
      ns_->ApplyRemotePut(p.record);
    }
  }
  pending_.clear();
  phase_ = Phase::kLive;
}

void ClusterNode::Shutdown() {
  {
    std::lock_guard lock(mu_);
    if (phase_ == Phase::kStopped) return;
    phase_ = Phase::kStopped;
    ns_ = nullptr;
  }
  if (store_) {
    store_->SetClusterListener(nullptr);
    store_->Shutdown();
  }
}

// The listener holds mu_ while it applies a change so that Shutdown cannot take the namespace
// away under it; the Namespace only takes its own lock briefly and queues kernel notifications.
void ClusterNode::OnPut(const ObjectRecord& record) {
  std::lock_guard lock(mu_);
  if (phase_ == Phase::kLoading) {
    pending_.push_back({false, record, record.id});
  } else if (phase_ == Phase::kLive && ns_) {
    ns_->ApplyRemotePut(record);
  }
}

void ClusterNode::OnRemove(ObjectId id) {
  std::lock_guard lock(mu_);
  if (phase_ == Phase::kLoading) {
    pending_.push_back({true, {}, id});
  } else if (phase_ == Phase::kLive && ns_) {
    ns_->ApplyRemoteRemove(id);
  }
}

void ClusterNode::OnLayoutReplaced(ObjectId id, const LayoutRef& from, const LayoutRef& to) {
  std::lock_guard lock(mu_);
  if (phase_ == Phase::kLive && ns_) ns_->ReplaceLayout(id, from, to);
}

std::string ClusterNode::AddressOf(uint16_t id) const {
  if (id == store_->self()) return listen_;
  for (const PeerSpec& p : peers_) {
    if (p.id == id) {
      return p.host.find(':') != std::string::npos ? "[" + p.host + "]:" + std::to_string(p.port)
                                                   : p.host + ":" + std::to_string(p.port);
    }
  }
  return "";
}

std::string ClusterNode::StateOf(uint16_t id) {
  if (id == store_->self()) return "self";
  cluster::Membership* m = store_->membership();
  return m && m->IsUp(id) ? "up" : "down";
}

nlohmann::json ClusterNode::NodesJson() {
  nlohmann::json nodes = nlohmann::json::array();
  const StoreStats own = static_cast<const ChunkStore*>(store_.get())->Stats();
  const cluster::ClusterCounters total = store_->counters();
  nlohmann::json self =
      NodeJson(store_->self(), listen_, "self", own.capacity_bytes, own.used_bytes);
  self["gets_sent"] = total.gets_sent;
  self["gets_served"] = total.gets_served;
  self["puts_sent"] = total.puts_sent;
  self["puts_received"] = total.puts_received;
  self["pushes_sent"] = total.pushes_sent;
  self["pushes_received"] = total.pushes_received;
  nodes.push_back(self);
  cluster::Membership* m = store_->membership();
  for (const PeerSpec& p : peers_) {
    const std::string state = StateOf(p.id);
    uint64_t capacity = 0, used = 0;
    if (state == "up" && m) {
      if (PeerClient* client = m->Client(p.id)) {
        CallOptions call;
        call.timeout = kStatsDeadline;
        if (auto st = client->Stats(call); st.ok()) {
          capacity = st->capacity_bytes;
          used = st->used_bytes;
        }
      }
    }
    // A peer's counters are this node's traffic with it; what it served to others is in its
    // own .kvfs/nodes.
    const cluster::PeerTraffic t = store_->traffic(p.id);
    nlohmann::json n = NodeJson(p.id, AddressOf(p.id), state, capacity, used);
    n["gets_sent"] = t.gets_sent;
    n["puts_sent"] = t.puts_sent;
    n["pushes_sent"] = t.pushes_sent;
    n["pushes_received"] = t.pushes_received;
    nodes.push_back(n);
  }
  std::sort(nodes.begin(), nodes.end(),
            [](const nlohmann::json& a, const nlohmann::json& b) { return a["id"] < b["id"]; });
  return nlohmann::json{{"self", store_->self()},
                        {"replicas", store_->options().replicas},
                        {"transport", store_->transport_name()},
                        {"nodes", nodes}};
}

Result<nlohmann::json> ClusterNode::LocationJson(uint64_t ino, Namespace* ns) {
  KVFS_RETURN_IF_ERROR(ns->Record(ino).status());
  cluster::ChunkLocation loc;
  if (auto found = store_->Location(ino); found.ok()) {
    loc = *found;
  } else {
    loc.local = true;  // not published yet: only this node has it (in its writer)
  }
  nlohmann::json holders = nlohmann::json::array();
  std::vector<NodeId> ids = loc.replicas;
  if (loc.local && std::find(ids.begin(), ids.end(), store_->self()) == ids.end())
    ids.push_back(store_->self());
  for (NodeId id : ids) {
    holders.push_back({{"id", id}, {"address", AddressOf(id)}, {"state", StateOf(id)}});
  }
  return nlohmann::json{{"chunk_key", loc.chunk_key},
                        {"replicas", loc.replicas},
                        {"local", loc.local},
                        {"holders", holders}};
}

}  // namespace kvfs::fs
