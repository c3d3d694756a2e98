// Placeholder so dependents link while the real engine lands.
#include "kvfs/local_engine.h"

namespace kvfs {

Result<std::unique_ptr<LocalEngine>> LocalEngine::Open(const EngineOptions&) {
  return Status::Error(ENOSYS, "local engine not built yet");
}

}  // namespace kvfs
