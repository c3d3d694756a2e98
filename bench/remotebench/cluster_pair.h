// Two in-process cluster nodes on loopback, each a ClusterStore over its own LocalEngine on
// temporary device files: node A publishes the objects with replicas = 0 (only the writer holds
// a chunk), node B reads them, so every byte B reads crosses the peer transport (GET over TCP,
// served from A's engine). Both nodes count towards this process's CPU time.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "cluster_store.h"
#include "kvfs/local_engine.h"

namespace remotebench {

class ClusterPair {
 public:
  ~ClusterPair();
  // Engines under dir/a and dir/b, each with room for `capacity` bytes of chunks.
  kvfs::Status Start(const std::string& dir, uint64_t capacity);
  // Publishes `data` as /name on node A; B learns the name from A's namespace push.
  kvfs::Status Publish(const std::string& name, std::span<const uint8_t> data);
  // Node B's layout for /name (a ClusterLayout whose chunk only A holds).
  kvfs::Result<kvfs::LayoutRef> LayoutOnB(const std::string& name) const;
  // Reads [0, out.size()) of the chunk on node B: through the transport from node A.
  kvfs::Result<size_t> ReadOnB(const kvfs::LayoutRef& layout, std::span<uint8_t> out);
  // Unlinks every published name (A's copies go with them).
  kvfs::Status RemoveAll();
  kvfs::cluster::ClusterStore& b() { return *b_; }

 private:
  std::unique_ptr<kvfs::ChunkStore> engine_a_, engine_b_;
  std::unique_ptr<kvfs::cluster::ClusterStore> a_, b_;
  std::vector<kvfs::ObjectId> published_;
};

}  // namespace remotebench
