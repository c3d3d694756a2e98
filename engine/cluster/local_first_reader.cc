#include "local_first_reader.h"

#include <spdlog/spdlog.h>

#include "cluster_store.h"
#include "namespace_keys.h"
#include "peer_reader.h"

namespace kvfs::cluster {

LocalFirstReader::LocalFirstReader(std::unique_ptr<ChunkReader> local, ClusterStore* store,
                                   TaskPool* pool, uint64_t chunk, uint64_t size,
                                   const HolderList& holders)
    : store_(store),
      pool_(pool),
      chunk_(chunk),
      size_(size),
      holders_(holders),
      local_(std::move(local)) {}

ChunkReader* LocalFirstReader::Current() {
  std::lock_guard lock(mu_);
  return remote_ ? remote_.get() : local_.get();
}

void LocalFirstReader::Prefetch(uint64_t offset, size_t len) { Current()->Prefetch(offset, len); }

Result<ReadView> LocalFirstReader::Read(uint64_t offset, size_t len) {
  ChunkReader* reader = Current();
  Result<ReadView> view = reader->Read(offset, len);
  if (view.ok() || reader != local_.get()) return view;
  HolderList others = holders_;
  others.Remove(store_->self());
  if (others.empty()) return view;
  spdlog::warn("cluster: local copy of chunk {} failed at offset {} ({}); reading it from a peer",
               Hex16(chunk_), offset, view.status().ToString());
  {
    std::lock_guard lock(mu_);
    if (!remote_) remote_ = std::make_unique<PeerReader>(store_, pool_, chunk_, size_, others);
    reader = remote_.get();
  }
  return reader->Read(offset, len);
}

}  // namespace kvfs::cluster
