// IoFaultInjector: the one hook every device I/O of the engine passes through, so tests can
// inject EIO, silent corruption or a torn (short) write at a chosen I/O, in the spirit of
// RocksDB's FaultInjectionTestFS. Journal appends pass through it too (IoRequest::journal).
// Production engines run without one.
#pragma once

#include <cstdint>

#include "kvfs/status.h"

namespace kvfs {

struct IoRequest {
  uint16_t device = 0;
  bool write = false;
  uint64_t offset = 0;
  uint8_t* data = nullptr;  // the buffer about to be written / just read
  uint32_t len = 0;
  bool journal = false;  // a journal append (offset: in the journal file; device unused)
  // Set by BeforeIo: the ring parks this I/O where it neither completes nor runs until it is
  // cancelled (a read of a pipe nobody writes), as the kernel has been seen to strand one.
  bool strand = false;
};

class IoFaultInjector {
 public:
  virtual ~IoFaultInjector() = default;
  // Before a device I/O is submitted. A non-ok status fails the I/O without submitting it; a
  // write may also be altered (bytes flipped, `len` shortened to tear it).
  virtual Status BeforeIo(IoRequest& request) = 0;
  // Before the engine hands queued device I/Os to io_uring: a negative errno stands for the
  // kernel refusing them (as io_uring_enter does without memory for a request: -EAGAIN); they
  // stay queued, as the kernel leaves them.
  virtual int BeforeSubmit() { return 0; }
};

}  // namespace kvfs
