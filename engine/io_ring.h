// IoRing: one io_uring per thread per engine instance, with the engine's device fds registered
// as fixed files and a pool of 4 KiB-aligned bounce buffers, each allocated when an op first
// needs it. Rings are thread_local and keyed by the engine's generation (unique per Open), so a
// ring never serves an engine other than the one whose fds it registered; rings of closed
// engines are dropped the next time their thread asks for a ring, and at thread exit.
//
// Plain rings (DEFER_TASKRUN bought nothing measured). Every prepared SQE is submitted
// before anything waits for it (the kernel may take fewer than offered), and a ring the kernel
// keeps refusing is broken: never submitted to again, replaced by a new one. An I/O not done
// after 5 s is asked back (ASYNC_CANCEL); one the kernel gives back is done synchronously.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "io_fault_injector.h"
#include "kvfs/status.h"

struct io_uring_sqe;

namespace kvfs {

struct RingConfig {
  uint64_t generation = 0;
  std::vector<int> fds;       // index = device number
  uint32_t depth = 16;        // submission queue entries and buffers in the pool
  uint32_t buffer_bytes = 0;  // each pool buffer (segment size rounded up to 4 KiB)
  IoFaultInjector* faults = nullptr;
};

// One I/O of a pipeline. `data` null: the ring's pool buffer is used.
struct RingOp {
  uint16_t device = 0;
  bool write = false;
  uint64_t offset = 0;
  uint32_t len = 0;
  uint8_t* data = nullptr;
};

class IoRing {
 public:
  ~IoRing();
  IoRing(const IoRing&) = delete;
  IoRing& operator=(const IoRing&) = delete;

  // The calling thread's ring for this engine generation, created on first use.
  static Result<IoRing*> ForThread(const RingConfig& config);
  // Marks a generation closed: rings keyed by it are never handed out again and are freed by
  // their threads (this thread's at once).
  static void Retire(uint64_t generation);

  // Runs `count` ops keeping up to `depth` in flight. prepare(i, op) fills op i (op.data left
  // null: it reads into a pool buffer). complete(i, op, buffer) runs when op i finished in
  // full; `buffer` is op.data or the pool buffer, reused after it returns. The first error
  // stops new submissions; in-flight ops are drained and the error is returned.
  Status Pipeline(size_t count, const std::function<void(size_t, RingOp&)>& prepare,
                  const std::function<Status(size_t, const RingOp&, uint8_t*)>& complete);

  // A ring owned by one object rather than one thread (a writer that FUSE calls from several
  // threads, one at a time): no buffer pool. Used with Submit/Reap.
  static Result<std::unique_ptr<IoRing>> CreateOwned(const RingConfig& config);
  // Submits one op (op.data required) without waiting; `token` comes back from Reap.
  Status Submit(const RingOp& op, uint64_t token);
  // Reaps completions, waiting until at least `min_complete` have come (0: only those ready).
  void Reap(size_t min_complete, const std::function<void(uint64_t, Status)>& done);
  size_t in_flight() const { return async_ops_.size(); }
  // The kernel refused its SQEs: some may still sit in the submission queue, so nothing may be
  // submitted to this ring again (ops it already took still complete and are reaped).
  bool broken() const { return broken_; }

 private:
  IoRing() = default;
  Status Init(const RingConfig& config, bool per_thread);
  Status Finish(const RingOp& op, uint8_t* buf, int res);
  void PrepOp(io_uring_sqe* sqe, const RingOp& op, uint8_t* buf, bool strand);
  // Submits the `prepared` SQEs queued since the last submit; `*taken` says how many the
  // kernel took (all of them unless it kept refusing: then the ring is broken).
  Status SubmitPrepared(unsigned prepared, unsigned* taken);

  struct Impl;
  std::unique_ptr<Impl> impl_;
  RingConfig config_;
  bool broken_ = false;
  std::vector<std::pair<uint64_t, RingOp>> async_ops_;  // Submit()ted, not yet reaped
  std::vector<std::pair<uint64_t, Status>> reaped_;     // reaped by Submit, not yet reported
};

}  // namespace kvfs
