// LocalFirstReader: the ChunkReader of a chunk this node holds. It reads the local copy through
// the engine's read-ahead reader and, should that copy fail (bad bytes, which the engine drops,
// or a failed device read), moves for good to a PeerReader over the other holders, so that one
// bad replica never reaches the application while another one is good.
#pragma once

#include <memory>
#include <mutex>

#include "cluster_layout.h"
#include "kvfs/chunk_reader.h"

namespace kvfs::cluster {

class ClusterStore;
class TaskPool;

class LocalFirstReader final : public ChunkReader {
 public:
  LocalFirstReader(std::unique_ptr<ChunkReader> local, ClusterStore* store, TaskPool* pool,
                   uint64_t chunk, uint64_t size, const HolderList& holders);
  Result<ReadView> Read(uint64_t offset, size_t len) override;
  void Prefetch(uint64_t offset, size_t len) override;

 private:
  ChunkReader* Current();

  ClusterStore* const store_;
  TaskPool* const pool_;
  const uint64_t chunk_;
  const uint64_t size_;
  const HolderList holders_;
  std::mutex mu_;
  // Readers are only ever added: a view another thread is reading from stays valid.
  std::unique_ptr<ChunkReader> local_;
  std::unique_ptr<ChunkReader> remote_;  // set once the local copy failed
};

}  // namespace kvfs::cluster
