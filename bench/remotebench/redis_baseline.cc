#include "redis_baseline.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace remotebench {

using namespace std::chrono_literals;

kvfs::Status RedisServer::Start(const std::string& dir) {
  KVFS_ASSIGN_OR_RETURN(port_, FreePort());
  KVFS_RETURN_IF_ERROR(process_.Start(
      {"redis-server", "--port", std::to_string(port_), "--bind", "127.0.0.1", "--dir", dir,
       "--save", "", "--appendonly", "no", "--daemonize", "no", "--logfile", ""},
      dir + "/redis.log"));
  if (!WaitForPort(port_, 10s)) {
    process_.Stop();
    return kvfs::Status::Error(
        ETIMEDOUT, "redis-server did not start (is it installed?); see " + dir + "/redis.log");
  }
  return kvfs::Status::Ok();
}

RespClient::~RespClient() {
  if (fd_ >= 0) ::close(fd_);
}

kvfs::Status RespClient::Connect(uint16_t port) {
  fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd_ < 0) return kvfs::Status::Error(errno, "socket");
  int one = 1;
  ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  struct sockaddr_in a {};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    return kvfs::Status::Error(errno, "connect to redis");
  }
  return kvfs::Status::Ok();
}

kvfs::Status RespClient::SendAll(const void* a, size_t an, const void* b, size_t bn, const void* c,
                                 size_t cn) {
  struct iovec iov[3] = {
      {const_cast<void*>(a), an}, {const_cast<void*>(b), bn}, {const_cast<void*>(c), cn}};
  struct iovec* v = iov;
  int count = 3;
  while (count > 0) {
    if (v->iov_len == 0) {
      ++v;
      --count;
      continue;
    }
    ssize_t n = ::writev(fd_, v, count);
    if (n < 0) {
      if (errno == EINTR) continue;
      return kvfs::Status::Error(errno, "send to redis");
    }
    size_t left = static_cast<size_t>(n);
    while (count > 0 && left >= v->iov_len) {
      left -= v->iov_len;
      ++v;
      --count;
    }
    if (count > 0) {
      v->iov_base = static_cast<char*>(v->iov_base) + left;
      v->iov_len -= left;
    }
  }
  return kvfs::Status::Ok();
}

kvfs::Status RespClient::ReadLine(std::string* line) {
  for (;;) {
    const size_t end = pending_.find("\r\n");
    if (end != std::string::npos) {
      *line = pending_.substr(0, end);
      pending_.erase(0, end + 2);
      return kvfs::Status::Ok();
    }
    char buf[4096];
    ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return kvfs::Status::Error(ECONNRESET, "redis closed the connection");
    pending_.append(buf, static_cast<size_t>(n));
  }
}

kvfs::Status RespClient::ReadExact(uint8_t* out, size_t n) {
  const size_t from_pending = std::min(n, pending_.size());
  std::memcpy(out, pending_.data(), from_pending);
  pending_.erase(0, from_pending);
  for (size_t done = from_pending; done < n;) {
    ssize_t r = ::recv(fd_, out + done, n - done, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return kvfs::Status::Error(ECONNRESET, "redis closed the connection");
    done += static_cast<size_t>(r);
  }
  return kvfs::Status::Ok();
}

kvfs::Status RespClient::Set(const std::string& key, std::span<const uint8_t> value) {
  const std::string head = "*3\r\n$3\r\nSET\r\n$" + std::to_string(key.size()) + "\r\n" + key +
                           "\r\n$" + std::to_string(value.size()) + "\r\n";
  KVFS_RETURN_IF_ERROR(SendAll(head.data(), head.size(), value.data(), value.size(), "\r\n", 2));
  std::string line;
  KVFS_RETURN_IF_ERROR(ReadLine(&line));
  if (line != "+OK") return kvfs::Status::IoError("redis SET answered " + line);
  return kvfs::Status::Ok();
}

kvfs::Result<size_t> RespClient::Get(const std::string& key, std::span<uint8_t> out) {
  const std::string cmd =
      "*2\r\n$3\r\nGET\r\n$" + std::to_string(key.size()) + "\r\n" + key + "\r\n";
  KVFS_RETURN_IF_ERROR(SendAll(cmd.data(), cmd.size()));
  std::string line;
  KVFS_RETURN_IF_ERROR(ReadLine(&line));
  if (line.empty() || line[0] != '$') return kvfs::Status::IoError("redis GET answered " + line);
  const long long len = std::stoll(line.substr(1));
  if (len < 0) return kvfs::Status::NotFound("redis: no key " + key);
  if (static_cast<size_t>(len) > out.size()) return kvfs::Status::Error(EMSGSIZE, "value too big");
  KVFS_RETURN_IF_ERROR(ReadExact(out.data(), static_cast<size_t>(len)));
  uint8_t crlf[2];
  KVFS_RETURN_IF_ERROR(ReadExact(crlf, 2));
  return static_cast<size_t>(len);
}

kvfs::Status RespClient::FlushAll() {
  static const char kCmd[] = "*1\r\n$8\r\nFLUSHALL\r\n";
  KVFS_RETURN_IF_ERROR(SendAll(kCmd, sizeof kCmd - 1));
  std::string line;
  KVFS_RETURN_IF_ERROR(ReadLine(&line));
  if (line != "+OK") return kvfs::Status::IoError("redis FLUSHALL answered " + line);
  return kvfs::Status::Ok();
}

}  // namespace remotebench
