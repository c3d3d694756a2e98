#include "op_failure_log.h"

namespace kvfs::fs {

LogLimiter& OpFailureLog() {
  static LogLimiter limiter(20, std::chrono::seconds(10));
  return limiter;
}

}  // namespace kvfs::fs
