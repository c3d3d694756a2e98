// MountOptions: everything `kvfs MOUNTPOINT ...` accepts, and its command-line parser. A TOML
// config file (--config PATH or -o config=PATH, config_file.h) fills the same struct first and
// the command line overrides it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "kvfs/local_engine.h"
#include "kvfs/status.h"

namespace kvfs::fs {

// The cluster part of the options (docs/cluster.md, kvfs.conf(5)). Cluster mode is on when etcd
// endpoints are given; otherwise kvfs runs as the single node it always was.
struct ClusterSettings {
  uint16_t node_id = 0;           // 1..65535, unique among live nodes (0: not set)
  std::string listen;             // HOST:PORT the peer server binds
  std::string advertise;          // HOST:PORT peers are told (default: listen)
  std::vector<std::string> etcd;  // endpoint URLs (http:// or https://)
  std::string etcd_prefix = "/kvfs/";
  std::string etcd_api = "grpc";             // grpc | json (etcd's v3 JSON gateway, over HTTP/1.1)
  std::string etcd_ca, etcd_cert, etcd_key;  // TLS: CA bundle, client certificate and key
  uint32_t replicas = 2;                     // R: copies of each chunk, the writer's included
  std::string secret_file;                   // the shared secret peers prove (>= 16 bytes)
  std::string transport = "auto";  // tcp | rdma | auto (RDMA when a device exists, else TCP)
  uint32_t request_timeout_ms = 1000;
  uint32_t lease_ttl_s = 5;                  // a node silent this long is down
  uint32_t etcd_history_s = 300;             // etcd history kept (0: kvfs never compacts)
  uint64_t repair_bandwidth = 256ull << 20;  // bytes/s this node copies for repair
  bool keep_local_copy = true;               // the writer keeps the first copy
  bool enabled() const { return !etcd.empty(); }
};

struct MountOptions {
  std::string mountpoint;           // absolute path
  std::string data_dir;             // empty until ResolveDefaults()
  uint64_t capacity = 0;            // 0: a share of the data dir's free space
  std::vector<DeviceSpec> devices;  // empty: one device file under data_dir
  Durability durability = Durability::kClose;
  Compression compression = Compression::kOff;
  std::string eviction = "lru";  // bounded cache policy: lru, lfu, fifo, prefix
  double high_watermark = 0.90;  // evict when used bytes pass this share of capacity...
  double low_watermark = 0.80;   // ...down to this share
  bool foreground = false;
  std::vector<std::string> fuse_options;  // each -o value, passed to libfuse as given
  std::string log_level = "info";
  // --metrics ADDR:PORT: serve Prometheus metrics there (metrics_server.h); empty: off.
  std::string metrics;
  std::string store = "local";  // hidden: "memory" runs without persistence (debug)
  std::string config_file;      // --config or -o config=PATH; empty: none
  ClusterSettings cluster;
};

// What the command line asked for: run with `options`, or exit at once with `exit_code` after
// printing `message` (help and version exit 0, bad input exits 2).
struct ParsedCommandLine {
  std::optional<MountOptions> options;
  int exit_code = 0;
  std::string message;
};

ParsedCommandLine ParseMountOptions(int argc, char** argv);

// "PATH[:SIZE]" as given to --device (and in the config file's devices list).
Result<DeviceSpec> ParseDeviceSpec(const std::string& text);

// Fills what the user left out: the data directory (created if missing) and the capacity
// (25% of the data dir's free space, at least 256 MiB, at most 64 GiB).
Status ResolveDefaults(MountOptions& options);

// The defaults ResolveDefaults() uses, exposed for --help and tests.
std::string DefaultDataDir();
// Whether every device has a size (then they hold what they hold, whatever the capacity).
bool DevicesHaveSizes(const MountOptions& options);
// Whether `path` is `dir` or lies under it, symlinks resolved as far as both exist.
bool AtOrUnder(const std::string& path, const std::string& dir);
uint64_t DefaultCapacity(uint64_t free_bytes);

const char* DurabilityName(Durability d);
const char* CompressionName(Compression c);

}  // namespace kvfs::fs
