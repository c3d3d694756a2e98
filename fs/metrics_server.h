// MetricsServer: the optional Prometheus endpoint of the daemon (kvfs --metrics ADDR:PORT).
//
// A deliberately small HTTP/1.1 server on one thread: GET /metrics answers the text exposition
// format 0.0.4, anything else 404; one request per connection (Connection: close), requests
// capped at 8 KiB and each connection at 3 s from accept to its last byte. Up to 32
// connections are served at once by one poll loop (a new one past that closes the oldest): idle
// or slow clients cannot keep a scraper out (served one at a time, five idle connections made a
// scrape wait 15 s, and one sending a byte every 2 s held the endpoint for good).
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
  struct Connection;
  void Serve();
  // Reads or writes what `c` is ready for; false when it is done (all sent) or failed.
  bool Advance(Connection& c);
  std::string Reply(const std::string& request);

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
