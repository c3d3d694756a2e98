// Non-blocking TCP sockets with deadlines: every wait is a poll() bounded by the caller's
// deadline, so no socket call can hang a thread on a dead or partitioned peer.
#pragma once

#include <sys/uio.h>

#include <chrono>
#include <cstdint>
#include <string>

#include "kvfs/status.h"

namespace kvfs {

using Clock = std::chrono::steady_clock;
using Deadline = Clock::time_point;

// An owned file descriptor.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(Fd&& o) noexcept : fd_(o.release()) {}
  Fd& operator=(Fd&& o) noexcept;
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() { Reset(); }
  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int release() {
    int fd = fd_;
    fd_ = -1;
    return fd;
  }
  void Reset();

 private:
  int fd_ = -1;
};

// Connects (non-blocking) with TCP_NODELAY and the given buffer sizes, within `deadline`.
Result<Fd> TcpConnect(const std::string& host, uint16_t port, int buffer_bytes, Deadline deadline);
// Binds and listens (SO_REUSEADDR); port 0 picks an ephemeral port.
Result<Fd> TcpListen(const std::string& host, uint16_t port, int backlog);
Result<uint16_t> LocalPort(int fd);
// Sets O_NONBLOCK, TCP_NODELAY and SO_SNDBUF/SO_RCVBUF on an accepted or connected socket.
void TuneSocket(int fd, int buffer_bytes);

// Waits until `fd` has `events` (POLLIN/POLLOUT) or the deadline passes (ETIMEDOUT).
Status WaitFd(int fd, short events, Deadline deadline);
// Sends every byte described by iov (modified in place as it advances), scatter-gather.
Status SendAll(int fd, struct iovec* iov, int iovcnt, Deadline deadline);
// Receives exactly the bytes described by iov. A peer that closes first gives ECONNRESET
// (or, with nothing read yet and `eof_ok`, ENODATA: a clean close between frames).
Status RecvAll(int fd, struct iovec* iov, int iovcnt, Deadline deadline, bool eof_ok = false);

}  // namespace kvfs
