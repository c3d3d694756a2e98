// etcd's errors (a gRPC status code and etcd's message, whichever API carried them) as the
// errno values of kvfs/etcd.h. Shared by the gRPC client and the JSON gateway client.
#pragma once

#include <cstdint>
#include <string>

namespace kvfs::etcd {

int GrpcToErrno(int64_t code, const std::string& message);

}  // namespace kvfs::etcd
