// The one way the daemon gets its storage: OpenStore builds the local engine (or the in-memory
// store), and, for a cluster node, the cluster store around it (docs/cluster.md). The fs layer
// sees the result only as a ChunkStore.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kvfs/chunk_store.h"
#include "kvfs/etcd.h"
#include "kvfs/local_engine.h"
#include "kvfs/status.h"
#include "kvfs/transport.h"

namespace kvfs {

// A cluster node: membership and namespace on etcd, chunk data peer to peer.
// The most copies a chunk can have: its holder list is kept inline in every namespace record.
inline constexpr uint32_t kMaxReplicas = 7;

struct ClusterOptions {
  uint16_t node_id = 0;  // 1..65535, unique among the live nodes
  std::string listen_host;
  uint16_t listen_port = 0;
  // The address peers are told to reach this node at (default: the listen address).
  std::string advertise;
  etcd::ClientOptions etcd;            // endpoints and TLS
  std::string etcd_prefix = "/kvfs/";  // every key kvfs writes starts with it
  uint32_t replicas = 2;               // R: copies of every chunk, the writer's included
  SharedSecret secret;                 // peers prove it (challenge-response)
  TransportKind transport = TransportKind::kAuto;
  std::chrono::milliseconds request_timeout{1000};  // one request to one peer
  std::chrono::seconds lease_ttl{5};                // a node silent this long is down
  uint64_t repair_bandwidth = 256ull << 20;         // bytes/s this node copies for repair
  // etcd history kept for watches to catch up from: the lowest live node compacts etcd to the
  // revision it had this long ago (0: never; the operator's etcd compacts). Must outlast a full
  // read of the namespace (a late joiner, a node that fell behind): 22 s at 1M names here.
  std::chrono::seconds etcd_history{300};
  // The writer keeps the first copy (locality: it is likely to read it back); the other R-1 go
  // to the rendezvous ranking of the chunk. False: all R by the ranking.
  bool keep_local_copy = true;
};

struct StoreOptions {
  std::string kind = "local";  // "local" (the engine) or "memory" (tests, no persistence)
  EngineOptions engine;        // kind "local"
  bool cluster_enabled = false;
  ClusterOptions cluster;
};

// Opens the store the daemon serves. A cluster node registers in etcd (EEXIST when another live
// node has its id), listens for peers and loads nothing yet: the namespace streams from
// LoadRecords, and changes of other nodes flow once a listener is set.
Result<std::unique_ptr<ChunkStore>> OpenStore(const StoreOptions& options);

}  // namespace kvfs
