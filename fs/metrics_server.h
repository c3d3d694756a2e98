// MetricsServer: the optional Prometheus endpoint of the daemon (kvfs --metrics ADDR:PORT).
//
// A deliberately small HTTP/1.1 server on one thread: GET /metrics answers the text exposition
// format 0.0.4, anything else 404; one request per connection (Connection: close), requests
// capped at 8 KiB and a few seconds, so a stuck scraper cannot hold the thread for long.
// Scrapes are rare (seconds apart) and cheap, so serving them one at a time is enough.
//
// Listen() runs before the daemon forks, so a bad or busy address fails `kvfs` itself with a
// clear message and exit status 2; the listening socket is inherited by the daemon, which
// starts serving once the mount is up and stops before it unmounts.
#pragma once

#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "kvfs/status.h"

namespace kvfs::fs {

class MetricsServer {
 public:
  // `address` is HOST:PORT or [IPv6]:PORT; port 0 picks a free port (address() tells which).
  static Result<std::unique_ptr<MetricsServer>> Listen(const std::string& address);
  ~MetricsServer();

  // The bound address as HOST:PORT, with the real port.
  const std::string& address() const { return address_; }
  // Serves scrapes on a new thread; `render` produces the body of each GET /metrics.
  Status Start(std::function<std::string()> render);
  // Ends the thread (at most one request in progress is cut short) and closes the socket.
  void Stop();

 private:
  MetricsServer() = default;
  void Serve();
  void HandleConnection(int fd);

  int listen_fd_ = -1;
  int wake_fd_ = -1;  // eventfd: Stop() makes it readable
  std::string address_;
  std::function<std::string()> render_;
  std::thread thread_;
};

// The Prometheus text format (0.0.4) of a status snapshot (Control::StatusJson()): counters
// named kvfs_*_total, gauges, and kvfs_info with the configuration as labels. Numeric status
// fields it does not know are exported untyped as kvfs_<field>, so new ones are never lost.
std::string PrometheusText(const nlohmann::json& status);

}  // namespace kvfs::fs
