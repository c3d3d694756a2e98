// The daemon's TOML configuration file (man kvfs.conf(5)): `kvfs MOUNTPOINT --config PATH` or
// `-o config=PATH`. The file fills a MountOptions first; command-line flags then override it
// (mount_options.cc). Everything here is parse-and-validate only: errors are Status values whose
// message names the file and the key, and the caller turns them into exit status 2.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "kvfs/status.h"

namespace kvfs::fs {

struct MountOptions;
struct ClusterSettings;

// "URL[,URL...]" as given to --etcd: each http:// or https:// with a host and a port.
Result<std::vector<std::string>> ParseEtcdEndpoints(std::string_view text);
Status CheckEtcdEndpoint(std::string_view url);

// Reads `path` and sets every key it names in `options`. Unknown keys or tables, wrong types and
// bad values are errors (EINVAL, message "config PATH: KEY: why").
Status LoadConfigFile(const std::string& path, MountOptions& options);

// Checks the cluster settings once file and flags are merged: node id, listen address, etcd
// endpoints, readable TLS files, a readable non-empty secret file, a transport this host can
// use. Single-node settings (no etcd) always pass; cluster keys without --etcd are an error.
Status ValidateClusterSettings(const ClusterSettings& cluster);

}  // namespace kvfs::fs
