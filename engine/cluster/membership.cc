#include "membership.h"

#include <spdlog/spdlog.h>

namespace kvfs::cluster {

Result<std::unique_ptr<Membership>> Membership::Create(NodeId self,
                                                       const std::vector<NodeInfo>& nodes,
                                                       MembershipOptions options) {
  if (self == 0) return Status::Invalid("node id 0 is reserved");
  std::unique_ptr<Membership> m(new Membership(self, options));
  for (const NodeInfo& n : nodes) {
    if (n.id == 0) return Status::Invalid("node id 0 is reserved");
    if (n.id == self) continue;
    if (m->peers_.count(n.id)) return Status::Invalid("duplicate node id " + std::to_string(n.id));
    auto client = MakePeerClient(n.address, options.client);
    if (!client.ok()) return client.status();
    auto peer = std::make_unique<Peer>();
    peer->client = std::move(*client);
    m->peers_.emplace(n.id, std::move(peer));
  }
  return m;
}

Membership::~Membership() { Stop(); }

void Membership::Start() {
  std::lock_guard lock(mu_);
  if (thread_.joinable() || stop_) return;
  thread_ = std::thread([this] { Run(); });
}

void Membership::Stop() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Membership::Run() {
  std::unique_lock lock(mu_);
  while (!stop_) {
    lock.unlock();
    PingOnce();
    lock.lock();
    cv_.wait_for(lock, options_.ping_interval, [&] { return stop_; });
  }
}

void Membership::PingOnce() {
  CallOptions call;
  call.timeout = options_.ping_timeout;
  for (auto& [id, peer] : peers_) {
    Status st = peer->client->Ping(call);
    if (st.ok()) {
      peer->misses = 0;
      if (!peer->up.exchange(true)) {
        spdlog::info("cluster: node {} ({}) is up", id, peer->client->address().ToString());
        if (on_up_) on_up_(id);
      }
    } else if (++peer->misses >= options_.misses_to_down && peer->up.exchange(false)) {
      spdlog::warn("cluster: node {} ({}) is down: {}", id, peer->client->address().ToString(),
                   st.ToString());
    }
  }
}

std::vector<NodeId> Membership::AllNodes() const {
  std::vector<NodeId> out{self_};
  for (const auto& [id, peer] : peers_) out.push_back(id);
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<NodeId> Membership::LiveNodes() const {
  std::vector<NodeId> out{self_};
  for (const auto& [id, peer] : peers_) {
    if (peer->up.load()) out.push_back(id);
  }
  std::sort(out.begin(), out.end());
  return out;
}

bool Membership::IsUp(NodeId id) const {
  if (id == self_) return true;
  auto it = peers_.find(id);
  return it != peers_.end() && it->second->up.load();
}

PeerClient* Membership::Client(NodeId id) const {
  auto it = peers_.find(id);
  return it == peers_.end() ? nullptr : it->second->client.get();
}

}  // namespace kvfs::cluster
