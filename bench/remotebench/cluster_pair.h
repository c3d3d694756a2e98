// Two in-process cluster nodes on loopback, each a ClusterStore over its own LocalEngine on
// temporary device files, sharing one etcd started for the run: node A publishes the objects
// with replicas = 1 (only the writer holds a chunk), node B reads them, so every byte B reads
// crosses the peer transport (GET over TCP, served from A's engine). Both nodes count towards
// this process's CPU time.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "cluster_store.h"
#include "etcd_server.h"
#include "kvfs/local_engine.h"

namespace remotebench {

class ClusterPair : public kvfs::StoreListener {
 public:
  ~ClusterPair() override;
  // Engines under dir/a and dir/b, each with room for `capacity` bytes of chunks.
  kvfs::Status Start(const std::string& dir, uint64_t capacity);
  // Publishes `data` as /name on node A; B learns the name from the namespace log.
  kvfs::Status Publish(const std::string& name, std::span<const uint8_t> data);
  // Node B's layout for /name (a chunk only A holds), once B has seen it (10 s at most).
  kvfs::Result<kvfs::LayoutRef> LayoutOnB(const std::string& name);
  // Reads [0, out.size()) of the chunk on node B: through the transport from node A.
  kvfs::Result<size_t> ReadOnB(const kvfs::LayoutRef& layout, std::span<uint8_t> out);
  // Unlinks every published name and waits until A's copies are freed.
  kvfs::Status RemoveAll();

  // StoreListener of node B: the records A commits.
  void OnRemoteChanges(const std::vector<kvfs::ObjectRecord>& puts,
                       const std::vector<kvfs::ObjectId>& removes) override;

 private:
  kvfs::testing::EtcdServer etcd_;
  std::unique_ptr<kvfs::cluster::ClusterStore> a_, b_;
  kvfs::StoreListener none_;  // node A's listener: nothing to follow
  std::vector<kvfs::ObjectRecord> published_;
  uint64_t base_used_ = 0;  // A's used bytes before anything was published
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, kvfs::LayoutRef> seen_by_b_;
};

}  // namespace remotebench
