// ClusterListener: how changes that originate on other nodes (a peer's publish, rename or
// unlink) reach the layer above the ClusterStore. The fs will implement it to update its tree
// and invalidate the kernel's dentries; tests implement it to observe replication.
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
};

}  // namespace kvfs::cluster
