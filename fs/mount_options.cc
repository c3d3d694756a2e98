#include "mount_options.h"

#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>

#include "config_file.h"
#include "fuse_option_list.h"
#include "kvfs/size.h"
#include "kvfs/store.h"
#include "kvfs/transport.h"
#include "kvfs/version.h"
#include "mount_info.h"

namespace kvfs::fs {
namespace {

// Splits each -o value at commas (as libfuse does, escapes and all), takes config=PATH out of
// it (ours, not libfuse's), and keeps the rest as given.
std::string TakeConfigOption(std::vector<std::string>& fuse_options) {
  std::string config;
  std::vector<std::string> kept;
  for (const std::string& value : fuse_options) {
    std::string rest;
    for (const std::string& item : SplitOptionList(value)) {
      if (item.starts_with("config=")) {
        config = UnescapeOption(item.substr(7));
      } else if (!item.empty()) {
        rest += (rest.empty() ? "" : ",") + item;
      }
    }
    if (!rest.empty()) kept.push_back(rest);
  }
  fuse_options = std::move(kept);
  return config;
}

}  // namespace

Result<DeviceSpec> ParseDeviceSpec(const std::string& text) {
  DeviceSpec spec;
  // PATH[:SIZE]: the size is whatever follows the last ':' when it parses as a size, so paths
  // containing ':' still work when no size is given.
  auto colon = text.rfind(':');
  if (colon != std::string::npos && colon + 1 < text.size()) {
    auto size = ParseSize(std::string_view(text).substr(colon + 1));
    if (size.ok()) {
      spec.path = text.substr(0, colon);
      spec.size = *size;
    } else {
      spec.path = text;
    }
  } else {
    spec.path = text;
  }
  if (spec.path.empty()) return Status::Invalid("--device needs a path: '" + text + "'");
  return spec;
}

const char* DurabilityName(Durability d) { return d == Durability::kClose ? "close" : "async"; }

const char* CompressionName(Compression c) {
  switch (c) {
    case Compression::kOff:
      return "off";
    case Compression::kLz4:
      return "lz4";
    case Compression::kAuto:
      return "auto";
  }
  return "off";
}

bool DevicesHaveSizes(const MountOptions& options) {
  return !options.devices.empty() && std::all_of(options.devices.begin(), options.devices.end(),
                                                 [](const DeviceSpec& d) { return d.size > 0; });
}

bool AtOrUnder(const std::string& path, const std::string& dir) {
  std::error_code ec;
  // Symlinks resolved as far as the paths exist: a link into the mountpoint is on it too.
  std::filesystem::path p = std::filesystem::weakly_canonical(path, ec);
  if (ec) p = std::filesystem::path(path).lexically_normal();
  std::filesystem::path d = std::filesystem::weakly_canonical(dir, ec);
  if (ec) d = std::filesystem::path(dir).lexically_normal();
  const std::filesystem::path rel = p.lexically_relative(d);
  return !rel.empty() && *rel.begin() != "..";
}

std::string DefaultDataDir() {
  if (geteuid() == 0) return "/var/lib/kvfs";
  if (const char* xdg = std::getenv("XDG_DATA_HOME"); xdg && *xdg)
    return std::string(xdg) + "/kvfs";
  if (const char* home = std::getenv("HOME"); home && *home)
    return std::string(home) + "/.local/share/kvfs";
  return "/tmp/kvfs-" + std::to_string(geteuid());
}

uint64_t DefaultCapacity(uint64_t free_bytes) {
  constexpr uint64_t kMin = 256ull << 20, kMax = 64ull << 30;
  return std::clamp<uint64_t>(free_bytes / 4, kMin, kMax) & ~uint64_t{4095};
}

ParsedCommandLine ParseMountOptions(int argc, char** argv) {
  ParsedCommandLine out;
  MountOptions opts;
  // The command line is parsed into its own variables first: a config file fills `opts`, and
  // only the flags actually given (app.count) override it.
  MountOptions cli;
  std::string capacity, durability = "close", compression = "off";
  std::vector<std::string> devices;
  std::string config_path;
  int node_id = 0;
  std::string etcd, repair_bandwidth;
  uint32_t replicas = 0, request_timeout_ms = 0, lease_ttl_s = 0, etcd_history_s = 0;

  CLI::App app{"kvfs: a FUSE filesystem for LLM KV-cache files, backed by a local chunk engine",
               "kvfs"};
  app.set_version_flag("--version", std::string("kvfs ") + KVFS_VERSION);
  app.add_option("MOUNTPOINT", opts.mountpoint, "Directory to mount on")->required();
  app.add_option("--config", config_path,
                 "TOML configuration file (kvfs.conf(5)); flags override it. Also -o config=PATH");
  app.add_option("--data", cli.data_dir,
                 "Data directory: journal, checkpoint, default device (default: /var/lib/kvfs "
                 "as root, else $XDG_DATA_HOME/kvfs)");
  app.add_option("--capacity", capacity,
                 "Data capacity, e.g. 256M, 20G (default: 25% of the data dir's free space, "
                 "at most 64G)");
  app.add_option("--device", devices, "Device file or block device PATH[:SIZE] (repeatable)");
  app.add_option("--durability", durability,
                 "close: close(2) returns once data is durable; "
                 "async: persistence follows in the background")
      ->check(CLI::IsMember({"close", "async"}));
  app.add_option("--compress", compression, "Segment compression: off, lz4 or auto")
      ->check(CLI::IsMember({"off", "lz4", "auto"}));
  app.add_option("--eviction", cli.eviction,
                 "Eviction policy when the cache is full: lru (default), lfu, fifo, prefix")
      ->check(CLI::IsMember({"lru", "lfu", "fifo", "prefix"}));
  app.add_option("--high-watermark", cli.high_watermark,
                 "Evict once used space passes this fraction of capacity (default 0.90)");
  app.add_option("--low-watermark", cli.low_watermark,
                 "Evict down to this fraction of capacity (default 0.80; below the high one)");
  app.add_flag("-f,--foreground", opts.foreground, "Stay in the foreground, log to stderr");
  app.add_option("-o", opts.fuse_options, "FUSE mount options (comma-separated, repeatable)");
  app.add_option("--log-level", cli.log_level, "trace, debug, info, warn, error")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error", "critical", "off"}));
  app.add_option("--store", opts.store, "")->group("")->check(CLI::IsMember({"local", "memory"}));
  app.add_option("--metrics", opts.metrics,
                 "Serve Prometheus metrics at http://ADDR:PORT/metrics (off by default)");
  // Cluster mode (docs/cluster.md): on when etcd endpoints are given.
  app.add_option("--etcd", etcd,
                 "Cluster mode: etcd endpoints URL[,URL...] (http://HOST:PORT or https://...)");
  app.add_option("--etcd-prefix", cli.cluster.etcd_prefix,
                 "Prefix of every etcd key of this cluster (default /kvfs/)");
  app.add_option("--etcd-api", cli.cluster.etcd_api,
                 "How to speak to etcd: grpc (default) or json (its HTTP/1.1 gateway)")
      ->check(CLI::IsMember({"grpc", "json"}));
  app.add_option("--etcd-ca", cli.cluster.etcd_ca, "CA bundle that verifies etcd (https)");
  app.add_option("--etcd-cert", cli.cluster.etcd_cert, "Client certificate for etcd (PEM)");
  app.add_option("--etcd-key", cli.cluster.etcd_key, "Client key for etcd (PEM)");
  app.add_option("--node-id", node_id, "This node's id in the cluster, 1..65535")
      ->check(CLI::Range(1, 65535));
  app.add_option("--listen", cli.cluster.listen, "Serve peers on HOST:PORT (cluster mode)");
  app.add_option("--advertise", cli.cluster.advertise,
                 "HOST:PORT peers reach this node at (default: --listen)");
  app.add_option("--replicas", replicas, "Copies of each chunk, the writer's included")
      ->check(CLI::Range(1u, kMaxReplicas));
  app.add_option("--lease-ttl", lease_ttl_s,
                 "Seconds after which a silent node counts as down (default 5)")
      ->check(CLI::Range(2, 3600));
  app.add_option("--etcd-history", etcd_history_s,
                 "Seconds of etcd history kept; the lowest live node compacts the rest "
                 "(default 300; 0: never, etcd's own auto-compaction does)")
      ->check(CLI::Range(0, 604800));
  app.add_option("--repair-bandwidth", repair_bandwidth,
                 "Bytes per second this node copies to repair lost replicas (default 256M)");
  app.add_option("--secret-file", cli.cluster.secret_file,
                 "File with the cluster's shared secret (at least 16 bytes)");
  app.add_option("--transport", cli.cluster.transport,
                 "Peer transport: tcp, rdma, or auto (RDMA when a device exists, else TCP)")
      ->check(CLI::IsMember({"tcp", "rdma", "auto"}));
  app.add_option("--request-timeout", request_timeout_ms,
                 "Deadline of one request to a peer, in milliseconds (default 1000)")
      ->check(CLI::Range(10, 600000));

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForVersion&) {
    out.message = std::string("kvfs ") + KVFS_VERSION + "\n";
    return out;
  } catch (const CLI::Success&) {
    out.message = app.help();
    return out;
  } catch (const CLI::ParseError& e) {
    out.exit_code = 2;
    out.message = std::string("kvfs: ") + e.what() + "\nRun with --help for usage.\n";
    return out;
  }

  auto fail = [&](const std::string& msg) {
    out.exit_code = 2;
    out.message = "kvfs: " + msg + "\n";
    return out;
  };
  if (std::string from_o = TakeConfigOption(opts.fuse_options); !from_o.empty()) {
    if (!config_path.empty() && config_path != from_o)
      return fail("both --config and -o config= given");
    config_path = from_o;
  }
  if (!config_path.empty()) {
    std::error_code ec;
    opts.config_file = std::filesystem::absolute(config_path, ec).lexically_normal().string();
    if (Status st = LoadConfigFile(opts.config_file, opts); !st.ok()) return fail(st.message());
  }
  const bool given_devices = app.count("--device") > 0;
  if (app.count("--data")) opts.data_dir = cli.data_dir;
  if (app.count("--eviction")) opts.eviction = cli.eviction;
  if (app.count("--high-watermark")) opts.high_watermark = cli.high_watermark;
  if (app.count("--low-watermark")) opts.low_watermark = cli.low_watermark;
  if (app.count("--log-level")) opts.log_level = cli.log_level;
  if (app.count("--node-id")) opts.cluster.node_id = static_cast<uint16_t>(node_id);
  if (app.count("--listen")) opts.cluster.listen = cli.cluster.listen;
  if (app.count("--replicas")) opts.cluster.replicas = replicas;
  if (app.count("--secret-file")) opts.cluster.secret_file = cli.cluster.secret_file;
  if (app.count("--transport")) opts.cluster.transport = cli.cluster.transport;
  if (app.count("--request-timeout")) opts.cluster.request_timeout_ms = request_timeout_ms;
  if (app.count("--advertise")) opts.cluster.advertise = cli.cluster.advertise;
  if (app.count("--etcd-prefix")) opts.cluster.etcd_prefix = cli.cluster.etcd_prefix;
  if (app.count("--etcd-api")) opts.cluster.etcd_api = cli.cluster.etcd_api;
  if (app.count("--etcd-ca")) opts.cluster.etcd_ca = cli.cluster.etcd_ca;
  if (app.count("--etcd-cert")) opts.cluster.etcd_cert = cli.cluster.etcd_cert;
  if (app.count("--etcd-key")) opts.cluster.etcd_key = cli.cluster.etcd_key;
  if (app.count("--lease-ttl")) opts.cluster.lease_ttl_s = lease_ttl_s;
  if (app.count("--etcd-history")) opts.cluster.etcd_history_s = etcd_history_s;
  if (app.count("--repair-bandwidth")) {
    auto size = ParseSize(repair_bandwidth);
    if (!size.ok() || *size < (1ull << 20))
      return fail("--repair-bandwidth: expected a size of at least 1M per second");
    opts.cluster.repair_bandwidth = *size;
  }
  if (app.count("--etcd")) {
    auto urls = ParseEtcdEndpoints(etcd);
    if (!urls.ok()) return fail("--etcd: " + urls.status().message());
    opts.cluster.etcd = *urls;
  }
  if (app.count("--listen")) {
    if (auto hp = ParsePeerAddress(opts.cluster.listen); !hp.ok())
      return fail("--listen: " + hp.status().message());
  }
  if (app.count("--advertise")) {
    if (auto hp = ParsePeerAddress(opts.cluster.advertise); !hp.ok())
      return fail("--advertise: " + hp.status().message());
  }
  // The daemon runs in / once it detaches: relative paths are the caller's.
  for (std::string* f : {&opts.cluster.secret_file, &opts.cluster.etcd_ca, &opts.cluster.etcd_cert,
                         &opts.cluster.etcd_key}) {
    std::error_code ec;
    if (!f->empty()) *f = std::filesystem::absolute(*f, ec).lexically_normal().string();
  }
  if (Status st = ValidateClusterSettings(opts.cluster); !st.ok()) return fail(st.message());
  if (!capacity.empty()) {
    auto size = ParseSize(capacity);
    if (!size.ok()) return fail("--capacity: " + size.status().message());
    if (*size < (16ull << 20)) return fail("--capacity must be at least 16M");
    opts.capacity = *size;
  }
  if (!(opts.high_watermark > 0.0 && opts.high_watermark <= 1.0))
    return fail("--high-watermark must be a fraction in (0, 1]");
  if (!(opts.low_watermark > 0.0 && opts.low_watermark < opts.high_watermark))
    return fail("--low-watermark must be above 0 and below --high-watermark");
  if (given_devices) {
    opts.devices.clear();
    for (const auto& d : devices) {
      auto spec = ParseDeviceSpec(d);
      if (!spec.ok()) return fail(spec.status().message());
      opts.devices.push_back(*spec);
    }
  }
  if (app.count("--durability"))
    opts.durability = durability == "async" ? Durability::kAsync : Durability::kClose;
  if (app.count("--compress"))
    opts.compression = compression == "lz4"    ? Compression::kLz4
                       : compression == "auto" ? Compression::kAuto
                                               : Compression::kOff;
  std::error_code ec;
  auto mp = std::filesystem::absolute(opts.mountpoint, ec);
  if (ec) return fail("bad mountpoint '" + opts.mountpoint + "'");
  std::string normal = mp.lexically_normal().string();
  if (normal.size() > 1 && normal.back() == '/') normal.pop_back();
  // mountinfo has real paths: the parent resolved, as the kernel shows it (the mount point
  // itself is not resolved, so that a dead mount there is not touched).
  std::string probe = normal;
  if (auto parent = std::filesystem::canonical(mp.lexically_normal().parent_path(), ec); !ec)
    probe = (parent / std::filesystem::path(normal).filename()).string();
  std::string on_it;
  const MountState there = ProbeMount(probe, &on_it);
  if (there == MountState::kNotAnswering && on_it == "fuse.kvfs")
    return fail("mountpoint '" + normal +
                "' holds a kvfs mount whose daemon does not answer (stopped?); unmount it first");
  if (there == MountState::kAnswering && on_it == "fuse.kvfs")
    return fail("mountpoint '" + normal +
                "' already has a live kvfs mount (another daemon serves it)");
  if (there == MountState::kDead) {
    // The mount of a daemon that died (kill -9, OOM): detach it, or this mount would stack on
    // a corpse that the next unmount uncovers. Anything else dead there is not ours to touch.
    if (on_it != "fuse.kvfs")
      return fail("mountpoint '" + normal + "' holds a dead " + on_it +
                  " mount; unmount it first (fusermount3 -u or umount)");
    if (Status detached = DetachMount(probe); !detached.ok()) return fail(detached.message());
    std::fprintf(stderr, "kvfs: detached the dead kvfs mount on %s (its daemon is gone)\n",
                 normal.c_str());
  }
  struct stat st;
  const int rc = ::stat(normal.c_str(), &st);
  if (rc != 0 || !S_ISDIR(st.st_mode))
    return fail("mountpoint '" + opts.mountpoint + "' is not an existing directory");
  opts.mountpoint = std::move(normal);
  // Relative paths are the caller's: the daemon runs in / once it detaches (a relative device
  // file was made in /).
  if (!opts.data_dir.empty()) {
    opts.data_dir = std::filesystem::absolute(opts.data_dir, ec).lexically_normal().string();
    if (opts.data_dir.size() > 1 && opts.data_dir.back() == '/') opts.data_dir.pop_back();
  }
  for (DeviceSpec& d : opts.devices)
    d.path = std::filesystem::absolute(d.path, ec).lexically_normal().string();
  // The engine opens files by path while it runs (journals, checkpoints): on the mount they
  // would be requests to this very daemon, which would find no such file, so checkpoints
  // failed and the journal grew without bound.
  const std::string data_dir = opts.data_dir.empty() ? DefaultDataDir() : opts.data_dir;
  if (AtOrUnder(data_dir, opts.mountpoint))
    return fail("data directory '" + data_dir + "' is on the mount itself (" + opts.mountpoint +
                "); keep kvfs's data outside its mountpoint");
  for (const DeviceSpec& d : opts.devices) {
    if (AtOrUnder(d.path, opts.mountpoint))
      return fail("device '" + d.path + "' is on the mount itself (" + opts.mountpoint +
                  "); keep kvfs's data outside its mountpoint");
  }
  out.options = std::move(opts);
  return out;
}

Status ResolveDefaults(MountOptions& options) {
  if (options.data_dir.empty()) options.data_dir = DefaultDataDir();
  std::error_code ec;
  std::filesystem::create_directories(options.data_dir, ec);
  if (ec)
    return Status::Error(ec.value(),
                         "cannot create data dir " + options.data_dir + ": " + ec.message());
  // Devices that all have a size hold what they hold: the capacity is theirs.
  if (options.capacity == 0 && DevicesHaveSizes(options)) {
    for (const DeviceSpec& d : options.devices) options.capacity += d.size;
  }
  if (options.capacity == 0) {
    struct statvfs sv;
    if (statvfs(options.data_dir.c_str(), &sv) != 0)
      return Status::Error(errno, "statvfs " + options.data_dir);
    options.capacity = DefaultCapacity(static_cast<uint64_t>(sv.f_bavail) * sv.f_frsize);
  }
  return Status::Ok();
}

}  // namespace kvfs::fs
