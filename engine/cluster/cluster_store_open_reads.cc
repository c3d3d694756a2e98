// ClusterStore: keeping served the copies that open reads on this node use. A holder serves a
// copy it dropped (unlinked, replaced, evicted) for kRetireGrace after it last served it; a
// reader here that pauses longer asks for it now and then, so its open file stays readable.
#include <spdlog/spdlog.h>

#include "cluster_store.h"

namespace kvfs::cluster {

void ClusterStore::OpenRead::NoteGet() {
  last_get_ns.store(std::chrono::steady_clock::now().time_since_epoch().count(),
                    std::memory_order_relaxed);
}

std::shared_ptr<ClusterStore::OpenRead> ClusterStore::RegisterRead(uint64_t chunk, uint64_t size,
                                                                   const HolderList& holders) {
  auto read = std::make_shared<OpenRead>(chunk, size, holders);
  read->NoteGet();  // its first pieces are asked for at open
  std::lock_guard lock(reads_mu_);
  if (reads_.size() >= 64 && reads_.size() == reads_.capacity())
    std::erase_if(reads_, [](const std::weak_ptr<OpenRead>& r) { return r.expired(); });
  reads_.push_back(read);
  return read;
}

void ClusterStore::KeepReadsAlive() {
  const int64_t due =
      (std::chrono::steady_clock::now() - kKeepReadEvery).time_since_epoch().count();
  std::vector<std::shared_ptr<OpenRead>> idle;
  {
    std::lock_guard lock(reads_mu_);
    std::erase_if(reads_, [&](const std::weak_ptr<OpenRead>& weak) {
      std::shared_ptr<OpenRead> read = weak.lock();
      if (!read) return true;
      // A bounded round (the next ones are due a second later): the GETs share the readers'
      // pool with their pieces.
      if (read->last_get_ns.load(std::memory_order_relaxed) <= due &&
          idle.size() < kKeepReadsPerRound)
        idle.push_back(read);
      return false;
    });
  }
  for (const std::shared_ptr<OpenRead>& read : idle) {
    read->NoteGet();
    // Every holder it may read from: a failover finds its copy kept too. A GET past the end
    // moves no bytes and is no access for the eviction policy (that is the read's first GET).
    // Not a suspect node (ReadOrder leaves those out): it would hold a pool thread for a
    // request timeout.
    for (NodeId node : ReadOrder(read->holders)) {
      FetchPosted();
      FetchPool().Post([this, read, node] {
        if (PeerClient* client = Client(node)) {
          wire::GetRequest req;
          req.key = ChunkName(read->chunk);
          req.offset = read->size;
          CallOptions call;
          call.timeout = request_timeout();
          uint8_t none = 0;
          auto r = client->Get(req, std::span<uint8_t>(&none, 0), call);
          if (!r.ok())
            spdlog::debug("cluster: keep-alive of chunk {} at node {}: {}", Hex16(read->chunk),
                          node, r.status().ToString());
        }
        FetchDone();
      });
    }
  }
}

}  // namespace kvfs::cluster
