// Control: the hidden MOUNTPOINT/.kvfs/ directory and the per-file xattrs.
//
//   .kvfs/status  read-only JSON snapshot (taken at open)
//   .kvfs/stats   read-only "key value" lines (taken at open)
//   .kvfs/nodes   read-only JSON: this node and its cluster peers (one node when single)
//   .kvfs/ctl     transactional: open O_RDWR, write one command line, read the JSON reply on the
//                 same fd. Commands are registered by name (Register), so later ones (pin,
//                 evict, verify) slot in without touching the FUSE layer.
//
// The directory is found by lookup but never listed in the root, so find/du/ls -a skip it.
// Its inode numbers sit at the top of the 64-bit range, far above any object id.
#pragma once

#include <sys/stat.h>

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kvfs/chunk_store.h"
#include "namespace.h"

namespace kvfs::fs {

struct DaemonInfo {
  std::string mountpoint;
  std::string data_dir;
  std::vector<std::string> devices;  // as configured; the store's own list wins when it has one
  std::string durability = "close";
  std::string compression = "off";
  std::string metrics;  // the Prometheus endpoint actually bound (HOST:PORT); empty: off
};

struct ControlHandle {
  uint64_t ino = 0;
  std::string content;  // snapshot (status, stats) or the last ctl reply
  size_t cursor = 0;    // ctl: the next reply byte a read returns, whatever the offset
  // ctl opened write-only (`echo sync > .kvfs/ctl`): no reply can be read, so a command that
  // fails fails the write with its errno.
  bool write_only = false;
  std::mutex mu;
};

class Control {
 public:
  static constexpr uint64_t kDirIno = 0xFFFFFFFFFFFFFF00ull;
  static constexpr uint64_t kStatusIno = kDirIno + 1;
  static constexpr uint64_t kStatsIno = kDirIno + 2;
  static constexpr uint64_t kCtlIno = kDirIno + 3;
  static constexpr uint64_t kNodesIno = kDirIno + 4;
  static bool Owns(uint64_t ino) { return ino >= kDirIno; }
  // Whether lookup(parent, name) is ours to answer.
  static bool Handles(uint64_t parent, std::string_view name) {
    return Owns(parent) || (parent == kRootId && name == kControlDirName);
  }

  using Command = std::function<Result<nlohmann::json>(const std::vector<std::string>& args)>;

  Control(Namespace* ns, ChunkStore* store, DaemonInfo info);

  Result<EntryInfo> Lookup(uint64_t parent, std::string_view name);
  Result<EntryInfo> GetAttr(uint64_t ino);
  Status Readdir(uint64_t ino, uint64_t offset,
                 const std::function<bool(const std::string&, uint64_t, uint32_t, uint64_t)>& emit);
  Result<ControlHandle*> Open(uint64_t ino, int flags);
  Result<size_t> Read(ControlHandle* h, uint64_t offset, char* out, size_t len);
  Result<size_t> Write(ControlHandle* h, const char* data, size_t len);
  void Release(ControlHandle* h) { delete h; }

  void Register(const std::string& name, const std::string& help, Command command);
  // .kvfs/nodes and user.kvfs.location: the store's ClusterView and PlacementView (a single
  // node describes itself as node 0).
  nlohmann::json NodesJson();
  Result<nlohmann::json> LocationJson(uint64_t ino);
  // Runs one command line; the reply always has "ok" and, on failure, "errno" and "error".
  nlohmann::json Execute(const std::string& line);

  nlohmann::json StatusJson();
  std::string StatsText();
  // Per-file details for the user.kvfs.stat xattr.
  Result<nlohmann::json> FileStatJson(uint64_t ino);
  // The value of a user.kvfs.* xattr (ENODATA when unknown). None is listed (OnListxattr).
  Result<std::string> GetXattr(uint64_t ino, std::string_view name);
  // user.kvfs.checksum: "xxh3:" and 16 hex digits, XXH3_64 of the published version's
  // per-segment checksums (each 8 bytes little-endian, in file order). ENODATA off files.
  Result<std::string> Checksum(uint64_t ino);
  // user.kvfs.verify: reads and checks every segment of the published version; "ok" or EIO.
  Result<std::string> Verify(uint64_t ino);

 private:
  struct Registered {
    std::string help;
    Command command;
  };
  Namespace* ns_;
  ChunkStore* store_;
  DaemonInfo info_;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  std::mutex mu_;
  std::map<std::string, Registered> commands_;
};

}  // namespace kvfs::fs
