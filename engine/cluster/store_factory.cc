// OpenStore (kvfs/store.h): the engine or the in-memory store, wrapped in the cluster store for a
// cluster node.
#include "cluster_store.h"
#include "kvfs/store.h"
#include "memory_store.h"

namespace kvfs {

Result<std::unique_ptr<ChunkStore>> OpenStore(const StoreOptions& options) {
  std::unique_ptr<ChunkStore> local;
  if (options.kind == "memory") {
    local = std::make_unique<MemoryStore>();
  } else if (options.kind == "local") {
    KVFS_ASSIGN_OR_RETURN(auto engine, LocalEngine::Open(options.engine));
    local = std::move(engine);
  } else {
    return Status::Invalid("unknown store kind '" + options.kind + "'");
  }
  if (!options.cluster_enabled) return local;
  ClusterOptions c = options.cluster;
  KVFS_ASSIGN_OR_RETURN(auto cluster, cluster::ClusterStore::Open(std::move(local), std::move(c)));
  return std::unique_ptr<ChunkStore>(std::move(cluster));
}

}  // namespace kvfs
