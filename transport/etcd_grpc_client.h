// etcd's native v3 API over gRPC (kvfs/etcd.h, ClientOptions::Api::kGrpc, the default): the
// same calls as the JSON gateway client, without the gateway's JSON and its second hop inside
// etcd, which cost about half of etcd's CPU per namespace change (docs/cluster.md).
#pragma once

#include <memory>

#include "kvfs/etcd.h"

namespace kvfs::etcd {

// The options are checked by MakeClient; connects lazily.
std::unique_ptr<Client> MakeGrpcClient(const ClientOptions& options);

}  // namespace kvfs::etcd
