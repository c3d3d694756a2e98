#include "membership.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdint>
#include <nlohmann/json.hpp>

#include "kvfs/transport.h"

namespace kvfs::cluster {
namespace {

using nlohmann::json;

std::optional<MemberInfo> ParseMember(NodeId id, const std::string& value) {
  json j = json::parse(value, nullptr, false);
  if (!j.is_object()) return std::nullopt;
  MemberInfo m;
  m.id = id;
  auto addr = j.find("address");
  if (addr == j.end() || !addr->is_string()) return std::nullopt;
  m.address = addr->get<std::string>();
  // Peers dial this address: one that does not parse, or a wildcard (every node would dial
  // itself), makes no member.
  auto parsed = ParsePeerAddress(m.address);
  if (!parsed.ok() || IsWildcardHost(parsed->host)) return std::nullopt;
  m.peer = std::move(*parsed);
  if (auto c = j.find("capacity"); c != j.end() && c->is_number_unsigned())
    m.capacity_bytes = c->get<uint64_t>();
  if (auto u = j.find("used"); u != j.end() && u->is_number_unsigned())
    m.used_bytes = u->get<uint64_t>();
  if (auto r = j.find("replicas"); r != j.end() && r->is_number_unsigned())
    m.replicas = static_cast<uint32_t>(std::min<uint64_t>(r->get<uint64_t>(), UINT32_MAX));
  if (auto d = j.find("drained"); d != j.end() && d->is_boolean()) m.drained = d->get<bool>();
  return m;
}

// A node's registration. Every node registers under a lease, so a key without one is no
// node's (written by hand, or by something else) and would never expire: not a live member.
std::optional<MemberInfo> LiveMember(NodeId id, const etcd::KeyValue& kv) {
  if (kv.lease == 0) return std::nullopt;
  auto m = ParseMember(id, kv.value);
  if (!m) {
    spdlog::warn(
        "cluster: the registration of node {} ({} bytes) is not a kvfs node's (no "
        "address a peer can dial): not a member",
        id, kv.value.size());
  }
  return m;
}

}  // namespace

Result<std::unique_ptr<Membership>> Membership::Start(etcd::Client* etcd, const NamespaceKeys* keys,
                                                      MembershipOptions options,
                                                      std::function<void()> on_change) {
  if (options.self == 0) return Status::Invalid("node id 0 is reserved");
  if (options.ttl.count() < 2) return Status::Invalid("the lease TTL must be at least 2 s");
  std::unique_ptr<Membership> m(
      new Membership(etcd, keys, std::move(options), std::move(on_change)));
  KVFS_RETURN_IF_ERROR(m->Register());
  int64_t revision = 0;
  KVFS_RETURN_IF_ERROR(m->Reload(&revision));
  m->renew_ = std::thread([p = m.get()] { p->RenewLoop(); });
  m->watch_ = std::thread([p = m.get()] { p->WatchLoop(); });
  return m;
}

Membership::~Membership() { Leave(); }

void Membership::Leave() {
  if (stop_.exchange(true)) return;
  wake_cv_.notify_all();
  if (renew_.joinable()) renew_.join();
  if (watch_.joinable()) watch_.join();
  if (int64_t lease = lease_.exchange(0); lease != 0) {
    Status st = etcd_->LeaseRevoke(lease);
    if (!st.ok()) spdlog::warn("cluster: could not revoke lease on leaving: {}", st.ToString());
  }
}

std::string Membership::SelfValue() const {
  json j = json::object();
  j["id"] = options_.self;
  j["address"] = options_.address;
  if (options_.replicas != 0) j["replicas"] = options_.replicas;
  if (options_.usage) {
    auto [cap, used] = options_.usage();
    j["capacity"] = cap;
    j["used"] = used;
  }
  j["drained"] = drained_.load();
  return j.dump();
}

Status Membership::Register() {
  const std::string key = keys_->Member(options_.self);
  KVFS_ASSIGN_OR_RETURN(int64_t lease, etcd_->LeaseGrant(options_.ttl.count()));
  for (int attempt = 0; attempt < 5; ++attempt) {
    etcd::TxnRequest txn;
    txn.compare.push_back(
        {key, "", etcd::Compare::Target::kVersion, etcd::Compare::Op::kEqual, 0, ""});
    txn.success.push_back({etcd::TxnOp::Kind::kPut, key, SelfValue(), "", lease, 0});
    txn.failure.push_back({etcd::TxnOp::Kind::kRange, key, "", "", 0, 0});
    KVFS_ASSIGN_OR_RETURN(etcd::TxnResponse r, etcd_->Txn(txn));
    if (r.succeeded) {
      lease_ = lease;
      spdlog::info("cluster: node {} registered at {} (lease {:x}, TTL {} s)", options_.self,
                   options_.address, lease, options_.ttl.count());
      return Status::Ok();
    }
    if (r.ranges.empty() || r.ranges[0].kvs.empty()) continue;  // it just expired: again
    const etcd::KeyValue& held = r.ranges[0].kvs[0];
    auto other = ParseMember(options_.self, held.value);
    // A key without a lease is no node's registration (every node registers under one), and
    // it would never expire: written by hand or by something else. It must not lock the id out.
    const bool leaseless = held.lease == 0;
    if (leaseless) {
      spdlog::warn("cluster: {} was held without a lease (not a node's registration); replacing it",
                   key);
    } else if (!other || other->address != options_.address) {
      (void)etcd_->LeaseRevoke(lease);
      return Status::Error(EEXIST, "node id " + std::to_string(options_.self) +
                                       " is registered by a live node at " +
                                       (other ? other->address : "an unknown address"));
    }
    // Our own address: a previous run of this node that died (this one holds the data
    // directory's lock and bound the address). Its key goes now instead of at its lease's end.
    etcd::TxnRequest take;
    take.compare.push_back({key, "", etcd::Compare::Target::kModRevision, etcd::Compare::Op::kEqual,
                            held.mod_revision, ""});
    take.success.push_back({etcd::TxnOp::Kind::kDelete, key, "", "", 0, 0});
    KVFS_RETURN_IF_ERROR(etcd_->Txn(take).status());
    if (leaseless) continue;
    (void)etcd_->LeaseRevoke(held.lease);
    spdlog::info("cluster: node {} took over the registration of its previous run", options_.self);
  }
  (void)etcd_->LeaseRevoke(lease);
  return Status::Error(EBUSY, "node id " + std::to_string(options_.self) +
                                  ": the registration keeps changing under us");
}

void Membership::RenewLoop() {
  const auto interval = std::max<std::chrono::milliseconds>(
      std::chrono::milliseconds(300),
      std::chrono::duration_cast<std::chrono::milliseconds>(options_.ttl) / 3);
  auto last_usage = std::chrono::steady_clock::now();
  // What the last usage put wrote: an unchanged value is not written again (each put is an
  // etcd revision, and an idle cluster should not move etcd's revision every few seconds).
  std::string last_value;
  // While etcd is unreachable it is asked more often: changes are refused until it answers.
  constexpr auto kRetry = std::chrono::milliseconds(500);
  while (!stop_.load()) {
    {
      std::unique_lock lock(wake_mu_);
      wake_cv_.wait_for(lock, reachable_.load() ? interval : std::min(interval, kRetry),
                        [&] { return stop_.load() || renew_now_.load() || check_now_.load(); });
    }
    if (stop_.load()) return;
    check_now_ = false;
    // Our key is missing: a live lease still needs the key put again (the usage put below).
    if (renew_now_.exchange(false)) {
      last_usage = std::chrono::steady_clock::time_point{};
      last_value.clear();
    }
    Status st;
    if (lease_.load() == 0) {
      st = Register();
    } else {
      auto ttl = etcd_->LeaseKeepAlive(lease_.load());
      st = ttl.status();
      if (st.err() == ENOENT) {
        // Expired while etcd or this node was unreachable or frozen: the others saw this node
        // leave. Join again under a new lease.
        spdlog::warn("cluster: lease of node {} expired; registering again", options_.self);
        lease_ = 0;
        st = Register();
      }
    }
    if (st.ok()) {
      const auto now = std::chrono::steady_clock::now();
      std::string value;
      if (now - last_usage > std::chrono::seconds(5) && (value = SelfValue()) != last_value) {
        last_usage = now;
        auto put = etcd_->Put(keys_->Member(options_.self), value, lease_.load());
        if (put.ok()) {
          last_value = std::move(value);
        } else {
          st = put.status();
        }
      }
    }
    if (st.ok()) {
      if (!reachable_.exchange(true)) {
        spdlog::warn("cluster: etcd {} reachable again; namespace changes accepted",
                     etcd_->endpoint());
        if (on_change_) on_change_();
      }
    } else {
      MarkUnreachable(st);
    }
  }
}

void Membership::MarkUnreachable(const Status& why) {
  if (!reachable_.exchange(false)) return;
  spdlog::error(
      "cluster: etcd unreachable ({}); namespace changes refused (EROFS) until it is back, "
      "reads go on",
      why.ToString());
  if (on_change_) on_change_();
}

void Membership::NoteUnreachable(const Status& why) {
  MarkUnreachable(why);
  {
    std::lock_guard lock(wake_mu_);
    check_now_ = true;
  }
  wake_cv_.notify_all();
}

Status Membership::Reload(int64_t* revision) {
  etcd::RangeRequest r;
  r.key = keys_->MemberPrefix();
  r.range_end = etcd::PrefixEnd(keys_->DrainPrefix());
  KVFS_ASSIGN_OR_RETURN(etcd::RangeResponse resp, etcd_->Range(r));
  std::map<NodeId, MemberInfo> members;
  std::map<NodeId, bool> drains;
  for (const etcd::KeyValue& kv : resp.kvs) {
    if (auto id = keys_->ParseMember(kv.key)) {
      if (auto m = LiveMember(*id, kv)) members[*id] = *m;
    } else if (auto d = keys_->ParseDrain(kv.key)) {
      drains[*d] = true;
    }
  }
  {
    std::lock_guard lock(mu_);
    members_ = std::move(members);
    drains_ = std::move(drains);
  }
  *revision = resp.revision;
  return Status::Ok();
}

void Membership::ApplyEvent(const etcd::Event& ev) {
  const bool put = ev.type == etcd::Event::Type::kPut;
  std::lock_guard lock(mu_);
  if (auto id = keys_->ParseMember(ev.kv.key)) {
    auto m = put ? LiveMember(*id, ev.kv) : std::nullopt;
    if (m) {
      members_[*id] = *m;
      WarnIfReplicasDiffer(*m);
    } else {
      members_.erase(*id);  // gone, or overwritten by something that is no registration
    }
  } else if (auto d = keys_->ParseDrain(ev.kv.key)) {
    if (put) {
      drains_[*d] = true;
    } else {
      drains_.erase(*d);
    }
  }
}

void Membership::WarnIfReplicasDiffer(const MemberInfo& m) {
  if (m.id == options_.self || m.replicas == 0 || options_.replicas == 0) return;
  uint32_t& warned = replicas_warned_[m.id];
  if (m.replicas == options_.replicas) warned = 0;
  if (m.replicas == options_.replicas || m.replicas == warned) return;
  warned = m.replicas;
  spdlog::warn(
      "cluster: node {} keeps {} replica{} of what it publishes, this node {}: start every node "
      "with the same --replicas",
      m.id, m.replicas, m.replicas == 1 ? "" : "s", options_.replicas);
}

void Membership::WatchLoop() {
  int64_t revision = 0;
  bool need_reload = true;
  while (!stop_.load()) {
    if (need_reload) {
      Status st = Reload(&revision);
      if (!st.ok()) {
        std::unique_lock lock(wake_mu_);
        wake_cv_.wait_for(lock, std::chrono::milliseconds(500), [&] { return stop_.load(); });
        continue;
      }
      need_reload = false;
      RenewIfSelfMissing();
      if (on_change_) on_change_();
    }
    etcd::WatchRequest w;
    w.key = keys_->MemberPrefix();
    w.range_end = etcd::PrefixEnd(keys_->DrainPrefix());
    w.start_revision = revision + 1;
    Status st = etcd_->Watch(
        w,
        [&](const etcd::WatchResponse& r) {
          if (r.events.empty()) return true;
          for (const etcd::Event& ev : r.events) {
            ApplyEvent(ev);
            revision = std::max(revision, ev.kv.mod_revision);
          }
          RenewIfSelfMissing();
          if (on_change_) on_change_();
          return true;
        },
        stop_);
    if (stop_.load()) return;
    // The stream broke (etcd restarted, compaction, unreachable): read everything again.
    spdlog::debug("cluster: member watch ended: {}", st.ToString());
    need_reload = true;
    std::unique_lock lock(wake_mu_);
    wake_cv_.wait_for(lock, std::chrono::milliseconds(200), [&] { return stop_.load(); });
  }
}

void Membership::RenewIfSelfMissing() {
  if (IsLive(options_.self)) return;
  {
    std::lock_guard lock(wake_mu_);
    // Once per registration, not once per watch answer that still misses the key.
    if (renew_now_.exchange(true)) return;
  }
  spdlog::warn("cluster: etcd no longer lists node {}; registering it again now", options_.self);
  wake_cv_.notify_all();
}

std::vector<MemberInfo> Membership::Members() const {
  std::lock_guard lock(mu_);
  std::vector<MemberInfo> out;
  for (const auto& [id, m] : members_) {
    MemberInfo copy = m;
    copy.draining = drains_.count(id) > 0;
    out.push_back(std::move(copy));
  }
  return out;
}

std::optional<MemberInfo> Membership::FetchMember(NodeId id) {
  if (!reachable_.load()) return std::nullopt;
  {
    std::lock_guard lock(mu_);
    const auto now = std::chrono::steady_clock::now();
    auto& last = fetched_[id];
    if (now - last < std::chrono::seconds(1)) return std::nullopt;
    last = now;
  }
  etcd::RangeRequest r;
  r.key = keys_->Member(id);
  auto got = etcd_->Range(r);
  if (!got.ok() || got->kvs.empty()) return std::nullopt;
  return LiveMember(id, got->kvs[0]);
}

std::optional<MemberInfo> Membership::Find(NodeId id) const {
  std::lock_guard lock(mu_);
  auto it = members_.find(id);
  if (it == members_.end()) return std::nullopt;
  MemberInfo m = it->second;
  m.draining = drains_.count(id) > 0;
  return m;
}

bool Membership::IsLive(NodeId id) const {
  std::lock_guard lock(mu_);
  return members_.count(id) > 0;
}

bool Membership::IsDraining(NodeId id) const {
  std::lock_guard lock(mu_);
  return drains_.count(id) > 0;
}

std::vector<NodeId> Membership::PlacementTargets() const {
  std::lock_guard lock(mu_);
  std::vector<NodeId> out;
  for (const auto& [id, m] : members_) {
    if (!drains_.count(id)) out.push_back(id);
  }
  return out;
}

void Membership::SetDrained(bool drained) {
  if (drained_.exchange(drained) == drained) return;
  if (lease_.load() != 0)
    (void)etcd_->Put(keys_->Member(options_.self), SelfValue(), lease_.load());
}

}  // namespace kvfs::cluster
