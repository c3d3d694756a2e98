#include "io_ring.h"

#include <fcntl.h>
#include <liburing.h>
#include <spdlog/spdlog.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>

namespace kvfs {
namespace {

std::mutex g_retired_mu;
std::unordered_set<uint64_t> g_retired;  // generations are never reused, so this stays small

bool IsRetired(uint64_t generation) {
  std::lock_guard lock(g_retired_mu);
  return g_retired.count(generation) != 0;
}

struct ThreadRings {
  std::unordered_map<uint64_t, std::unique_ptr<IoRing>> rings;
};
thread_local ThreadRings t_rings;

// How often a submit the kernel refuses (EAGAIN: no memory for a request) is tried again, with
// 1, 2, 4 ... 64 ms between tries: about half a second in all.
constexpr int kSubmitTries = 10;
// A wait for a completion looks again this often, and warns once it has waited this long.
constexpr long kWaitSliceSeconds = 1;
constexpr int kSlowIoWarnSeconds = 30;
// A device I/O not done after this long is asked back from the kernel (ASYNC_CANCEL), and
// again as often while the wait goes on: the kernel has been seen to leave an O_DIRECT write
// it had taken neither done nor running (docs/engine.md). One it gives back ends ECANCELED and
// Finish does it synchronously; one already on the device is left to finish.
constexpr int kStuckIoSeconds = 5;
// user_data of those cancel requests: never a slot index or a Submit token.
constexpr uint64_t kCancelToken = ~uint64_t{0};

void AskBackStuckIo(io_uring* ring) {
  io_uring_sqe* sqe = io_uring_get_sqe(ring);
  if (sqe == nullptr) return;  // the queue is full: try again at the next look
  io_uring_prep_cancel64(sqe, 0, IORING_ASYNC_CANCEL_ANY | IORING_ASYNC_CANCEL_ALL);
  io_uring_sqe_set_data64(sqe, kCancelToken);
  if (io_uring_submit(ring) < 0) spdlog::warn("engine: could not ask a stuck device I/O back");
}

// Waits for the next completion of a device I/O. The wait wakes every second and looks again,
// so a completion posted without a wakeup is seen late rather than never; stuck I/O is asked
// back every 5 s (the answers to those asks are consumed here and logged), unless the ring is
// broken (`may_submit` false: a submit would send what the kernel refused earlier); a device op
// still not done after 30 s is logged once per wait and the wait goes on.
int WaitCqe(io_uring* ring, io_uring_cqe** cqe, bool may_submit) {
  __kernel_timespec slice{};
  slice.tv_sec = kWaitSliceSeconds;
  int waited = 0;
  for (;;) {
    const int rc = io_uring_wait_cqe_timeout(ring, cqe, &slice);
    if (rc == -EINTR) continue;
    if (rc == 0 && io_uring_cqe_get_data64(*cqe) == kCancelToken) {
      const int res = (*cqe)->res;
      io_uring_cqe_seen(ring, *cqe);
      if (res > 0) {
        spdlog::warn(
            "engine: the kernel gave back {} device I/O(s) stuck for {} s; doing them "
            "synchronously",
            res, waited);
      } else {  // on the device already (a slow disk): only the kernel can end it
        spdlog::debug("engine: a device I/O waiting {} s could not be asked back ({})", waited,
                      std::strerror(-res));
      }
      continue;
    }
    if (rc != -ETIME) return rc;
    ++waited;
    if (may_submit && waited % kStuckIoSeconds == 0) AskBackStuckIo(ring);
    if (waited == kSlowIoWarnSeconds) {
      spdlog::warn("engine: a device I/O has not completed after {} s; still waiting", waited);
    }
  }
}

}  // namespace

struct IoRing::Impl {
  io_uring ring{};
  bool ring_ok = false;
  std::vector<uint8_t*> buffers;
  int strand_pipe[2] = {-1, -1};  // IoRequest::strand's parking place, made when first needed
  uint8_t strand_byte = 0;
  ~Impl() {
    if (ring_ok) io_uring_queue_exit(&ring);  // also unregisters files and buffers
    for (uint8_t* b : buffers) std::free(b);
    for (int fd : strand_pipe) {
      if (fd >= 0) ::close(fd);
    }
  }
};

// Prepares `op` into `sqe`, or, when a fault injector stranded it, a read of an empty pipe that
// only a cancel ends (ECANCELED: Finish then does `op` synchronously).
void IoRing::PrepOp(io_uring_sqe* sqe, const RingOp& op, uint8_t* buf, bool strand) {
  if (strand && (impl_->strand_pipe[0] >= 0 || ::pipe2(impl_->strand_pipe, O_CLOEXEC) == 0)) {
    io_uring_prep_read(sqe, impl_->strand_pipe[0], &impl_->strand_byte, 1, 0);
    return;
  }
  if (op.write) {
    io_uring_prep_write(sqe, op.device, buf, op.len, op.offset);
  } else {
    io_uring_prep_read(sqe, op.device, buf, op.len, op.offset);
  }
  sqe->flags |= IOSQE_FIXED_FILE;
}

IoRing::~IoRing() = default;

void IoRing::Retire(uint64_t generation) {
  {
    std::lock_guard lock(g_retired_mu);
    g_retired.insert(generation);
  }
  t_rings.rings.erase(generation);
}

Result<IoRing*> IoRing::ForThread(const RingConfig& config) {
  auto& rings = t_rings.rings;
  auto it = rings.find(config.generation);
  if (it != rings.end() && !it->second->broken()) return it->second.get();
  if (it != rings.end()) rings.erase(it);  // nothing in flight: Pipeline drains before it returns
  if (IsRetired(config.generation)) return Status::Error(ESHUTDOWN, "engine is closed");
  // Drop rings of engines closed since this thread last made one.
  for (auto r = rings.begin(); r != rings.end();) {
    r = IsRetired(r->first) ? rings.erase(r) : std::next(r);
  }
  std::unique_ptr<IoRing> ring(new IoRing());
  KVFS_RETURN_IF_ERROR(ring->Init(config, true));
  IoRing* raw = ring.get();
  rings.emplace(config.generation, std::move(ring));
  return raw;
}

Result<std::unique_ptr<IoRing>> IoRing::CreateOwned(const RingConfig& config) {
  std::unique_ptr<IoRing> ring(new IoRing());
  KVFS_RETURN_IF_ERROR(ring->Init(config, false));
  return ring;
}

Status IoRing::Init(const RingConfig& config, bool per_thread) {
  config_ = config;
  impl_ = std::make_unique<Impl>();
  io_uring_params params{};
  int rc = io_uring_queue_init_params(config.depth, &impl_->ring, &params);
  if (rc < 0) return Status::Error(-rc, std::string("io_uring setup: ") + std::strerror(-rc));
  impl_->ring_ok = true;
  rc = io_uring_register_files(&impl_->ring, config.fds.data(),
                               static_cast<unsigned>(config.fds.size()));
  if (rc < 0) return Status::Error(-rc, std::string("io_uring files: ") + std::strerror(-rc));
  // The per-thread pool: a bounce buffer per queue slot, allocated when an op first needs it
  // (unregistered: most ops read into or write from the caller's memory, and 16 registered
  // buffers of a segment each cost every FUSE thread that ever wrote 16 MiB of pinned memory).
  if (per_thread) impl_->buffers.assign(config.depth, nullptr);
  return Status::Ok();
}

// Completes a short transfer synchronously (rare with O_DIRECT on a file), and an op WaitCqe
// asked back (ECANCELED, or EINTR when it was interrupted in a kernel worker: writing or
// reading the same bytes again is harmless), and maps errors.
Status IoRing::Finish(const RingOp& op, uint8_t* buf, int res) {
  const std::string where = "device " + std::to_string(op.device) +
                            (op.write ? " write" : " read") + " at " + std::to_string(op.offset);
  if (res == -ECANCELED || res == -EINTR) res = 0;
  if (res < 0) {
    return Status::Error(-res == ENOSPC ? ENOSPC : EIO, where + ": " + std::strerror(-res));
  }
  uint32_t done = static_cast<uint32_t>(res);
  const int fd = config_.fds[op.device];
  while (done < op.len) {
    ssize_t n = op.write ? ::pwrite(fd, buf + done, op.len - done, op.offset + done)
                         : ::pread(fd, buf + done, op.len - done, op.offset + done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return Status::IoError(where + ": short transfer");
    done += static_cast<uint32_t>(n);
  }
  return Status::Ok();
}

Status IoRing::SubmitPrepared(unsigned prepared, unsigned* taken) {
  *taken = 0;
  io_uring* ring = &impl_->ring;
  int refused = 0;
  while (*taken < prepared) {
    // Also hands over what an earlier, short try left in the submission queue.
    const int refusal = config_.faults != nullptr ? config_.faults->BeforeSubmit() : 0;
    const int rc = refusal < 0 ? refusal : io_uring_submit(ring);
    if (rc > 0) {
      *taken += std::min<unsigned>(static_cast<unsigned>(rc), prepared - *taken);
      refused = 0;
      continue;
    }
    if (rc == -EINTR) continue;
    if ((rc == 0 || rc == -EAGAIN || rc == -ENOMEM) && ++refused < kSubmitTries) {
      ::usleep(1000u << std::min(refused - 1, 6));
      continue;
    }
    // What the kernel did not take stays queued and would go out with the next submit, long
    // after its caller gave up on it and reused its buffer: this ring submits nothing again.
    broken_ = true;
    const int err = rc < 0 ? -rc : EAGAIN;
    spdlog::error("engine: io_uring took {} of {} requests ({}); dropping the ring", *taken,
                  prepared, std::strerror(err));
    return Status::IoError(std::string("io_uring submit: ") + std::strerror(err));
  }
  return Status::Ok();
}

Status IoRing::Pipeline(size_t count, const std::function<void(size_t, RingOp&)>& prepare,
                        const std::function<Status(size_t, const RingOp&, uint8_t*)>& complete) {
  struct Slot {
    RingOp op;
    size_t index = 0;
    bool busy = false;
  };
  if (broken_) return Status::IoError("io_uring ring is broken");
  std::vector<Slot> slots(config_.depth);
  std::vector<uint32_t> free_slots;
  for (uint32_t i = config_.depth; i-- > 0;) free_slots.push_back(i);
  std::vector<uint32_t> queued;  // this round's slots, in submission order
  Status first_error;
  size_t next = 0, in_flight = 0;
  io_uring* ring = &impl_->ring;

  while (next < count || in_flight > 0) {
    queued.clear();
    while (first_error.ok() && next < count && !free_slots.empty()) {
      const uint32_t s = free_slots.back();
      RingOp op;
      prepare(next, op);
      const bool pooled = op.data == nullptr;
      if (op.device >= config_.fds.size() || (pooled && op.len > config_.buffer_bytes) ||
          (pooled && s >= impl_->buffers.size())) {
        first_error = Status::Invalid("bad device I/O request");
        break;
      }
      if (pooled && impl_->buffers[s] == nullptr) {
        impl_->buffers[s] = static_cast<uint8_t*>(std::aligned_alloc(4096, config_.buffer_bytes));
        if (impl_->buffers[s] == nullptr) {
          first_error = Status::Error(ENOMEM, "no memory for an I/O buffer");
          break;
        }
      }
      uint8_t* buf = pooled ? impl_->buffers[s] : op.data;
      bool strand = false;
      if (config_.faults != nullptr) {
        IoRequest req{op.device, op.write, op.offset, buf, op.len};
        Status st = config_.faults->BeforeIo(req);
        if (!st.ok()) {
          first_error = st;
          break;
        }
        op.len = req.len;
        strand = req.strand;
      }
      io_uring_sqe* sqe = io_uring_get_sqe(ring);
      if (sqe == nullptr) break;
      PrepOp(sqe, op, buf, strand);
      io_uring_sqe_set_data64(sqe, s);
      free_slots.pop_back();
      slots[s] = {op, next, true};
      queued.push_back(s);
      ++next;
    }
    if (!queued.empty()) {
      unsigned taken = 0;
      Status st = SubmitPrepared(static_cast<unsigned>(queued.size()), &taken);
      in_flight += taken;
      if (!st.ok()) {
        // The kernel never saw the rest: their slots are free, the ops just not done.
        for (size_t k = taken; k < queued.size(); ++k) {
          slots[queued[k]].busy = false;
          free_slots.push_back(queued[k]);
        }
        if (first_error.ok()) first_error = st;
      }
    }
    if (in_flight == 0) break;
    io_uring_cqe* cqe = nullptr;
    int rc = WaitCqe(ring, &cqe, !broken_);
    if (rc < 0) return Status::IoError(std::string("io_uring wait: ") + std::strerror(-rc));
    const uint64_t token = io_uring_cqe_get_data64(cqe);
    const int res = cqe->res;
    io_uring_cqe_seen(ring, cqe);
    if (token >= slots.size() || !slots[token].busy) continue;  // not this call's
    const uint32_t s = static_cast<uint32_t>(token);
    Slot& slot = slots[s];
    --in_flight;
    uint8_t* buf = slot.op.data != nullptr ? slot.op.data : impl_->buffers[s];
    if (first_error.ok()) {
      Status st = Finish(slot.op, buf, res);
      if (st.ok()) st = complete(slot.index, slot.op, buf);
      if (!st.ok()) first_error = st;
    }
    slot.busy = false;
    free_slots.push_back(s);
  }
  return first_error;
}

Status IoRing::Submit(const RingOp& op_in, uint64_t token) {
  RingOp op = op_in;
  if (op.data == nullptr || op.device >= config_.fds.size()) {
    return Status::Invalid("bad device I/O request");
  }
  bool strand = false;
  if (config_.faults != nullptr) {
    IoRequest req{op.device, op.write, op.offset, op.data, op.len};
    KVFS_RETURN_IF_ERROR(config_.faults->BeforeIo(req));
    op.len = req.len;
    strand = req.strand;
  }
  if (broken_) return Status::IoError("io_uring ring is broken");
  io_uring* ring = &impl_->ring;
  io_uring_sqe* sqe = io_uring_get_sqe(ring);
  while (sqe == nullptr && !async_ops_.empty()) {  // the ring is full: make room
    Reap(1, [&](uint64_t t, Status st) { reaped_.push_back({t, std::move(st)}); });
    sqe = io_uring_get_sqe(ring);
  }
  if (sqe == nullptr) return Status::IoError("io_uring submission queue full");
  PrepOp(sqe, op, op.data, strand);
  io_uring_sqe_set_data64(sqe, token);
  unsigned taken = 0;
  KVFS_RETURN_IF_ERROR(SubmitPrepared(1, &taken));
  async_ops_.push_back({token, op});
  return Status::Ok();
}

void IoRing::Reap(size_t min_complete, const std::function<void(uint64_t, Status)>& done) {
  for (auto& [token, st] : reaped_) done(token, std::move(st));
  min_complete = reaped_.size() >= min_complete ? 0 : min_complete - reaped_.size();
  reaped_.clear();
  io_uring* ring = &impl_->ring;
  size_t got = 0;
  while (!async_ops_.empty()) {
    io_uring_cqe* cqe = nullptr;
    const int rc =
        got < min_complete ? WaitCqe(ring, &cqe, !broken_) : io_uring_peek_cqe(ring, &cqe);
    if (rc == -EINTR) continue;
    if (rc < 0 || cqe == nullptr) break;
    const uint64_t token = io_uring_cqe_get_data64(cqe);
    const int res = cqe->res;
    io_uring_cqe_seen(ring, cqe);
    auto it = std::find_if(async_ops_.begin(), async_ops_.end(),
                           [&](const auto& p) { return p.first == token; });
    if (it == async_ops_.end()) continue;
    RingOp op = it->second;
    async_ops_.erase(it);
    ++got;
    done(token, Finish(op, op.data, res));
  }
}

}  // namespace kvfs
