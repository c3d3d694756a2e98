#include "repair.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <set>
#include <vector>

#include "cluster_store.h"

namespace kvfs::cluster {
namespace {

constexpr auto kPassEvery = std::chrono::seconds(10);
constexpr auto kUnnamedFor = std::chrono::minutes(10);  // then a held chunk nobody names goes

}  // namespace

void Repairer::Start() {
  std::lock_guard lock(mu_);
  if (started_) return;
  started_ = true;
  thread_ = std::thread([this] { Loop(); });
}

void Repairer::Stop() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Repairer::Poke() {
  {
    std::lock_guard lock(mu_);
    if (poked_) return;  // a pass is due already
    poked_ = true;
    // During a pass or the second after it the loop looks at poked_ when it next waits: a
    // wake-up now would only put it back to sleep. It did, once per namespace change, which
    // cost every node a thread switch for each change another node made.
    if (!awaiting_poke_) return;
  }
  cv_.notify_all();
}

void Repairer::Loop() {
  for (;;) {
    {
      std::unique_lock lock(mu_);
      awaiting_poke_ = true;
      cv_.wait_for(lock, kPassEvery, [&] { return stop_ || poked_; });
      awaiting_poke_ = false;
      if (stop_) return;
      poked_ = false;
    }
    RunOnce();
    // At most one pass a second, however often the namespace changes.
    std::unique_lock lock(mu_);
    cv_.wait_for(lock, std::chrono::seconds(1), [&] { return stop_; });
    if (stop_) return;
  }
}

void Repairer::Pace(uint64_t bytes) {
  const uint64_t bw = store_->options().repair_bandwidth;
  if (bw == 0) return;
  const auto now = std::chrono::steady_clock::now();
  if (next_send_ > now) {
    std::unique_lock lock(mu_);
    cv_.wait_until(lock, next_send_, [&] { return stop_; });
  }
  next_send_ = std::max(next_send_, now) + std::chrono::microseconds(bytes * 1'000'000 / bw);
}

void Repairer::RunOnce() {
  std::lock_guard pass(pass_mu_);
  ClusterStore& s = *store_;
  const NodeId self = s.options_.node_id;
  const size_t R = s.options_.replicas;
  std::set<NodeId> live, usable;  // usable: live and not draining
  for (const MemberInfo& m : s.membership_->Members()) {
    live.insert(m.id);
    if (!m.draining) usable.insert(m.id);
  }
  if (!live.count(self)) return;  // not registered now (etcd unreachable): nothing is certain
  ++passes_;
  const std::vector<NodeId> targets(usable.begin(), usable.end());

  struct Item {
    uint64_t chunk;
    LayoutRef local;
    ObjectId record;
    HolderList holders;
  };
  std::vector<Item> work;
  std::vector<uint64_t> unnamed;
  bool self_needed = false;  // a draining node is done once no chunk needs its copy
  const auto now = std::chrono::steady_clock::now();
  {
    std::lock_guard lock(s.mu_);
    for (const auto& [chunk, h] : s.held_) {
      if (h.record == kInvalidId) {
        if (now - h.since > kUnnamedFor) unnamed.push_back(chunk);
        continue;
      }
      size_t good = 0;
      bool surplus = false;  // a holder that is gone or draining, to take off the list
      NodeId leader = 0, fallback = 0;
      for (NodeId n : h.holders) {
        if (usable.count(n)) {
          ++good;
          if (leader == 0) leader = n;
        } else {
          surplus = true;
        }
        if (live.count(n) && fallback == 0) fallback = n;
      }
      if (good >= R && !surplus) continue;
      if (good < R && !usable.count(self)) self_needed = true;
      if (good >= R && leader != self) continue;  // the leader trims the list
      if ((leader != 0 ? leader : fallback) != self) continue;
      work.push_back({chunk, h.local, h.record, h.holders});
    }
  }
  pending_ = work.size();
  for (uint64_t chunk : unnamed) s.DropHolding(chunk, "no record named it for 10 minutes");
  // Drained: draining, and no chunk needs this node's copy any more (cleared by an undrain).
  s.membership_->SetDrained(s.membership_->IsDraining(self) && !self_needed && work.empty());

  size_t left = work.size();
  for (const Item& item : work) {
    {
      std::lock_guard lock(mu_);
      if (stop_) return;
    }
    pending_ = left--;  // this one and the ones after it
    size_t good = 0;
    for (NodeId n : item.holders) good += std::count(targets.begin(), targets.end(), n);
    NodeId target = 0;
    if (good < R) {
      // Not to a node that placement leaves out (frozen, cut off, or its ping failed): each
      // such copy held this pass a timeout, or was refused, for as long as its lease lived.
      for (NodeId n : s.CopyOrder(item.chunk, targets)) {
        if (!item.holders.Contains(n)) {
          target = n;
          break;
        }
      }
      if (target == 0 && good == 0) continue;  // no usable node to copy to: nothing to do yet
    }
    if (target != 0) {
      Pace(item.local->size);
      Status st = s.PushChunk(item.chunk, item.local, target);
      if (!st.ok()) {
        ++failures_;
        spdlog::warn("cluster: repair of chunk {} to node {} failed: {}", Hex16(item.chunk), target,
                     st.ToString());
        continue;
      }
    }
    // The record, as etcd has it now: replace the holders that are gone by the new copy.
    auto rec = s.log_->ReadRecord(item.record);
    if (!rec.ok() || !*rec) continue;
    const ClusterLayout* cl = AsClusterLayout((*rec)->layout);
    if (!cl || cl->chunk != item.chunk) continue;  // a new version meanwhile
    // Usable holders and the new copy; a draining holder stays only while the chunk would
    // otherwise have fewer than R copies.
    HolderList holders;
    for (NodeId n : cl->holders)
      if (usable.count(n)) holders.Add(n);
    if (target != 0) holders.Add(target);
    for (NodeId n : cl->holders)
      if (holders.size() < R && live.count(n)) holders.Add(n);
    if (holders == cl->holders) continue;
    ObjectRecord next = **rec;
    next.layout = MakeClusterLayout(cl->size, cl->chunk, holders, cl->checksum);
    auto put = s.log_->CompareAndPut(next);
    if (!put.ok()) {
      ++failures_;
      spdlog::info("cluster: repair of chunk {}: record moved meanwhile ({}); next pass",
                   Hex16(item.chunk), put.status().ToString());
      continue;
    }
    if (target == 0) {
      spdlog::info("cluster: chunk {}: holder list trimmed to {} usable nodes", Hex16(item.chunk),
                   holders.size());
      continue;
    }
    ++chunks_;
    bytes_ += item.local->size;
    spdlog::info("cluster: chunk {} copied to node {} (holders now {})", Hex16(item.chunk), target,
                 holders.size());
  }
  pending_ = 0;  // what failed is found again by the next pass
}

}  // namespace kvfs::cluster
