// ClusterStore: the chunks this node's engine holds. A held copy is kept as an engine record
// under a hidden directory; dropped copies are still served for kRetireGrace (within a byte
// budget); copies the engine loses (evicted, corrupt) are released at once and leave their
// holder lists in etcd from the housekeeping thread.
#include <spdlog/spdlog.h>

#include "cluster_store.h"

namespace kvfs::cluster {
namespace {

// Device bytes a local layout occupies (what freeing it gives back).
uint64_t StoredBytes(const Layout* layout) {
  uint64_t bytes = 0;
  if (layout)
    for (const Segment& s : layout->segments) bytes += s.stored_len;
  return bytes;
}

}  // namespace

Status ClusterStore::Hold(uint64_t chunk, const LayoutRef& layout, uint32_t flags) {
  ObjectRecord rec;
  {
    std::lock_guard lock(mu_);
    auto it = held_.find(chunk);
    if (it != held_.end() && it->second.local == layout) return Status::Ok();
    rec.id = it != held_.end() ? it->second.local_id : local_->NewId();
  }
  rec.parent = chunk_dir_;
  rec.name = ChunkName(chunk);
  rec.type = ObjectType::kFile;
  rec.mode = 0600;
  rec.flags = flags;
  rec.layout = layout;
  rec.atime = rec.mtime = rec.ctime = Timespec64{static_cast<int64_t>(time(nullptr)), 0};
  MetaBatch b;
  b.puts.push_back(rec);
  KVFS_RETURN_IF_ERROR(local_->Apply(b));
  std::lock_guard lock(mu_);
  Holding& h = held_[chunk];
  h.local_id = rec.id;
  h.local = layout;
  h.flags = flags;
  h.from_before_start = false;
  chunk_of_local_[rec.id] = chunk;
  return Status::Ok();
}

void ClusterStore::DropHolding(uint64_t chunk, const char* why) {
  ObjectId local_id;
  std::vector<LayoutRef> freed;  // over the retiring budget; released after mu_
  {
    std::lock_guard lock(mu_);
    auto it = held_.find(chunk);
    if (it == held_.end()) return;
    local_id = it->second.local_id;
    if (it->second.record != kInvalidId) chunk_of_record_.erase(it->second.record);
    chunk_of_local_.erase(local_id);
    // Readers that still see the old version (a node whose watch has not delivered the new
    // one yet, an open that raced the switch) are served for a moment longer: the engine
    // frees the extents only once this last reference goes.
    RetireLocked(chunk, std::move(it->second.local), &freed);
    held_.erase(it);
  }
  MetaBatch b;
  b.removes.push_back(local_id);
  Status st = local_->Apply(b);
  if (!st.ok()) {
    spdlog::warn("cluster: dropping chunk {} ({}) failed: {}", Hex16(chunk), why, st.ToString());
  } else {
    spdlog::debug("cluster: dropped chunk {} ({})", Hex16(chunk), why);
  }
}

void ClusterStore::RetireLocked(uint64_t chunk, LayoutRef local, std::vector<LayoutRef>* freed) {
  const uint64_t bytes = StoredBytes(local.get());
  retiring_.push_back(
      {chunk, std::move(local), bytes, std::chrono::steady_clock::now() + kRetireGrace});
  retiring_bytes_ += bytes;
  while (retiring_bytes_ > retire_budget_ && !retiring_.empty()) freed->push_back(PopRetiring());
}

LayoutRef ClusterStore::HeldLayout(uint64_t chunk, bool retiring) const {
  std::lock_guard lock(mu_);
  auto it = held_.find(chunk);
  if (it != held_.end()) return it->second.local;
  return retiring ? RetiringLocked(chunk) : nullptr;
}

LayoutRef ClusterStore::RetiringLocked(uint64_t chunk) const {
  for (const Retiring& r : retiring_)
    if (r.chunk == chunk) return r.local;
  return nullptr;
}

ClusterStore::PeerCopy ClusterStore::CopyForPeer(uint64_t chunk) {
  std::lock_guard lock(mu_);
  auto it = held_.find(chunk);
  if (it != held_.end()) {
    it->second.peer_read = std::chrono::steady_clock::now();
    return {it->second.local, it->second.local_id};
  }
  // A dropped copy that a peer still reads is served kRetireGrace past this read (an open
  // reader elsewhere sends a keep-alive GET when it pauses: OpenRead).
  for (Retiring& r : retiring_) {
    if (r.chunk != chunk) continue;
    r.until = std::max(r.until, std::chrono::steady_clock::now() + kRetireGrace);
    return {r.local, kInvalidId};
  }
  return {nullptr, kInvalidId};
}

void ClusterStore::ExpireRetiring(bool resumed) {
  std::vector<LayoutRef> freed;  // released outside mu_: the last release frees extents
  std::lock_guard lock(mu_);
  const auto now = std::chrono::steady_clock::now();
  if (resumed) {
    for (Retiring& r : retiring_) r.until = std::max(r.until, now + kRetireGrace);
    return;
  }
  // Not in `until` order: a read moves a copy's on.
  for (auto it = retiring_.begin(); it != retiring_.end();) {
    if (it->until > now) {
      ++it;
      continue;
    }
    retiring_bytes_ -= it->bytes;
    freed.push_back(std::move(it->local));
    it = retiring_.erase(it);
  }
}

LayoutRef ClusterStore::PopRetiring() {
  LayoutRef local = std::move(retiring_.front().local);
  retiring_bytes_ -= retiring_.front().bytes;
  retiring_.pop_front();
  return local;
}

bool ClusterStore::Holds(uint64_t chunk, bool retiring) const {
  return HeldLayout(chunk, retiring) != nullptr;
}

size_t ClusterStore::held_chunks() const {
  std::lock_guard lock(mu_);
  return held_.size();
}

void ClusterStore::QueueLocalLoss(ObjectId local_id, bool corrupt) {
  std::vector<LayoutRef> released;  // dropped after mu_: the last reference frees the extents
  LocalLoss loss{0, kInvalidId, corrupt ? LossKind::kCorrupt : LossKind::kEvicted};
  {
    std::lock_guard lock(mu_);
    auto it = chunk_of_local_.find(local_id);
    if (it == chunk_of_local_.end()) return;
    loss.chunk = it->second;
    auto h = held_.find(loss.chunk);
    if (h != held_.end()) {
      loss.record = h->second.record;
      if (loss.record != kInvalidId) chunk_of_record_.erase(loss.record);
      const auto& peer_read = h->second.peer_read;
      if (!corrupt && peer_read && *peer_read + kRetireGrace > std::chrono::steady_clock::now()) {
        // Evicted while a peer was reading it: that reader's open file (which this engine's
        // eviction cannot see) is served for the grace, as a local reader's handle keeps an
        // evicted file whole. Its space comes back when the grace ends; the engine's eviction
        // counts it as not free yet meanwhile (as it does an open file's).
        RetireLocked(loss.chunk, std::move(h->second.local), &released);
      } else {
        released.push_back(std::move(h->second.local));
      }
      held_.erase(h);
    }
    chunk_of_local_.erase(it);
  }
  QueueLeave(loss);
}

void ClusterStore::QueueLeave(const LocalLoss& loss) {
  {
    std::lock_guard lock(house_mu_);
    losses_.push_back(loss);
  }
  house_cv_.notify_all();
}

void ClusterStore::HandleLocalLosses() {
  std::vector<LocalLoss> losses;
  {
    std::lock_guard lock(house_mu_);
    losses.swap(losses_);
  }
  for (const LocalLoss& loss : losses) {
    if (!Leave(loss)) leaves_to_retry_.push_back(loss);
  }
}

void ClusterStore::RetryLeaves() {
  // Only while etcd answers: a leave that failed for want of etcd is tried again once it is
  // back (before, the node stayed on the list of a copy it did not have until the record
  // changed). One that etcd answers but refuses is given up after kLeaveTries.
  if (leaves_to_retry_.empty() || !membership_->etcd_reachable()) return;  // all would fail
  std::vector<LocalLoss> leaves;
  leaves.swap(leaves_to_retry_);
  for (LocalLoss& loss : leaves) {
    if (LeaveHolderList(loss.record, loss.chunk, "its copy went while etcd was away")) {
      spdlog::info("cluster: left the holder list of chunk {} (record {:x}) on a later try",
                   Hex16(loss.chunk), loss.record);
    } else if (++loss.tries < kLeaveTries) {
      leaves_to_retry_.push_back(loss);
    } else {
      spdlog::error("cluster: gave up leaving the holder list of chunk {} (record {:x})",
                    Hex16(loss.chunk), loss.record);
    }
  }
}

bool ClusterStore::Leave(const LocalLoss& loss) {
  if (loss.kind == LossKind::kNotHere) {
    spdlog::warn(
        "cluster: record {:x} lists this node as a holder of chunk {}, which it does not "
        "have: leaving the list, so repair makes another copy",
        loss.record, Hex16(loss.chunk));
    return LeaveHolderList(loss.record, loss.chunk, "not held here");
  }
  const bool corrupt = loss.kind == LossKind::kCorrupt;
  spdlog::warn("cluster: the local copy of chunk {} is gone ({})", Hex16(loss.chunk),
               corrupt ? "corrupt" : "evicted");
  if (loss.record == kInvalidId) return true;  // no record named it yet
  return LeaveHolderList(loss.record, loss.chunk,
                         corrupt ? "its local copy was corrupt" : "evicted here");
}

bool ClusterStore::LeaveHolderList(ObjectId record, uint64_t chunk, const char* why) {
  // Not while etcd is known unreachable: each try would hold the caller a timeout. The caller
  // keeps the leave for RetryLeaves.
  if (!membership_->etcd_reachable()) return false;
  for (int attempt = 0; attempt < 5; ++attempt) {
    auto rec = log_->ReadRecord(record);
    if (!rec.ok()) {
      spdlog::warn("cluster: cannot leave the holder list of {:x} yet: {}", record,
                   rec.status().ToString());
      return false;
    }
    if (!*rec) return true;
    const ClusterLayout* cl = AsClusterLayout((*rec)->layout);
    if (!cl || cl->chunk != chunk || !cl->holders.Contains(options_.node_id)) return true;
    if (Holds(chunk, /*retiring=*/false)) {
      // Repair (or a placement) sent a fresh copy since the loss: leaving now would take a
      // good copy off the list, and this node would drop it when the change came back.
      spdlog::info("cluster: chunk {} is held here again: node {} stays on its holder list",
                   Hex16(chunk), options_.node_id);
      return true;
    }
    HolderList holders = cl->holders;
    holders.Remove(options_.node_id);
    Status st;
    if (holders.empty()) {
      // The last copy is gone: so is the file, on every node (as a single node's eviction).
      st = log_->CompareAndDelete(**rec);
      if (st.ok())
        spdlog::warn("cluster: record {:x} removed: its last copy went ({})", record, why);
    } else {
      ObjectRecord next = **rec;
      next.layout = MakeClusterLayout(cl->size, cl->chunk, holders, cl->checksum);
      st = log_->CompareAndPut(next).status();
    }
    if (st.ok()) return true;
    if (!st.IsConflict()) {
      spdlog::warn("cluster: leaving the holder list of {:x}: {}", record, st.ToString());
      return false;
    }
  }
  return false;  // the record kept changing under this node: the next try reads it again
}

}  // namespace kvfs::cluster
