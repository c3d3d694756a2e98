// The server's pool of RDMA-readable buffers behind GETs with kFlagRdmaData. Acquire() hands out
// a registered buffer and a RemoteBuffer grant {token, addr, rkey, length}; the handler fills the
// buffer, the client READs it one-sidedly and sends RDMA_RELEASE{token}, and the buffer returns
// to the pool for the next grant.
//
// A grant the client never releases expires after `grant_ttl`. Its buffer is then deregistered
// and freed, never reused: deregistering invalidates the rkey, so a client READing very late gets
// a remote access error instead of another chunk's bytes.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "rdma_registration.h"
#include "remote_read_exporter.h"
#include "tcp_socket.h"

namespace kvfs {

class RdmaBufferExporter : public RemoteReadExporter {
 public:
  // `max_bytes` bounds the memory of all buffers (granted and pooled).
  RdmaBufferExporter(MemoryRegistrar* registrar, size_t max_bytes,
                     std::chrono::milliseconds grant_ttl = std::chrono::seconds(30));
  ~RdmaBufferExporter() override;

  Result<ExportedBuffer> Acquire(size_t length) override;
  void Release(uint64_t token) override;

  size_t outstanding() const;  // grants not yet released
  size_t pooled() const;       // free buffers kept registered for reuse
  size_t allocated_bytes() const;

 private:
  struct Buffer {
    uint8_t* mem = nullptr;
    size_t capacity = 0;
    MemoryRegion region;
  };
  struct Grant {
    Buffer buffer;
    Clock::time_point expires;
  };
  void Destroy(Buffer& b);  // with mu_ held
  void ReclaimExpired(Clock::time_point now);

  const size_t max_bytes_;
  const std::chrono::milliseconds grant_ttl_;
  RegistrationCache cache_;
  mutable std::mutex mu_;
  std::vector<Buffer> free_;
  std::map<uint64_t, Grant> grants_;
  size_t allocated_ = 0;
  uint64_t next_token_;
};

}  // namespace kvfs
