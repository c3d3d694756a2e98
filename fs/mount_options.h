// MountOptions: everything `kvfs MOUNTPOINT ...` accepts, and its command-line parser. Kept apart
// from the daemon so a config file (--config, TOML) can fill the same struct later: the file
// sets values first and the command line overrides them.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "kvfs/local_engine.h"
#include "kvfs/status.h"

namespace kvfs::fs {

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
};

// What the command line asked for: run with `options`, or exit at once with `exit_code` after
// printing `message` (help and version exit 0, bad input exits 2).
struct ParsedCommandLine {
  std::optional<MountOptions> options;
  int exit_code = 0;
  std::string message;
};

ParsedCommandLine ParseMountOptions(int argc, char** argv);

// Fills what the user left out: the data directory (created if missing) and the capacity
// (25% of the data dir's free space, at least 256 MiB, at most 64 GiB).
Status ResolveDefaults(MountOptions& options);

// The defaults ResolveDefaults() uses, exposed for --help and tests.
std::string DefaultDataDir();
uint64_t DefaultCapacity(uint64_t free_bytes);

const char* DurabilityName(Durability d);
const char* CompressionName(Compression c);

}  // namespace kvfs::fs
