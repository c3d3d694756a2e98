// Temporary stand-in for LocalEngine::Open while engine/ has no local engine to link (enabled
// with -DKVFS_FS_ENGINE_STUB=ON only). Every open fails with a clear message.
#include "kvfs/local_engine.h"

namespace kvfs {
Result<std::unique_ptr<LocalEngine>> LocalEngine::Open(const EngineOptions&) {
  return Status::Error(ENOSYS, "this build has no local engine (KVFS_FS_ENGINE_STUB)");
}
}  // namespace kvfs
