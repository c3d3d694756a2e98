// ClusterLayout: the Layout of a file in a ClusterStore. The fs layer holds it like any other
// LayoutRef; the ClusterStore reads it from the local copy when this node holds one, else from
// the replicas in ranking order.
#pragma once

#include <string>
#include <vector>

#include "kvfs/object.h"
#include "rendezvous_placement.h"

namespace kvfs::cluster {

struct ClusterLayout : Layout {
  ClusterLayout();
  ClusterLayout(const ClusterLayout& other);
  ClusterLayout& operator=(const ClusterLayout& other) = default;
  ~ClusterLayout();

  std::string chunk_key;         // fixed at publish: origin node + object id
  std::vector<NodeId> replicas;  // nodes holding the chunk, in ranking order
  LayoutRef local;               // the local store's copy, when this node had it at the time
};

// The ClusterLayout behind `layout`, or null for any other layout (the local store's). Layout
// has no virtual function (object.h belongs to the engine), so dynamic_cast cannot tell them
// apart: every live ClusterLayout registers its address instead, and leaves before its memory
// can be reused.
const ClusterLayout* AsClusterLayout(const Layout* layout);

// "c<origin node, 4 hex>-<publish id, 16 hex>": a valid file name, so the local store can keep
// the chunk as a record named by its key.
std::string ChunkKey(NodeId origin, ObjectId id);

}  // namespace kvfs::cluster
