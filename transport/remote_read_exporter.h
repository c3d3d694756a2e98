// The server's side of RDMA data movement, as the peer server sees it: a source of buffers that
// a connected RDMA peer can READ one-sidedly. A GET with kFlagRdmaData is served by filling such
// a buffer and answering with its RemoteBuffer descriptor (addr, rkey, length, token) instead of
// inline bytes; the buffer stays valid until RDMA_RELEASE{token} or the grant expires.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "kvfs/status.h"
#include "kvfs/wire.h"

namespace kvfs {

struct ExportedBuffer {
  std::span<uint8_t> bytes;   // where the handler writes the chunk range
  wire::RemoteBuffer remote;  // what the client needs to READ it (length set by the caller)
};

class RemoteReadExporter {
 public:
  virtual ~RemoteReadExporter() = default;
  virtual Result<ExportedBuffer> Acquire(size_t length) = 0;
  // The client is done with the buffer (or gave up). Unknown tokens are ignored.
  virtual void Release(uint64_t token) = 0;
};

}  // namespace kvfs
