// ClusterListener: how changes that originate on other nodes (a peer's publish, rename or
// unlink) reach the layer above the ClusterStore. The fs implements it (fs/namespace_remote.cc)
// to update its tree and invalidate the kernel's dentries; tests implement it to observe
// replication.
#pragma once

#include "kvfs/object.h"

namespace kvfs::cluster {

class ClusterListener {
 public:
  virtual ~ClusterListener() = default;
  // A record was created or replaced (publish, rename, attribute change) by a peer. Called from
  // a transport worker thread, after the ClusterStore's own state is updated; must not block on
  // the network.
  virtual void OnPut(const ObjectRecord& record) = 0;
  virtual void OnRemove(ObjectId id) = 0;
  // The record's layout object changed but not its content: a local publish became a
  // ClusterLayout, or this node's copy was dropped (evicted) while replicas elsewhere keep it.
  // A holder of `from` should hold `to` instead, so the old local extents can be freed. Called
  // without ClusterStore locks, from the thread that made the change.
  virtual void OnLayoutReplaced(ObjectId /*id*/, const LayoutRef& /*from*/,
                                const LayoutRef& /*to*/) {}
};

}  // namespace kvfs::cluster
