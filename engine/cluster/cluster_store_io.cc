// ClusterStore, the data side: publishing a batch (placing each new chunk on its holders before
// the transaction), writers, and reads through the local copy or the holders. The peers
// themselves (clients, counters, which answer) are in cluster_store_peers.cc.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstring>
#include <future>

#include "cluster_store.h"
#include "local_first_reader.h"
#include "peer_reader.h"
#include "remote_base_writer.h"
#include "repair.h"
#include "task_pool.h"

namespace kvfs::cluster {
namespace {

// Bytes asked of a PeerReader at a time when a whole chunk is copied or checked: its pieces
// ahead of that (PeerReader::kAhead) keep the GETs flowing.
constexpr size_t kCopyStep = 8u << 20;

// A fresh local version: an engine layout (not yet a chunk of the cluster).
bool IsFresh(const ObjectRecord& rec) {
  return rec.type == ObjectType::kFile && rec.layout && !AsClusterLayout(rec.layout);
}

Status EtcdUnreachable() {
  return Status::Error(EROFS,
                       "etcd is unreachable: namespace changes are refused until it is back");
}

}  // namespace

TaskPool& ClusterStore::FetchPool() {
  static TaskPool* pool = new TaskPool(8);  // shared by every reader of the process
  return *pool;
}

Status ClusterStore::Apply(const MetaBatch& batch) {
  KVFS_ASSIGN_OR_RETURN(uint64_t token, Submit(batch));
  return AwaitCommitted(token).status();
}

Status ClusterStore::CheckWritable() {
  if (membership_->etcd_reachable()) return Status::Ok();
  refused_up_front_.fetch_add(1, std::memory_order_relaxed);
  return EtcdUnreachable();
}

Result<uint64_t> ClusterStore::Submit(const MetaBatch& in) {
  if (in.refused_up_front) {
    log_->NoteFailed(in);  // for its reset; CheckWritable counted the refusal
    return EtcdUnreachable();
  }
  if (!membership_->etcd_reachable()) {
    log_->NoteRefused(in);
    return EtcdUnreachable();
  }
  KVFS_RETURN_IF_ERROR(log_->ResetIfUncertain(in));
  MetaBatch batch = in;
  auto replaced = std::make_shared<std::vector<Committed::NewLayout>>();
  std::vector<PendingPlacement> placements;
  {
    std::lock_guard lock(mu_);
    for (size_t i = 0; i < batch.puts.size(); ++i) {
      ObjectRecord& rec = batch.puts[i];
      if (!IsFresh(rec)) continue;
      // A version this node published a moment ago, still carried by a batch built before the
      // fs heard back: that version, not a new one.
      if (LayoutRef cluster = published_.Find(rec.layout)) {
        replaced->push_back({rec.id, rec.layout, cluster});
        rec.layout = std::move(cluster);
      } else if (rec.layout->size == 0) {
        replaced->push_back({rec.id, rec.layout, nullptr});
        rec.layout = nullptr;  // an empty file has no chunk
      } else if (auto it = placing_now_.find(rec.layout.get()); it != placing_now_.end()) {
        placements.push_back({i, nullptr, it->second});  // being published: wait for it
      } else {
        auto mine = std::make_shared<std::promise<LayoutRef>>();
        placing_now_.emplace(rec.layout.get(), mine->get_future().share());
        placements.push_back({i, std::move(mine), {}});
      }
    }
  }
  Result<uint64_t> token = Status::Ok();
  std::shared_future<Result<MetaBatch>> placed;  // only batches with chunks to place
  if (placements.empty()) {
    token = log_->Submit(std::move(batch));
  } else {
    // Placing the chunks (local hold, PUTs to the other holders) runs while earlier batches
    // commit; the committer takes this one in its turn, once placed. The pool runs tasks in
    // order of arrival, so a placement a batch waits for has started before it.
    placed =
        placing_
            ->Async([this, b = std::move(batch), p = std::move(placements), replaced]() mutable {
              return Prepare(std::move(b), std::move(p), replaced);
            })
            .share();
    token = log_->Submit(placed);
  }
  if (!token.ok()) {
    if (token.status().err() == EROFS) log_->NoteFailed(in);  // etcd went away just now
    return token;
  }
  MetaBatch touched;
  touched.seq = in.seq;
  touched.names = in.names;
  touched.removes = in.removes;
  for (const ObjectRecord& put : in.puts) touched.removes.push_back(put.id);
  std::lock_guard lock(mu_);
  pending_[*token] = PendingCommit{std::move(replaced), in.puts.size(), in.removes.size(),
                                   std::move(touched), std::move(placed)};
  return token;
}

Result<MetaBatch> ClusterStore::Prepare(MetaBatch batch, std::vector<PendingPlacement> placements,
                                        std::shared_ptr<std::vector<Committed::NewLayout>> out) {
  Status failed;
  for (const PendingPlacement& p : placements) {
    ObjectRecord& rec = batch.puts[p.put];
    if (!failed.ok()) {
      // The batch is refused; its own placements still answer the batches waiting on them
      // (which then place the layout themselves).
      if (p.mine) AnswerPlacement(rec.layout, p, nullptr);
      continue;
    }
    Result<LayoutRef> cluster = PlaceFor(rec.layout, p);
    if (!cluster.ok()) {
      failed = cluster.status();
      continue;
    }
    out->push_back({rec.id, rec.layout, *cluster});
    rec.layout = std::move(*cluster);
  }
  if (!failed.ok()) return failed;
  return batch;
}

Result<LayoutRef> ClusterStore::PlaceFor(const LayoutRef& fresh,
                                         const PendingPlacement& placement) {
  if (!placement.mine) {
    // The version an earlier batch is placing: its chunk, or one of this batch's own when that
    // placement failed.
    if (LayoutRef theirs = placement.theirs.get()) return theirs;
    return PlaceChunk(fresh);
  }
  Result<LayoutRef> cluster = PlaceChunk(fresh);
  AnswerPlacement(fresh, placement, cluster.ok() ? *cluster : nullptr);
  return cluster;
}

void ClusterStore::AnswerPlacement(const LayoutRef& fresh, const PendingPlacement& placement,
                                   LayoutRef cluster) {
  std::lock_guard lock(mu_);
  if (cluster) published_.Add(fresh, cluster);
  placing_now_.erase(fresh.get());
  placement.mine->set_value(std::move(cluster));
}

Result<LayoutRef> ClusterStore::PlaceChunk(const LayoutRef& fresh) {
  const uint64_t chunk = NewId();
  KVFS_RETURN_IF_ERROR(Hold(chunk, fresh, 0));
  const NodeId self = options_.node_id;
  const std::vector<NodeId> ranked = CopyOrder(chunk, membership_->PlacementTargets());
  const bool local_first = options_.keep_local_copy;
  size_t wanted = options_.replicas;
  HolderList holders;
  if (local_first) {
    holders.Add(self);
    --wanted;
  }
  // The ranked nodes in order, each PUT in parallel; a failure moves on to the next candidate.
  // CopyOrder leaves out a node that placement may not use. A node that timed out a moment ago
  // (frozen, cut off, before its lease runs out) is left out until a ping finds it again: one
  // publish paid that timeout, the next ones do not, even when the others are too few for R copies
  // (repair adds the missing ones once it answers; tried, it cost every publish a timeout for as
  // long as it was cut off). So is one whose ping failed (its daemon died before its lease ran out:
  // every publish that ranked it tried a connection, was refused and logged it, until the lease
  // ended).
  std::vector<NodeId> candidates;
  for (NodeId n : ranked) {
    if (n == self) {
      if (!local_first && wanted > 0 && holders.size() < options_.replicas) {
        holders.Add(self);
        --wanted;
      }
      continue;
    }
    candidates.push_back(n);
  }
  size_t next = 0;
  std::vector<NodeId> placed;
  while (placed.size() < wanted && next < candidates.size()) {
    // One round: a PUT to each node still wanted, all but one on the push pool, the last on
    // this thread (with R=2, the usual case, no hand-off at all).
    std::vector<std::pair<NodeId, std::future<Status>>> puts;
    while (puts.size() + placed.size() + 1 < wanted && next + 1 < candidates.size()) {
      NodeId n = candidates[next++];
      puts.emplace_back(
          n, pushing_->Async([this, chunk, fresh, n] { return PushChunk(chunk, fresh, n); }));
    }
    const NodeId inline_node = candidates[next++];
    std::vector<std::pair<NodeId, Status>> results;
    results.emplace_back(inline_node, PushChunk(chunk, fresh, inline_node));
    for (auto& [n, f] : puts) results.emplace_back(n, f.get());
    for (const auto& [n, st] : results) {
      if (st.ok()) {
        placed.push_back(n);
      } else {
        spdlog::warn("cluster: placing chunk {} on node {} failed: {}", Hex16(chunk), n,
                     st.ToString());
      }
    }
  }
  for (NodeId n : placed) holders.Add(n);
  if (!holders.Contains(self)) {
    if (holders.empty()) {
      holders.Add(self);  // nowhere else to put it: the writer keeps it, repair spreads it later
    } else {
      DropHolding(chunk, "placed on the ranked nodes");
    }
  }
  if (holders.size() < options_.replicas) NotePlacedShort(chunk, holders.size());
  {
    std::lock_guard lock(mu_);
    auto it = held_.find(chunk);
    if (it != held_.end()) it->second.holders = holders;
  }
  KVFS_ASSIGN_OR_RETURN(uint64_t checksum, local_->ContentChecksum(fresh));
  return MakeClusterLayout(fresh->size, chunk, holders, checksum);
}

Result<Committed> ClusterStore::AwaitCommitted(uint64_t token) {
  PendingCommit pending;
  {
    std::lock_guard lock(mu_);
    auto it = pending_.find(token);
    if (it != pending_.end()) {
      pending = std::move(it->second);
      pending_.erase(it);
    }
  }
  Result<NamespaceLog::Done> done = log_->Await(token);
  if (!done.ok()) {
    // The fs shows the change already. A conflict or EEXIST has reset what it touched to what
    // etcd holds, and EROFS from etcd will once etcd answers; any other failure (the placement
    // of its chunks, this node's store turned read-only, a transaction etcd rejected) is reset
    // the same way. (Before, a placement refused by a read-only store, EROFS too, was never
    // reset: the node showed the failed files' names, which no other node had, until restart.)
    const Status& st = done.status();
    const bool placement =
        pending.placed.valid() &&
        pending.placed.wait_for(std::chrono::seconds(0)) == std::future_status::ready &&
        !pending.placed.get().ok();
    if (st.err() != ESHUTDOWN &&
        (placement || (!st.IsConflict() && st.err() != EEXIST && st.err() != EROFS)))
      log_->NoteFailed(pending.touched);
    return st;
  }
  MetaBatch& b = done->batch;
  for (ObjectRecord& rec : b.puts) rec.revision = static_cast<uint64_t>(done->revision);
  NoteRecords(b.puts, b.removes);
  // Records of other nodes whose names this batch took over (last writer wins): the fs hears
  // of them like of any other node's change, since the watch skips this node's commits.
  if (b.puts.size() > pending.puts || b.removes.size() > pending.removes) {
    std::vector<ObjectRecord> puts(
        b.puts.begin() + static_cast<ptrdiff_t>(std::min(pending.puts, b.puts.size())),
        b.puts.end());
    std::vector<ObjectId> removes(
        b.removes.begin() + static_cast<ptrdiff_t>(std::min(pending.removes, b.removes.size())),
        b.removes.end());
    if (StoreListener* l = listener_.load()) l->OnRemoteChanges(puts, removes);
  }
  Committed c;
  c.revision = static_cast<uint64_t>(done->revision);
  if (pending.replaced) c.layouts = std::move(*pending.replaced);
  return c;
}

Result<std::unique_ptr<ChunkWriter>> ClusterStore::NewWriter(LayoutRef base) {
  const ClusterLayout* cl = AsClusterLayout(base);
  if (!cl) return local_->NewWriter(std::move(base));
  if (LayoutRef held = HeldLayout(cl->chunk)) return local_->NewWriter(std::move(held));
  // The base lives elsewhere: copied here by the first operation that needs its bytes.
  const uint64_t size = cl->size;
  return std::unique_ptr<ChunkWriter>(std::make_unique<RemoteBaseWriter>(
      size, [this, base = std::move(base)] { return CopyRemoteBase(base); },
      [this] { return local_->NewWriter(nullptr); }));
}

Result<std::unique_ptr<ChunkWriter>> ClusterStore::CopyRemoteBase(const LayoutRef& base) {
  const ClusterLayout* cl = AsClusterLayout(base);
  if (LayoutRef held = HeldLayout(cl->chunk)) return local_->NewWriter(std::move(held));
  KVFS_ASSIGN_OR_RETURN(std::unique_ptr<ChunkWriter> copy, local_->NewWriter(nullptr));
  KVFS_RETURN_IF_ERROR(ReadRemote(*cl, 0, cl->size, [&](uint64_t off, const iovec& span) {
    return copy->Write(off, span.iov_base, span.iov_len);
  }));
  KVFS_ASSIGN_OR_RETURN(LayoutRef copied, copy->Finish());
  return local_->NewWriter(std::move(copied));
}

Result<size_t> ClusterStore::Read(const LayoutRef& layout, uint64_t offset, void* out, size_t len) {
  const ClusterLayout* cl = AsClusterLayout(layout);
  if (!cl) return local_->Read(layout, offset, out, len);
  if (LayoutRef held = HeldLayout(cl->chunk)) return local_->Read(held, offset, out, len);
  if (offset >= cl->size) return size_t{0};
  len = static_cast<size_t>(std::min<uint64_t>(len, cl->size - offset));
  KVFS_RETURN_IF_ERROR(ReadRemote(*cl, offset, len, [&](uint64_t off, const iovec& span) {
    std::memcpy(static_cast<uint8_t*>(out) + (off - offset), span.iov_base, span.iov_len);
    return Status::Ok();
  }));
  return len;
}

Result<uint64_t> ClusterStore::ContentChecksum(const LayoutRef& layout) const {
  const ClusterLayout* cl = AsClusterLayout(layout);
  if (!cl) return local_->ContentChecksum(layout);
  if (cl->checksum == 0) return Status::Error(ENODATA, "no checksum recorded for this version");
  return cl->checksum;
}

Result<std::unique_ptr<ChunkReader>> ClusterStore::NewReader(LayoutRef layout) {
  const ClusterLayout* cl = AsClusterLayout(layout);
  if (!cl) return local_->NewReader(std::move(layout));
  if (LayoutRef held = HeldLayout(cl->chunk)) {
    KVFS_ASSIGN_OR_RETURN(std::unique_ptr<ChunkReader> local, local_->NewReader(std::move(held)));
    return std::unique_ptr<ChunkReader>(std::make_unique<LocalFirstReader>(
        std::move(local), this, &FetchPool(), cl->chunk, cl->size, cl->holders));
  }
  return std::unique_ptr<ChunkReader>(
      std::make_unique<PeerReader>(this, &FetchPool(), cl->chunk, cl->size, cl->holders));
}

Status UnreadableChunk(uint64_t chunk, const Status& last) {
  if (last.IsCorruption()) return last;
  // The application sees EIO whatever the last peer said (refused, timed out, not held).
  return Status::IoError("chunk " + Hex16(chunk) + ": no holder could serve it (" +
                         last.ToString() + ")");
}

Status ClusterStore::ReadRemote(const ClusterLayout& layout, uint64_t offset, uint64_t len,
                                const std::function<Status(uint64_t, const iovec&)>& take) {
  // Through the reader the fs uses: pieces fetched ahead, a slow holder hedged, a failed one
  // left for the next.
  PeerReader reader(this, &FetchPool(), layout.chunk, layout.size, layout.holders);
  const uint64_t end = offset + len;
  for (uint64_t off = offset; off < end;) {
    KVFS_ASSIGN_OR_RETURN(
        ReadView view,
        reader.Read(off, static_cast<size_t>(std::min<uint64_t>(end - off, kCopyStep))));
    if (view.size == 0) {
      return Status::IoError("chunk " + Hex16(layout.chunk) + " ends at " + std::to_string(off) +
                             ", before the " + std::to_string(layout.size) + " bytes it has");
    }
    for (const iovec& span : view.spans) {
      KVFS_RETURN_IF_ERROR(take(off, span));
      off += span.iov_len;
    }
  }
  return Status::Ok();
}

Status ClusterStore::Verify(const LayoutRef& layout) {
  const ClusterLayout* cl = AsClusterLayout(layout);
  if (!cl) return local_->Verify(layout);
  if (LayoutRef held = HeldLayout(cl->chunk)) return local_->Verify(held);
  // No local copy: every byte from a holder, each piece checked against its checksum.
  return ReadRemote(*cl, 0, cl->size, [](uint64_t, const iovec&) { return Status::Ok(); });
}

void ClusterStore::Touch(ObjectId id, uint64_t stream) {
  ObjectId local_id = kInvalidId;
  {
    std::lock_guard lock(mu_);
    auto it = chunk_of_record_.find(id);
    if (it == chunk_of_record_.end()) return;
    auto h = held_.find(it->second);
    if (h != held_.end()) local_id = h->second.local_id;
  }
  if (local_id != kInvalidId) local_->Touch(local_id, stream);
}

Status ClusterStore::Evict(ObjectId id) {
  ObjectId local_id = kInvalidId;
  {
    std::lock_guard lock(mu_);
    auto it = chunk_of_record_.find(id);
    if (it != chunk_of_record_.end()) {
      auto h = held_.find(it->second);
      if (h != held_.end()) local_id = h->second.local_id;
    }
  }
  if (local_id == kInvalidId) return Status::Invalid("this node holds no copy of the file");
  KVFS_RETURN_IF_ERROR(local_->Evict(local_id));
  HandleLocalLosses();  // leave the holder list now, not at the next housekeeping round
  return Status::Ok();
}

void ClusterStore::NotePlacedShort(uint64_t chunk, size_t copies) {
  const uint64_t count = placed_short_.fetch_add(1) + 1;
  const int64_t now = std::chrono::duration_cast<std::chrono::nanoseconds>(
                          std::chrono::steady_clock::now().time_since_epoch())
                          .count();
  int64_t last = placed_short_logged_ns_.load();
  if (last != 0 && now - last < 1'000'000'000) return;
  if (!placed_short_logged_ns_.compare_exchange_strong(last, now)) return;  // another logs it
  const uint64_t since = count - placed_short_logged_.exchange(count);
  spdlog::warn("cluster: chunk {} has {} of {} copies (repair will add the rest){}", Hex16(chunk),
               copies, options_.replicas,
               since > 1 ? fmt::format("; {} chunks placed short since the last such line", since)
                         : std::string());
}

Status ClusterStore::PushChunk(uint64_t chunk, const LayoutRef& local, NodeId node) {
  PeerClient* client = Client(node);
  if (client == nullptr)
    return Status::Error(EHOSTUNREACH, "node " + std::to_string(node) + " is not known");
  const uint64_t size = local->size;
  if (size > wire::kDefaultMaxFrame - (1u << 20))
    return Status::Error(EFBIG, "chunk too large for one PUT");
  // Through a reader: its buffers and ring come from the engine's pool, where Read would set
  // up a ring with registered buffers for each new thread.
  KVFS_ASSIGN_OR_RETURN(std::unique_ptr<ChunkReader> reader, local_->NewReader(local));
  auto bytes = std::make_unique_for_overwrite<uint8_t[]>(size);  // every byte is read into
  for (uint64_t done = 0; done < size;) {
    KVFS_ASSIGN_OR_RETURN(ReadView view, reader->Read(done, size - done));
    if (view.size == 0 || view.size > size - done)
      return Status::IoError("short or long read of a local chunk");
    for (const iovec& span : view.spans) {
      std::memcpy(bytes.get() + done, span.iov_base, span.iov_len);
      done += span.iov_len;
    }
  }
  wire::PutRequest req;
  req.key = ChunkName(chunk);
  req.mode = 0600;
  CallOptions call;
  // Big chunks get time for their bytes (at 100 MiB/s at least) beyond the request deadline.
  call.timeout = options_.request_timeout + std::chrono::milliseconds(size / (100u << 10));
  if (PeerCounters* c = CountersFor(node)) ++c->puts_sent;
  auto r = client->Put(req, std::span<const uint8_t>(bytes.get(), size), call);
  if (!r.ok()) NoteFailure(node, r.status());
  return r.status();
}

}  // namespace kvfs::cluster
