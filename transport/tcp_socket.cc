#include "tcp_socket.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace kvfs {
namespace {

int RemainingMs(Deadline deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  if (left.count() <= 0) return 0;
  return left.count() > 1 << 30 ? 1 << 30 : static_cast<int>(left.count()) + 1;
}

Status Errno(int err, const std::string& what) {
  return Status::Error(err, what + ": " + std::strerror(err));
}

// Moves the iovec array past `n` bytes already transferred.
void Advance(struct iovec*& iov, int& iovcnt, size_t n) {
  while (n > 0 && iovcnt > 0) {
    if (n >= iov->iov_len) {
      n -= iov->iov_len;
      ++iov;
      --iovcnt;
    } else {
      iov->iov_base = static_cast<char*>(iov->iov_base) + n;
      iov->iov_len -= n;
      n = 0;
    }
  }
  while (iovcnt > 0 && iov->iov_len == 0) {
    ++iov;
    --iovcnt;
  }
}

}  // namespace

Fd& Fd::operator=(Fd&& o) noexcept {
  if (this != &o) {
    Reset();
    fd_ = o.release();
  }
  return *this;
}

void Fd::Reset() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

void TuneSocket(int fd, int buffer_bytes) {
  int flags = ::fcntl(fd, F_GETFL, 0);
  if (flags >= 0) ::fcntl(fd, F_SETFL, flags | O_NONBLOCK);
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  if (buffer_bytes > 0) {
    ::setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &buffer_bytes, sizeof buffer_bytes);
    ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &buffer_bytes, sizeof buffer_bytes);
  }
}

Status WaitFd(int fd, short events, Deadline deadline) {
  for (;;) {
    const int ms = RemainingMs(deadline);
    if (ms == 0) return Status::Error(ETIMEDOUT, "peer did not answer before the deadline");
    struct pollfd p {
      fd, events, 0
    };
    int r = ::poll(&p, 1, ms);
    if (r < 0) {
      if (errno == EINTR) continue;
      return Errno(errno, "poll");
    }
    if (r == 0) continue;  // re-check the deadline
    return Status::Ok();   // ready, or an error the next send/recv will report
  }
}

Result<Fd> TcpConnect(const std::string& host, uint16_t port, int buffer_bytes, Deadline deadline) {
  struct addrinfo hints {};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  struct addrinfo* res = nullptr;
  const std::string service = std::to_string(port);
  int gai = ::getaddrinfo(host.c_str(), service.c_str(), &hints, &res);
  if (gai != 0) {
    return Status::Error(EHOSTUNREACH, "cannot resolve " + host + ": " + ::gai_strerror(gai));
  }
  Status last = Status::Error(EHOSTUNREACH, "no address for " + host);
  for (struct addrinfo* ai = res; ai != nullptr; ai = ai->ai_next) {
    Fd fd(::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol));
    if (!fd.valid()) {
      last = Errno(errno, "socket");
      continue;
    }
    // Buffer sizes must be set before connect() to take part in the window negotiation.
    TuneSocket(fd.get(), buffer_bytes);
    int r = ::connect(fd.get(), ai->ai_addr, ai->ai_addrlen);
    if (r != 0 && errno != EINPROGRESS) {
      last = Errno(errno, "connect to " + host + ":" + service);
      continue;
    }
    if (r != 0) {
      Status w = WaitFd(fd.get(), POLLOUT, deadline);
      if (!w.ok()) {
        last = Status::Error(ETIMEDOUT, "connect to " + host + ":" + service + " timed out");
        continue;
      }
      int err = 0;
      socklen_t len = sizeof err;
      ::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len);
      if (err != 0) {
        last = Errno(err, "connect to " + host + ":" + service);
        continue;
      }
    }
    ::freeaddrinfo(res);
    return fd;
  }
  ::freeaddrinfo(res);
  return last;
}

Result<Fd> TcpListen(const std::string& host, uint16_t port, int backlog) {
  struct addrinfo hints {};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  struct addrinfo* res = nullptr;
  const std::string service = std::to_string(port);
  int gai = ::getaddrinfo(host.empty() ? nullptr : host.c_str(), service.c_str(), &hints, &res);
  if (gai != 0) return Status::Invalid("cannot resolve listen address " + host);
  Status last = Status::Invalid("no address to listen on for " + host);
  for (struct addrinfo* ai = res; ai != nullptr; ai = ai->ai_next) {
    Fd fd(::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol));
    if (!fd.valid()) {
      last = Errno(errno, "socket");
      continue;
    }
    int one = 1;
    ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(fd.get(), ai->ai_addr, ai->ai_addrlen) != 0) {
      last = Errno(errno, "bind " + host + ":" + service);
      continue;
    }
    if (::listen(fd.get(), backlog) != 0) {
      last = Errno(errno, "listen");
      continue;
    }
    ::freeaddrinfo(res);
    return fd;
  }
  ::freeaddrinfo(res);
  return last;
}

Result<uint16_t> LocalPort(int fd) {
  struct sockaddr_storage ss {};
  socklen_t len = sizeof ss;
  if (::getsockname(fd, reinterpret_cast<struct sockaddr*>(&ss), &len) != 0) {
    return Errno(errno, "getsockname");
  }
  if (ss.ss_family == AF_INET) {
    return ntohs(reinterpret_cast<struct sockaddr_in*>(&ss)->sin_port);
  }
  return ntohs(reinterpret_cast<struct sockaddr_in6*>(&ss)->sin6_port);
}

Status SendAll(int fd, struct iovec* iov, int iovcnt, Deadline deadline) {
  Advance(iov, iovcnt, 0);
  while (iovcnt > 0) {
    struct msghdr msg {};
    msg.msg_iov = iov;
    msg.msg_iovlen = static_cast<size_t>(iovcnt);
    // sendmsg rather than writev: MSG_NOSIGNAL turns a closed peer into EPIPE, not SIGPIPE.
    ssize_t n = ::sendmsg(fd, &msg, MSG_NOSIGNAL);
    if (n > 0) {
      Advance(iov, iovcnt, static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      KVFS_RETURN_IF_ERROR(WaitFd(fd, POLLOUT, deadline));
      continue;
    }
    const int err = (n < 0 && errno != EPIPE) ? errno : ECONNRESET;
    return Errno(err, "send");
  }
  return Status::Ok();
}

Status RecvAll(int fd, struct iovec* iov, int iovcnt, Deadline deadline, bool eof_ok) {
  bool got_any = false;
  Advance(iov, iovcnt, 0);
  while (iovcnt > 0) {
    struct msghdr msg {};
    msg.msg_iov = iov;
    msg.msg_iovlen = static_cast<size_t>(iovcnt);
    ssize_t n = ::recvmsg(fd, &msg, 0);
    if (n > 0) {
      got_any = true;
      Advance(iov, iovcnt, static_cast<size_t>(n));
      continue;
    }
    if (n == 0) {
      if (eof_ok && !got_any) return Status::Error(ENODATA, "peer closed the connection");
      return Status::Error(ECONNRESET, "peer closed the connection mid-frame");
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      KVFS_RETURN_IF_ERROR(WaitFd(fd, POLLIN, deadline));
      continue;
    }
    return Errno(errno, "recv");
  }
  return Status::Ok();
}

}  // namespace kvfs
