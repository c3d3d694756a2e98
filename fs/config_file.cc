#include "config_file.h"

#include <unistd.h>

#include <cctype>
#include <climits>
#include <cstring>
#include <exception>
#include <filesystem>
#include <set>
#include <sstream>
#include <toml.hpp>

#include "kvfs/size.h"
#include "kvfs/small_file.h"
#include "kvfs/store.h"
#include "kvfs/transport.h"
#include "mount_options.h"

namespace kvfs::fs {
namespace {

// Where a bad value was found, for messages: "config /etc/kvfs.toml: cluster.replicas: ...".
class Reader {
 public:
  explicit Reader(std::string path) : path_(std::move(path)) {}
  Status Fail(const std::string& key, const std::string& why) const {
    return Status::Invalid("config " + path_ + ": " + key + ": " + why);
  }
  Result<std::string> String(const std::string& key, const toml::value& v) const {
    if (!v.is_string()) return Fail(key, "expected a string");
    return v.as_string().str;
  }
  // A path in the file: a relative one is taken from the file's directory, as the file's
  // author means it (kvfs may start anywhere; a daemonized kvfs runs in /).
  std::string Resolve(const std::string& path) const {
    if (path.empty() || path.front() == '/') return path;
    std::error_code ec;
    const std::filesystem::path dir = std::filesystem::absolute(path_, ec).parent_path();
    return (dir / path).lexically_normal().string();
  }
  Result<std::string> Path(const std::string& key, const toml::value& v) const {
    KVFS_ASSIGN_OR_RETURN(std::string s, String(key, v));
    return Resolve(s);
  }
  Result<int64_t> Integer(const std::string& key, const toml::value& v, int64_t lo,
                          int64_t hi) const {
    if (!v.is_integer()) return Fail(key, "expected an integer");
    int64_t n = v.as_integer();
    if (n < lo || n > hi)
      return Fail(key, std::to_string(n) + " is out of range [" + std::to_string(lo) + ", " +
                           std::to_string(hi) + "]");
    return n;
  }
  Result<double> Fraction(const std::string& key, const toml::value& v) const {
    double d;
    if (v.is_floating()) {
      d = v.as_floating();
    } else if (v.is_integer()) {
      d = static_cast<double>(v.as_integer());
    } else {
      return Fail(key, "expected a number");
    }
    if (!(d > 0.0 && d <= 1.0)) return Fail(key, "expected a fraction in (0, 1]");
    return d;
  }
  Result<bool> Bool(const std::string& key, const toml::value& v) const {
    if (!v.is_boolean()) return Fail(key, "expected true or false");
    return v.as_boolean();
  }
  Result<std::string> OneOf(const std::string& key, const toml::value& v,
                            std::initializer_list<const char*> allowed) const {
    KVFS_ASSIGN_OR_RETURN(std::string s, String(key, v));
    std::string list;
    for (const char* a : allowed) {
      if (s == a) return s;
      list += list.empty() ? a : std::string(", ") + a;
    }
    return Fail(key, "'" + s + "' is not one of " + list);
  }

 private:
  std::string path_;
};

// The storage keys (mirroring the command line). They may sit in [storage] or at the top level.
Status ApplyStorageKey(const Reader& r, const std::string& key, const std::string& shown,
                       const toml::value& v, MountOptions& o) {
  if (key == "data_dir") {
    KVFS_ASSIGN_OR_RETURN(o.data_dir, r.Path(shown, v));
    if (o.data_dir.empty()) return r.Fail(shown, "must not be empty");
  } else if (key == "capacity") {
    uint64_t bytes = 0;
    if (v.is_integer()) {
      KVFS_ASSIGN_OR_RETURN(int64_t n, r.Integer(shown, v, 0, INT64_MAX));
      bytes = static_cast<uint64_t>(n);
    } else {
      KVFS_ASSIGN_OR_RETURN(std::string s, r.String(shown, v));
      auto size = ParseSize(s);
      if (!size.ok()) return r.Fail(shown, size.status().message());
      bytes = *size;
    }
    if (bytes < (16ull << 20)) return r.Fail(shown, "must be at least 16M");
    o.capacity = bytes;
  } else if (key == "devices") {
    if (!v.is_array()) return r.Fail(shown, "expected an array of \"PATH[:SIZE]\" strings");
    o.devices.clear();
    for (const toml::value& d : v.as_array()) {
      KVFS_ASSIGN_OR_RETURN(std::string text, r.String(shown, d));
      auto spec = ParseDeviceSpec(text);
      if (!spec.ok()) return r.Fail(shown, spec.status().message());
      spec->path = r.Resolve(spec->path);
      o.devices.push_back(*spec);
    }
  } else if (key == "durability") {
    KVFS_ASSIGN_OR_RETURN(std::string s, r.OneOf(shown, v, {"close", "async"}));
    o.durability = s == "async" ? Durability::kAsync : Durability::kClose;
  } else if (key == "compress") {
    KVFS_ASSIGN_OR_RETURN(std::string s, r.OneOf(shown, v, {"off", "lz4", "auto"}));
    o.compression = s == "lz4"    ? Compression::kLz4
                    : s == "auto" ? Compression::kAuto
                                  : Compression::kOff;
  } else if (key == "eviction") {
    KVFS_ASSIGN_OR_RETURN(o.eviction, r.OneOf(shown, v, {"lru", "lfu", "fifo", "prefix"}));
  } else if (key == "high_watermark") {
    KVFS_ASSIGN_OR_RETURN(o.high_watermark, r.Fraction(shown, v));
  } else if (key == "low_watermark") {
    KVFS_ASSIGN_OR_RETURN(o.low_watermark, r.Fraction(shown, v));
  } else if (key == "log_level") {
    KVFS_ASSIGN_OR_RETURN(
        o.log_level,
        r.OneOf(shown, v, {"trace", "debug", "info", "warn", "error", "critical", "off"}));
  } else {
    return r.Fail(shown, "unknown key");
  }
  return Status::Ok();
}

bool IsStorageKey(const std::string& key) {
  static const std::set<std::string> kKeys = {"data_dir",       "capacity",      "devices",
                                              "durability",     "compress",      "eviction",
                                              "high_watermark", "low_watermark", "log_level"};
  return kKeys.count(key) != 0;
}

Status ApplyTable(const Reader& r, const std::string& table, const toml::value& v,
                  MountOptions& o) {
  if (!v.is_table()) return r.Fail(table, "expected a table [" + table + "]");
  ClusterSettings& c = o.cluster;
  for (const auto& [key, value] : v.as_table()) {
    const std::string shown = table + "." + key;
    if (table == "storage") {
      KVFS_RETURN_IF_ERROR(ApplyStorageKey(r, key, shown, value, o));
    } else if (table == "node") {
      if (key == "id") {
        KVFS_ASSIGN_OR_RETURN(int64_t id, r.Integer(shown, value, 1, 65535));
        c.node_id = static_cast<uint16_t>(id);
      } else if (key == "listen" || key == "advertise") {
        std::string& field = key == "listen" ? c.listen : c.advertise;
        KVFS_ASSIGN_OR_RETURN(field, r.String(shown, value));
        if (auto hp = ParsePeerAddress(field); !hp.ok())
          return r.Fail(shown, hp.status().message());
      } else {
        return r.Fail(shown, "unknown key");
      }
    } else if (table == "cluster") {
      if (key == "replicas") {
        KVFS_ASSIGN_OR_RETURN(int64_t n, r.Integer(shown, value, 1, kMaxReplicas));
        c.replicas = static_cast<uint32_t>(n);
      } else if (key == "secret_file") {
        KVFS_ASSIGN_OR_RETURN(c.secret_file, r.Path(shown, value));
      } else if (key == "transport") {
        KVFS_ASSIGN_OR_RETURN(c.transport, r.OneOf(shown, value, {"tcp", "rdma", "auto"}));
      } else if (key == "request_timeout_ms") {
        KVFS_ASSIGN_OR_RETURN(int64_t n, r.Integer(shown, value, 10, 600000));
        c.request_timeout_ms = static_cast<uint32_t>(n);
      } else if (key == "lease_ttl_s") {
        KVFS_ASSIGN_OR_RETURN(int64_t n, r.Integer(shown, value, 2, 3600));
        c.lease_ttl_s = static_cast<uint32_t>(n);
      } else if (key == "etcd_history_s") {
        KVFS_ASSIGN_OR_RETURN(int64_t n, r.Integer(shown, value, 0, 604800));
        c.etcd_history_s = static_cast<uint32_t>(n);
      } else if (key == "repair_bandwidth") {
        KVFS_ASSIGN_OR_RETURN(std::string text, r.String(shown, value));
        auto size = ParseSize(text);
        if (!size.ok() || *size < (1ull << 20))
          return r.Fail(shown, "expected a size of at least 1M (bytes per second)");
        c.repair_bandwidth = *size;
      } else if (key == "keep_local_copy") {
        KVFS_ASSIGN_OR_RETURN(c.keep_local_copy, r.Bool(shown, value));
      } else if (key == "etcd") {
        if (!value.is_array() || value.as_array().empty())
          return r.Fail(shown, "expected an array of endpoint URLs");
        c.etcd.clear();
        for (const toml::value& e : value.as_array()) {
          KVFS_ASSIGN_OR_RETURN(std::string url, r.String(shown, e));
          if (Status st = CheckEtcdEndpoint(url); !st.ok()) return r.Fail(shown, st.message());
          c.etcd.push_back(url);
        }
      } else if (key == "etcd_api") {
        KVFS_ASSIGN_OR_RETURN(c.etcd_api, r.OneOf(shown, value, {"grpc", "json"}));
      } else if (key == "etcd_prefix") {
        KVFS_ASSIGN_OR_RETURN(c.etcd_prefix, r.String(shown, value));
      } else if (key == "etcd_ca" || key == "etcd_cert" || key == "etcd_key") {
        std::string& field =
            key == "etcd_ca" ? c.etcd_ca : (key == "etcd_cert" ? c.etcd_cert : c.etcd_key);
        KVFS_ASSIGN_OR_RETURN(field, r.Path(shown, value));
      } else {
        return r.Fail(shown, "unknown key");
      }
    }
  }
  return Status::Ok();
}

}  // namespace

Status CheckEtcdEndpoint(std::string_view url) {
  const std::string shown = "'" + std::string(url) + "'";
  std::string_view rest;
  if (url.starts_with("http://")) {
    rest = url.substr(7);
  } else if (url.starts_with("https://")) {
    rest = url.substr(8);
  } else {
    return Status::Invalid("etcd endpoint " + shown +
                           ": use http://HOST:PORT or https://HOST:PORT");
  }
  if (!rest.empty() && rest.back() == '/') rest.remove_suffix(1);
  if (auto hp = ParsePeerAddress(rest); !hp.ok())
    return Status::Invalid("etcd endpoint " + shown + ": " + hp.status().message());
  return Status::Ok();
}

Result<std::vector<std::string>> ParseEtcdEndpoints(std::string_view text) {
  std::vector<std::string> urls;
  size_t start = 0;
  while (start <= text.size()) {
    size_t comma = text.find(',', start);
    if (comma == std::string_view::npos) comma = text.size();
    std::string_view one = text.substr(start, comma - start);
    KVFS_RETURN_IF_ERROR(CheckEtcdEndpoint(one));
    urls.emplace_back(one);
    start = comma + 1;
  }
  return urls;
}

// toml11 quotes the offending line in its message: a binary file (a wrong --config path) would
// spray raw bytes into the terminal. Control bytes and bytes that are not UTF-8 become \xNN,
// and the quote stops after 2 KiB.
static std::string Printable(const std::string& s) {
  std::string out;
  constexpr size_t kMaxShown = 2048;  // a file without newlines is quoted whole
  for (size_t i = 0; i < s.size();) {
    if (out.size() >= kMaxShown) {
      out += " ...";
      break;
    }
    const auto c = static_cast<unsigned char>(s[i]);
    size_t len = c < 0x80           ? 1
                 : (c >> 5) == 0x6  ? 2
                 : (c >> 4) == 0xe  ? 3
                 : (c >> 3) == 0x1e ? 4
                                    : 0;
    bool ok = len > 0 && i + len <= s.size() && (c >= 0x20 || c == '\n' || c == '\t') && c != 0x7f;
    for (size_t k = 1; ok && k < len; ++k) ok = (static_cast<unsigned char>(s[i + k]) >> 6) == 0x2;
    if (ok) {
      out.append(s, i, len);
      i += len;
    } else {
      static const char* hex = "0123456789abcdef";
      out += "\\x";
      out += hex[c >> 4];
      out += hex[c & 0xf];
      ++i;
    }
  }
  return out;
}

// The whole file, read here rather than by toml11: toml11 sizes its read by seeking, so
// /dev/zero parsed as an empty config (kvfs started with every default).
static Result<std::string> ReadConfigText(const std::string& path) {
  KVFS_ASSIGN_OR_RETURN(std::string text, ReadSmallFile(path, 1 << 20, "config"));
  if (text.find('\0') != std::string::npos)
    return Status::Invalid("config " + path + ": has NUL bytes: not a TOML text file");
  return text;
}

Status LoadConfigFile(const std::string& path, MountOptions& options) {
  Reader r(path);
  KVFS_ASSIGN_OR_RETURN(std::string text, ReadConfigText(path));
  toml::value root;
  // toml11 reports syntax errors by throwing; nothing past this point throws.
  try {
    std::istringstream in(text);
    root = toml::parse(in, path);
  } catch (const std::exception& e) {
    return Status::Invalid("config " + path + ": " + Printable(e.what()));
  }
  if (!root.is_table()) return Status::Invalid("config " + path + ": not a TOML table");
  for (const auto& [key, value] : root.as_table()) {
    if (key == "storage" || key == "node" || key == "cluster") {
      KVFS_RETURN_IF_ERROR(ApplyTable(r, key, value, options));
    } else if (IsStorageKey(key)) {
      KVFS_RETURN_IF_ERROR(ApplyStorageKey(r, key, key, value, options));
    } else {
      return r.Fail(key, "unknown key");
    }
  }
  return Status::Ok();
}

Status ValidateClusterSettings(const ClusterSettings& c) {
  if (!c.enabled()) {
    if (c.node_id != 0 || !c.listen.empty())
      return Status::Invalid(
          "--node-id and --listen are cluster settings: give the cluster's etcd endpoints "
          "(--etcd URL[,URL...] or [cluster] etcd) too");
    return Status::Ok();
  }
  if (c.node_id == 0)
    return Status::Invalid("cluster mode needs a node id (--node-id or [node] id, 1..65535)");
  if (c.listen.empty())
    return Status::Invalid(
        "cluster mode needs a peer address (--listen HOST:PORT or [node] listen)");
  KVFS_ASSIGN_OR_RETURN(PeerAddress listen, ParsePeerAddress(c.listen));
  // Other nodes dial what a node advertises. A wildcard there makes every node dial itself:
  // each takes its own replies for the peer's, copies land on the writer, reads find nothing.
  if (c.advertise.empty() && IsWildcardHost(listen.host))
    return Status::Invalid("--listen " + c.listen +
                           " is a wildcard address other nodes cannot dial: give the address "
                           "they reach this node at (--advertise HOST:PORT or [node] advertise)");
  if (!c.advertise.empty()) {
    KVFS_ASSIGN_OR_RETURN(PeerAddress advertise, ParsePeerAddress(c.advertise));
    if (IsWildcardHost(advertise.host))
      return Status::Invalid("--advertise " + c.advertise +
                             " is a wildcard address other nodes cannot dial: give this node's "
                             "own address");
  }
  for (const std::string& url : c.etcd) KVFS_RETURN_IF_ERROR(CheckEtcdEndpoint(url));
  if (c.etcd_prefix.empty() || c.etcd_prefix.front() != '/')
    return Status::Invalid("the etcd prefix must start with '/'");
  if (c.etcd_cert.empty() != c.etcd_key.empty())
    return Status::Invalid("etcd TLS: give both a client certificate and its key, or neither");
  // Read here once, so a device or FIFO given by mistake fails now, not inside libcurl's TLS
  // handshake (which reads /dev/zero for ever). 16 MiB: a system CA bundle is a few hundred KiB.
  for (const std::string* f : {&c.etcd_ca, &c.etcd_cert, &c.etcd_key}) {
    if (f->empty()) continue;
    auto text = ReadSmallFile(*f, 16 << 20, "etcd TLS file");
    if (!text.ok()) return Status::Invalid(text.status().message());
  }
  if (c.replicas < 1 || c.replicas > kMaxReplicas)
    return Status::Invalid("replicas must be 1.." + std::to_string(kMaxReplicas));
  if (c.request_timeout_ms < 10) return Status::Invalid("request timeout must be >= 10 ms");
  if (c.secret_file.empty())
    return Status::Invalid(
        "cluster mode needs a shared secret (--secret-file or "
        "[cluster] secret_file)");
  if (access(c.secret_file.c_str(), R_OK) != 0)
    return Status::Invalid("secret file " + c.secret_file + ": " + std::strerror(errno));
  auto secret = SharedSecret::FromFile(c.secret_file);
  if (!secret.ok()) return Status::Invalid("secret file: " + secret.status().message());
  auto kind = ParseTransportKind(c.transport);
  if (!kind.ok()) return kind.status();
  if (*kind == TransportKind::kRdma && !RdmaDeviceAvailable())
    return Status::Invalid(
        "transport \"rdma\" but this host has no RDMA device "
        "(use \"tcp\", or \"auto\" to fall back to TCP)");
  return Status::Ok();
}

}  // namespace kvfs::fs
