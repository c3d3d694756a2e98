#include "metrics_server.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <set>
#include <vector>

#include "json_text.h"

namespace kvfs::fs {
namespace {

constexpr size_t kMaxRequest = 8 * 1024;
constexpr int kIoTimeoutMs = 3000;      // a connection's whole life: request and reply
constexpr size_t kMaxConnections = 32;  // at once; a new one past it closes the oldest

struct Metric {
  const char* field;  // key in the status JSON
  const char* name;
  const char* type;
  const char* help;
};

// The status fields worth exporting, with Prometheus names (base units, counters *_total).
constexpr Metric kMetrics[] = {
    {"reads", "kvfs_reads_total", "counter", "Read requests served by the chunk store."},
    {"writes", "kvfs_writes_total", "counter", "Write requests taken by the chunk store."},
    {"bytes_read", "kvfs_read_bytes_total", "counter",
     "Bytes read from the chunk store (page-cache hits never reach it)."},
    {"bytes_written", "kvfs_written_bytes_total", "counter", "Bytes written to the chunk store."},
    {"lookups", "kvfs_lookups_total", "counter", "Name lookups that reached the daemon."},
    {"lookup_hits", "kvfs_lookup_hits_total", "counter", "Lookups that found the name."},
    {"lookup_misses", "kvfs_lookup_misses_total", "counter", "Lookups of names that do not exist."},
    {"hits", "kvfs_hits_total", "counter", "Cache hits: published files opened for reading."},
    {"misses", "kvfs_misses_total", "counter",
     "Cache misses: names looked up and not found (not counting the lookup before a create)."},
    {"recovery_damaged_records", "kvfs_recovery_damaged_records", "gauge",
     "Journal records the last recovery found damaged and skipped."},
    {"checksum_failures", "kvfs_checksum_failures_total", "counter",
     "Segments whose xxh3 checksum did not match (must stay 0)."},
    {"corrupt_dropped", "kvfs_corrupt_dropped_total", "counter",
     "Files dropped from the cache because a segment was corrupt."},
    {"evictions", "kvfs_evictions_total", "counter", "Files evicted to make room or on request."},
    {"capacity_bytes", "kvfs_capacity_bytes", "gauge", "Configured data capacity."},
    {"used_bytes", "kvfs_used_bytes", "gauge", "Device bytes in use."},
    {"free_bytes", "kvfs_free_bytes", "gauge", "Capacity not in use."},
    {"logical_bytes", "kvfs_logical_bytes", "gauge", "Bytes of file data (uncompressed)."},
    {"stored_bytes", "kvfs_stored_bytes", "gauge", "Bytes of file data as stored on the devices."},
    {"compression_ratio", "kvfs_compression_ratio", "gauge",
     "Logical bytes per stored byte of published files."},
    {"files", "kvfs_files", "gauge", "Published files."},
    {"objects", "kvfs_objects", "gauge", "Files, directories and symlinks."},
    {"inodes_in_memory", "kvfs_inodes_in_memory", "gauge", "Inodes the daemon holds in memory."},
    {"journal_bytes", "kvfs_journal_bytes", "gauge", "Size of the index journal."},
    {"segment_size", "kvfs_segment_size_bytes", "gauge", "Raw bytes per stored segment."},
    {"high_watermark", "kvfs_high_watermark_ratio", "gauge",
     "Used share of capacity at which eviction starts."},
    {"low_watermark", "kvfs_low_watermark_ratio", "gauge", "Used share eviction brings back."},
    {"uptime_s", "kvfs_uptime_seconds", "gauge", "Seconds since the daemon started."},
};

// Status fields that are not metrics (the pid is not a quantity).
constexpr const char* kNotMetrics[] = {"pid"};

// Label values escape backslash, double quote and newline (exposition format 0.0.4).
std::string Label(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

std::string Field(const nlohmann::json& status, const char* key) {
  auto it = status.find(key);
  return it != status.end() && it->is_string() ? it->get<std::string>() : "";
}

Result<std::pair<std::string, std::string>> SplitHostPort(const std::string& address) {
  std::string host, port;
  if (!address.empty() && address.front() == '[') {
    auto close = address.find(']');
    if (close == std::string::npos || close + 1 >= address.size() || address[close + 1] != ':')
      return Status::Invalid("expected [IPv6]:PORT, got '" + address + "'");
    host = address.substr(1, close - 1);
    port = address.substr(close + 2);
  } else {
    auto colon = address.rfind(':');
    if (colon == std::string::npos)
      return Status::Invalid("expected ADDR:PORT, got '" + address + "'");
    host = address.substr(0, colon);
    port = address.substr(colon + 1);
  }
  if (host.empty()) return Status::Invalid("no address in '" + address + "' (e.g. 127.0.0.1:9108)");
  if (port.empty() || port.find_first_not_of("0123456789") != std::string::npos ||
      port.size() > 5 || std::stoul(port) > 65535)
    return Status::Invalid("bad port in '" + address + "'");
  return std::make_pair(host, port);
}

std::string BoundAddress(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return "";
  char host[INET6_ADDRSTRLEN] = "";
  if (ss.ss_family == AF_INET6) {
    auto* a = reinterpret_cast<sockaddr_in6*>(&ss);
    ::inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof host);
    return "[" + std::string(host) + "]:" + std::to_string(ntohs(a->sin6_port));
  }
  auto* a = reinterpret_cast<sockaddr_in*>(&ss);
  ::inet_ntop(AF_INET, &a->sin_addr, host, sizeof host);
  return std::string(host) + ":" + std::to_string(ntohs(a->sin_port));
}

}  // namespace

std::string PrometheusText(const nlohmann::json& status) {
  std::string out;
  std::set<std::string> done(std::begin(kNotMetrics), std::end(kNotMetrics));
  for (const Metric& m : kMetrics) {
    auto it = status.find(m.field);
    if (it == status.end() || !it->is_number()) continue;
    done.insert(m.field);
    out += std::string("# HELP ") + m.name + " " + m.help + "\n";
    out += std::string("# TYPE ") + m.name + " " + m.type + "\n";
    out += std::string(m.name) + " " + JsonText(*it) + "\n";
  }
  for (auto it = status.cbegin(); it != status.cend(); ++it) {
    if (!it->is_number() || done.count(it.key())) continue;
    const std::string name = "kvfs_" + it.key();
    out += "# HELP " + name + " Status field " + it.key() + " (see kvfsctl status).\n";
    out += "# TYPE " + name + " untyped\n";
    out += name + " " + JsonText(*it) + "\n";
  }
  out += "# HELP kvfs_info The daemon's version and configuration, as labels; always 1.\n";
  out += "# TYPE kvfs_info gauge\n";
  out += "kvfs_info{version=\"" + Label(Field(status, "version")) + "\",mountpoint=\"" +
         Label(Field(status, "mountpoint")) + "\",durability=\"" +
         Label(Field(status, "durability")) + "\",compression=\"" +
         Label(Field(status, "compression")) + "\",eviction_policy=\"" +
         Label(Field(status, "eviction_policy")) + "\"} 1\n";
  return out;
}

Result<std::unique_ptr<MetricsServer>> MetricsServer::Listen(const std::string& address) {
  KVFS_ASSIGN_OR_RETURN(auto host_port, SplitHostPort(address));
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* res = nullptr;
  int rc = ::getaddrinfo(host_port.first.c_str(), host_port.second.c_str(), &hints, &res);
  if (rc != 0) return Status::Invalid("cannot resolve '" + address + "': " + gai_strerror(rc));
  std::unique_ptr<addrinfo, decltype(&freeaddrinfo)> owned(res, freeaddrinfo);
  std::string error = "no usable address";
  int err = EADDRNOTAVAIL;
  for (addrinfo* ai = res; ai; ai = ai->ai_next) {
    int fd =
        ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol);
    if (fd < 0) {
      err = errno;
      error = std::string("socket: ") + std::strerror(errno);
      continue;
    }
    int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 || ::listen(fd, 16) != 0) {
      err = errno;
      error = std::strerror(errno);
      ::close(fd);
      continue;
    }
    std::unique_ptr<MetricsServer> s(new MetricsServer);
    s->listen_fd_ = fd;
    s->address_ = BoundAddress(fd);
    return s;
  }
  return Status::Error(err, "cannot listen on " + address + ": " + error);
}

MetricsServer::~MetricsServer() {
  Stop();
  if (listen_fd_ >= 0) ::close(listen_fd_);
}

Status MetricsServer::Start(std::function<std::string()> render) {
  render_ = std::move(render);
  wake_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (wake_fd_ < 0) return Status::Error(errno, "eventfd for the metrics server");
  thread_ = std::thread([this] { Serve(); });
  spdlog::info("metrics: serving http://{}/metrics", address_);
  return Status::Ok();
}

void MetricsServer::Stop() {
  if (thread_.joinable()) {
    uint64_t one = 1;
    (void)!::write(wake_fd_, &one, sizeof one);
    thread_.join();
    spdlog::info("metrics: stopped");
  }
  if (wake_fd_ >= 0) ::close(wake_fd_);
  wake_fd_ = -1;
  if (listen_fd_ >= 0) ::close(listen_fd_);
  listen_fd_ = -1;
}

// One scrape: its request as it arrives, then its reply as it leaves, within one deadline
// from its accept (a client that sends a byte now and then cannot hold it longer).
struct MetricsServer::Connection {
  int fd = -1;
  std::chrono::steady_clock::time_point deadline;
  std::string in;
  std::string out;  // the reply, once the request is whole
  size_t sent = 0;
};

void MetricsServer::Serve() {
  using Clock = std::chrono::steady_clock;
  std::vector<Connection> conns;
  auto close_at = [&](size_t i) {
    ::close(conns[i].fd);
    conns.erase(conns.begin() + static_cast<std::ptrdiff_t>(i));
  };
  for (;;) {
    std::vector<pollfd> p = {{listen_fd_, POLLIN, 0}, {wake_fd_, POLLIN, 0}};
    auto now = Clock::now();
    int timeout_ms = -1;
    for (const Connection& c : conns) {
      p.push_back({c.fd, static_cast<short>(c.out.empty() ? POLLIN : POLLOUT), 0});
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(c.deadline - now);
      const int ms = static_cast<int>(std::max<int64_t>(0, left.count()) + 1);
      timeout_ms = timeout_ms < 0 ? ms : std::min(timeout_ms, ms);
    }
    if (::poll(p.data(), p.size(), timeout_ms) < 0) {
      if (errno == EINTR) continue;
      spdlog::error("metrics: poll: {}; endpoint stopped", std::strerror(errno));
      break;
    }
    if (p[1].revents & POLLIN) break;
    now = Clock::now();
    // Newest last: what the connections did, then expiry, then new ones (the poll entries
    // 2.. line up with `conns` until something is erased, so erase from the back).
    for (size_t i = conns.size(); i-- > 0;) {
      if (p[i + 2].revents != 0 && !Advance(conns[i])) {
        close_at(i);
      } else if (now >= conns[i].deadline) {
        close_at(i);
      }
    }
    if (p[0].revents & POLLIN) {
      const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (fd >= 0) {
        // Full: the oldest goes (idle or slow clients must not lock a scraper out).
        if (conns.size() >= kMaxConnections) close_at(0);
        conns.push_back({fd, now + std::chrono::milliseconds(kIoTimeoutMs), {}, {}, 0});
      }
    }
  }
  for (Connection& c : conns) ::close(c.fd);
}

bool MetricsServer::Advance(Connection& c) {
  if (c.out.empty()) {
    char buf[2048];
    const ssize_t n = ::recv(c.fd, buf, sizeof buf, 0);
    if (n < 0) return errno == EINTR || errno == EAGAIN;
    if (n == 0) return false;  // closed before a whole request
    c.in.append(buf, static_cast<size_t>(n));
    if (c.in.find("\r\n\r\n") == std::string::npos && c.in.find("\n\n") == std::string::npos)
      return c.in.size() <= kMaxRequest;
    c.out = Reply(c.in);
  }
  const ssize_t n = ::send(c.fd, c.out.data() + c.sent, c.out.size() - c.sent, MSG_NOSIGNAL);
  if (n < 0) return errno == EINTR || errno == EAGAIN;
  c.sent += static_cast<size_t>(n);
  return c.sent < c.out.size();  // all sent: done (Connection: close)
}

std::string MetricsServer::Reply(const std::string& request) {
  // Request line: METHOD SP TARGET SP VERSION; a query string does not change the answer.
  const std::string line = request.substr(0, request.find_first_of("\r\n"));
  const auto sp1 = line.find(' '), sp2 = line.find(' ', sp1 + 1);
  std::string method = line.substr(0, sp1), target;
  if (sp1 != std::string::npos) target = line.substr(sp1 + 1, sp2 - sp1 - 1);
  target = target.substr(0, target.find('?'));

  std::string status = "404 Not Found", type = "text/plain; charset=utf-8", body = "not found\n";
  if (method == "GET" && target == "/metrics") {
    status = "200 OK";
    type = "text/plain; version=0.0.4; charset=utf-8";
    body = render_();
  }
  return "HTTP/1.1 " + status + "\r\nContent-Type: " + type +
         "\r\nContent-Length: " + std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" +
         body;
}

}  // namespace kvfs::fs
