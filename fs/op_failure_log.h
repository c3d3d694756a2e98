// The limit on warnings about single operations that failed: a read, a write, a publish, a
// change the store refused. Each call that fails makes one, and a connector retrying against
// a full, read-only store makes thousands a second, into a log that may sit on the very disk
// that is full. At most 20 such lines per 10 s over the whole daemon; the next one let through
// says how many were left out.
#pragma once

#include "kvfs/log_limiter.h"

namespace kvfs::fs {

LogLimiter& OpFailureLog();

}  // namespace kvfs::fs
