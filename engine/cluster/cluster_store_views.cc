// ClusterStore: what kvfsctl sees and sets (`kvfsctl status`, `nodes`, `placement`, `drain`):
// etcd's membership beside this node's own view of each peer, and the departed it has seen.
#include <algorithm>
#include <set>

#include "cluster_store.h"
#include "repair.h"

namespace kvfs::cluster {

ClusterView ClusterStore::Cluster() const {
  ClusterView v;
  v.self = options_.node_id;
  v.replicas = options_.replicas;
  v.transport = options_.transport == TransportKind::kRdma ? "rdma" : "tcp";
  v.etcd = options_.etcd.endpoints;
  v.etcd_reachable = membership_->etcd_reachable();
  v.revision = log_->applied_revision();
  v.etcd_history_s = static_cast<uint32_t>(options_.etcd_history.count());
  v.compacted_revision = compacted_revision_.load();
  v.compaction_held_at = compaction_held_at_.load();
  v.compaction_held_by = compaction_held_by_.load();
  const NamespaceLog::Counters c = log_->counters();
  v.ns_transactions = c.txns;
  v.ns_changes = c.batches;
  v.ns_conflicts = c.conflicts;
  v.ns_names_taken_over = c.displaced;
  v.ns_refused_unreachable = c.refused_unreachable + refused_up_front_.load();
  std::set<NodeId> listed;
  for (const MemberInfo& m : membership_->Members()) {
    NodeView n;
    n.id = m.id;
    n.address = m.address;
    n.state = m.id == options_.node_id ? (m.draining ? "draining" : "self")
                                       : (m.draining ? "draining" : "up");
    if (m.drained && m.draining) n.state = "drained";
    n.capacity_bytes = m.capacity_bytes;
    n.used_bytes = m.used_bytes;
    n.replicas = m.replicas;
    if (m.id == options_.node_id) {
      StoreStats s = local_->Stats();
      n.capacity_bytes = s.capacity_bytes;
      n.used_bytes = s.used_bytes;
    } else if (PeerCounters* c = const_cast<ClusterStore*>(this)->CountersFor(m.id)) {
      n.gets_sent = c->gets_sent.load();
      n.puts_sent = c->puts_sent.load();
      n.failures = c->failures.load();
      n.hedged_around = c->hedged_around.load();
      n.unanswering = IsSuspect(m.id);
      n.unreachable = Unreachable(m.id);
    }
    listed.insert(m.id);
    v.nodes.push_back(std::move(n));
  }
  {
    // Nodes seen since this one started whose lease is gone: down, until they come back or
    // were drained before they left (then they were removed on purpose).
    std::lock_guard lock(seen_mu_);
    for (const NodeView& n : v.nodes) {
      if (n.state == "drained") {
        seen_.erase(n.id);
      } else {
        seen_[n.id] = n.address;
      }
    }
    for (const auto& [id, address] : seen_) {
      if (listed.count(id) || id == options_.node_id) continue;
      NodeView n;
      n.id = id;
      n.address = address;
      n.state = "down";
      v.nodes.push_back(std::move(n));
    }
  }
  if (!listed.count(options_.node_id)) {
    // Not registered right now (etcd unreachable, or the lease just expired).
    NodeView n;
    n.id = options_.node_id;
    n.state = "self";
    n.replicas = options_.replicas;
    v.nodes.push_back(std::move(n));
  }
  std::sort(v.nodes.begin(), v.nodes.end(),
            [](const NodeView& a, const NodeView& b) { return a.id < b.id; });
  Repairer::Totals t = repair_->totals();
  v.repair_pending = t.pending;
  v.repaired_chunks = t.chunks;
  v.repaired_bytes = t.bytes;
  v.repair_failures = t.failures;
  v.repair_passes = t.passes;
  v.repair_bandwidth = options_.repair_bandwidth;
  return v;
}

PlacementView ClusterStore::Placement(const LayoutRef& layout) const {
  PlacementView p;
  if (const ClusterLayout* cl = AsClusterLayout(layout)) {
    p.chunk = cl->chunk;
    p.holders = cl->holders.ToVector();
    p.local = Holds(cl->chunk);
  } else if (layout) {
    p.local = true;  // written here, not yet published
    p.holders.push_back(options_.node_id);
  }
  return p;
}

Status ClusterStore::SetDraining(uint16_t node, bool draining) {
  if (node == 0) node = options_.node_id;
  if (draining) return etcd_->Put(keys_.Drain(node), "1").status();
  etcd::TxnRequest t;
  t.success.push_back({etcd::TxnOp::Kind::kDelete, keys_.Drain(node), "", "", 0, 0});
  return etcd_->Txn(t).status();
}

}  // namespace kvfs::cluster
