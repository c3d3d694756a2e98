#include "etcd_errors.h"

#include <cerrno>

namespace kvfs::etcd {

int GrpcToErrno(int64_t code, const std::string& message) {
  if (message.find("compacted") != std::string::npos) return ESTALE;
  if (message.find("lease not found") != std::string::npos) return ENOENT;
  if (message.find("too many operations") != std::string::npos) return E2BIG;
  if (message.find("space exceeded") != std::string::npos) return ENOSPC;
  switch (code) {
    case 3:  // INVALID_ARGUMENT
      return EINVAL;
    case 4:   // DEADLINE_EXCEEDED
    case 14:  // UNAVAILABLE (no leader, request timed out)
      return ETIMEDOUT;
    case 5:  // NOT_FOUND
      return ENOENT;
    case 7:   // PERMISSION_DENIED
    case 16:  // UNAUTHENTICATED
      return EACCES;
    case 8:  // RESOURCE_EXHAUSTED
      return ENOSPC;
    case 11:  // OUT_OF_RANGE
      return ESTALE;
  }
  return EIO;
}

}  // namespace kvfs::etcd
