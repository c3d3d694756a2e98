// The key-value baseline: a redis-server started here on 127.0.0.1 (temporary dir, no RDB, no
// AOF), filled with SET and read with GET by a minimal RESP client that receives each value
// straight into the caller's buffer (no intermediate copy on the client, as kvfs does).
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "child_process.h"
#include "kvfs/status.h"

namespace remotebench {

class RedisServer {
 public:
  // Starts `redis-server` on a free loopback port with `dir` as its working directory.
  kvfs::Status Start(const std::string& dir);
  void Stop() { process_.Stop(); }
  uint16_t port() const { return port_; }
  double CpuSeconds() const { return process_.CpuSeconds(); }

 private:
  ChildProcess process_;
  uint16_t port_ = 0;
};

// One blocking connection; not thread-safe (one per reader thread).
class RespClient {
 public:
  RespClient() = default;
  RespClient(const RespClient&) = delete;
  RespClient& operator=(const RespClient&) = delete;
  ~RespClient();
  kvfs::Status Connect(uint16_t port);
  kvfs::Status Set(const std::string& key, std::span<const uint8_t> value);
  // Reads the value of `key` into `out`; returns its length (EMSGSIZE if it does not fit,
  // ENOENT for a nil reply).
  kvfs::Result<size_t> Get(const std::string& key, std::span<uint8_t> out);
  kvfs::Status FlushAll();

 private:
  kvfs::Status SendAll(const void* a, size_t an, const void* b = nullptr, size_t bn = 0,
                       const void* c = nullptr, size_t cn = 0);
  // Reads one "\r\n"-terminated line (the type byte included) into *line.
  kvfs::Status ReadLine(std::string* line);
  kvfs::Status ReadExact(uint8_t* out, size_t n);
  int fd_ = -1;
  // Bytes received past the last line, consumed before the socket is read again.
  std::string pending_;
};

}  // namespace remotebench
