// kvfsctl: looks at and steers a running kvfs mount through its control surface (.kvfs/status,
// .kvfs/stats and the user.kvfs.* xattrs); `hash` needs no mount. One file per command under
// fs/kvfsctl/; exit codes and the shared helpers are in kvfsctl.h (0 ok, 1 failure or missing
// path, 2 usage errors and paths not on a kvfs mount).
#include "kvfsctl.h"

#include <sys/xattr.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "json_text.h"
#include "kvfs/size.h"
#include "kvfs/version.h"

namespace kvfs::fs {
namespace {

std::string Duration(double s) {
  long t = std::lround(s);
  char buf[64];
  if (t >= 86400)
    std::snprintf(buf, sizeof buf, "%ldd %ldh", t / 86400, (t % 86400) / 3600);
  else if (t >= 3600)
    std::snprintf(buf, sizeof buf, "%ldh %ldm", t / 3600, (t % 3600) / 60);
  else if (t >= 60)
    std::snprintf(buf, sizeof buf, "%ldm %lds", t / 60, t % 60);
  else
    std::snprintf(buf, sizeof buf, "%lds", t);
  return buf;
}

std::string Time(double t) {
  time_t sec = static_cast<time_t>(t);
  struct tm tm;
  localtime_r(&sec, &tm);
  char buf[64];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S", &tm);
  char out[96];
  std::snprintf(out, sizeof out, "%s.%03d", buf, static_cast<int>((t - sec) * 1000));
  return out;
}

uint64_t U(const nlohmann::json& j, const char* key) {
  return j.contains(key) && j[key].is_number() ? j[key].get<uint64_t>() : 0;
}

}  // namespace

bool PrintRecoveryDamage(const nlohmann::json& s, FILE* out) {
  const uint64_t records = U(s, "recovery_damaged_records");
  const uint64_t checkpoints = U(s, "recovery_damaged_checkpoints");
  const uint64_t superblocks = U(s, "recovery_repaired_superblocks");
  if (records + checkpoints + superblocks == 0) return false;
  std::fprintf(out,
               "  DAMAGE found at the last start: %llu journal records lost, %llu checkpoints "
               "unusable, %llu superblocks restored from their backup\n",
               static_cast<unsigned long long>(records),
               static_cast<unsigned long long>(checkpoints),
               static_cast<unsigned long long>(superblocks));
  for (const auto& note : s.value("recovery_notes", nlohmann::json::array())) {
    if (note.is_string()) std::fprintf(out, "    %s\n", note.get<std::string>().c_str());
  }
  return true;
}

namespace {

void PrintStatus(const nlohmann::json& s) {
  uint64_t cap = U(s, "capacity_bytes"), used = U(s, "used_bytes");
  double pct = cap ? 100.0 * static_cast<double>(used) / static_cast<double>(cap) : 0.0;
  const uint64_t hits = U(s, "hits"), misses = U(s, "misses");
  std::printf("kvfs %s on %s (pid %lld, up %s)\n", s.value("version", "?").c_str(),
              s.value("mountpoint", "?").c_str(), static_cast<long long>(U(s, "pid")),
              Duration(s.value("uptime_s", 0.0)).c_str());
  std::printf("  data dir      %s\n", s.value("data_dir", "").c_str());
  std::string devices;
  for (const auto& d : s.value("devices", nlohmann::json::array()))
    devices += (devices.empty() ? "" : ", ") + d.get<std::string>();
  std::printf("  devices       %s\n", devices.c_str());
  if (const std::string why = s.value("read_only", std::string()); !why.empty()) {
    std::printf("  READ-ONLY     %s\n", why.c_str());
  }
  std::printf("  durability    %s, compression %s, segments of %s\n",
              s.value("durability", "?").c_str(), s.value("compression", "?").c_str(),
              FormatSize(U(s, "segment_size")).c_str());
  std::printf("  capacity      %s, used %s (%.1f%%), free %s\n", FormatSize(cap).c_str(),
              FormatSize(used).c_str(), pct, FormatSize(U(s, "free_bytes")).c_str());
  std::printf("  files         %llu (%llu objects), %s of file data\n",
              static_cast<unsigned long long>(U(s, "files")),
              static_cast<unsigned long long>(U(s, "objects")),
              FormatSize(U(s, "logical_bytes")).c_str());
  std::printf(
      "  hit rate      %.1f%% (%llu hits: files opened to read, %llu misses: names "
      "not found)\n",
      hits + misses ? 100.0 * static_cast<double>(hits) / static_cast<double>(hits + misses) : 0.0,
      static_cast<unsigned long long>(hits), static_cast<unsigned long long>(misses));
  std::printf("  lookups       %llu reached kvfs (%llu found, %llu not found)\n",
              static_cast<unsigned long long>(U(s, "lookups")),
              static_cast<unsigned long long>(U(s, "lookup_hits")),
              static_cast<unsigned long long>(U(s, "lookup_misses")));
  std::printf("  reads         %llu, %s\n", static_cast<unsigned long long>(U(s, "reads")),
              FormatSize(U(s, "bytes_read")).c_str());
  std::printf("  writes        %llu, %s\n", static_cast<unsigned long long>(U(s, "writes")),
              FormatSize(U(s, "bytes_written")).c_str());
  std::printf("  stored        %s on the devices, compression ratio %.2f\n",
              FormatSize(U(s, "stored_bytes")).c_str(), s.value("compression_ratio", 1.0));
  std::printf("  eviction      %s, watermarks %.2f / %.2f, %llu evicted\n",
              s.value("eviction_policy", std::string("-")).c_str(), s.value("high_watermark", 0.0),
              s.value("low_watermark", 0.0), static_cast<unsigned long long>(U(s, "evictions")));
  std::printf("  checksum failures %llu, corrupt files dropped %llu\n",
              static_cast<unsigned long long>(U(s, "checksum_failures")),
              static_cast<unsigned long long>(U(s, "corrupt_dropped")));
  PrintRecoveryDamage(s, stdout);
}

void PrintStat(const std::string& path, const nlohmann::json& s) {
  std::printf("%s\n", path.c_str());
  std::printf("  id        %llu (%s, %s)\n", static_cast<unsigned long long>(U(s, "id")),
              s.value("type", "?").c_str(), s.value("state", "?").c_str());
  std::printf("  size      %s (%llu bytes)\n", FormatSize(U(s, "size")).c_str(),
              static_cast<unsigned long long>(U(s, "size")));
  std::printf("  modified  %s\n  accessed  %s\n  changed   %s\n",
              Time(s.value("mtime", 0.0)).c_str(), Time(s.value("atime", 0.0)).c_str(),
              Time(s.value("ctime", 0.0)).c_str());
  if (s.value("pinned", false)) std::printf("  pinned\n");
  const auto& segs = s.value("segments", nlohmann::json::array());
  const uint64_t count = U(s, "segment_count");
  std::printf(
      "  segments  %llu, %s stored%s\n", static_cast<unsigned long long>(count),
      FormatSize(U(s, "stored_bytes")).c_str(),
      count > segs.size() ? (", the first " + std::to_string(segs.size()) + " below").c_str() : "");
  if (!segs.empty())
    std::printf("    %-4s %-6s %14s %12s %12s %-5s %s\n", "#", "device", "offset", "stored", "raw",
                "codec", "xxh3");
  size_t i = 0;
  for (const auto& seg : segs) {
    std::printf("    %-4zu %-6llu %14llu %12llu %12llu %-5s %s\n", i++,
                static_cast<unsigned long long>(U(seg, "device")),
                static_cast<unsigned long long>(U(seg, "offset")),
                static_cast<unsigned long long>(U(seg, "stored_len")),
                static_cast<unsigned long long>(U(seg, "raw_len")), seg.value("codec", "?").c_str(),
                seg.value("checksum", "").c_str());
  }
  std::string devices;
  for (const auto& d : s.value("devices", nlohmann::json::array()))
    devices += (devices.empty() ? "" : ", ") + d.get<std::string>();
  if (!devices.empty()) std::printf("  devices   %s\n", devices.c_str());
}

int Status(const std::string& mountpoint, bool json) {
  std::string root = MountRootOf(mountpoint);
  nlohmann::json s = ReadJsonFile(root + "/.kvfs/status");
  if (json)
    std::printf("%s\n", JsonText(s, 2).c_str());
  else
    PrintStatus(s);
  return 0;
}

int Stat(const std::string& path, bool json) {
  MountRootOf(path);
  std::string value(64 * 1024, '\0');
  ssize_t n = lgetxattr(path.c_str(), "user.kvfs.stat", value.data(), value.size());
  if (n < 0) throw Failure{kExitFailure, "kvfsctl: " + path + ": " + RefusalOf(path, errno)};
  value.resize(static_cast<size_t>(n));
  auto s = nlohmann::json::parse(value, nullptr, false);
  if (s.is_discarded()) throw Failure{kExitFailure, "kvfsctl: malformed reply for " + path};
  if (json)
    std::printf("%s\n", JsonText(s, 2).c_str());
  else
    PrintStat(path, s);
  return 0;
}

}  // namespace

int Nodes(const std::string& root, bool json);                // kvfsctl/nodes.cc
int Drain(const std::string& root, bool drain, int node);     // kvfsctl/nodes.cc
int Where(const std::vector<std::string>& paths, bool json);  // kvfsctl/where.cc

}  // namespace kvfs::fs

int main(int argc, char** argv) {
  using namespace kvfs::fs;
  CLI::App app{"kvfsctl: inspect a kvfs mount", "kvfsctl"};
  app.set_version_flag("--version", std::string("kvfsctl ") + KVFS_VERSION);
  app.require_subcommand(1);
  std::string mountpoint, path;
  bool status_json = false, stat_json = false;
  auto* status = app.add_subcommand("status", "capacity, usage, hits and misses of a mount");
  status->add_option("MOUNTPOINT", mountpoint, "a kvfs mount point (or any path in it)")
      ->required();
  status->add_flag("--json", status_json, "print the raw JSON");
  auto* stat = app.add_subcommand("stat", "where a file's bytes live: size, times, segments");
  stat->add_option("PATH", path, "a file on a kvfs mount")->required();
  stat->add_flag("--json", stat_json, "print the raw JSON");
  std::vector<std::string> verify_paths;
  bool verify_json = false;
  auto* verify = app.add_subcommand(
      "verify", "read and checksum every file under the paths; corrupt files are dropped");
  verify->add_option("PATH", verify_paths, "a kvfs mount point, a directory or files in it")
      ->required();
  verify->add_flag("--json", verify_json, "print the report as JSON");
  std::vector<std::string> pin_paths;
  bool pin_json = false;
  std::vector<CLI::App*> pin_cmds;
  for (const char* verb : {"pin", "unpin", "evict"}) {
    auto* cmd =
        app.add_subcommand(verb, std::string(verb) == "pin"     ? "never evict these files"
                                 : std::string(verb) == "unpin" ? "make them evictable again"
                                                                : "drop these files now");
    cmd->add_option("PATH", pin_paths, "files on a kvfs mount")->required();
    cmd->add_flag("--json", pin_json, "print the results as JSON");
    pin_cmds.push_back(cmd);
  }
  std::string nodes_mount;
  bool nodes_json = false;
  auto* nodes = app.add_subcommand("nodes", "the cluster's nodes: address, state, usage, traffic");
  nodes->add_option("MOUNTPOINT", nodes_mount, "a kvfs mount point (or any path in it)")
      ->required();
  nodes->add_flag("--json", nodes_json, "print the raw JSON");
  std::string drain_mount;
  int drain_node = 0;
  std::vector<CLI::App*> drain_cmds;
  for (const char* verb : {"drain", "undrain"}) {
    auto* cmd = app.add_subcommand(verb, std::string(verb) == "drain"
                                             ? "move a node's copies elsewhere before removing it"
                                             : "let a drained node take copies again");
    cmd->add_option("MOUNTPOINT", drain_mount, "a kvfs mount point of the cluster")->required();
    cmd->add_option("--node", drain_node, "the node (default: the mounted one)")
        ->check(CLI::Range(0, 65535));
    drain_cmds.push_back(cmd);
  }
  std::vector<std::string> where_paths;
  bool where_json = false;
  auto* where = app.add_subcommand("where", "which nodes hold each file's chunk");
  where->add_option("PATH", where_paths, "files on a kvfs mount")->required();
  where->add_flag("--json", where_json, "print the results as JSON");
  std::vector<std::string> prefetch_paths;
  bool prefetch_json = false;
  auto* prefetch = app.add_subcommand(
      "prefetch", "read files (directories recurse) so later reads come from memory");
  prefetch->add_option("PATH", prefetch_paths, "files or directories on a kvfs mount")->required();
  prefetch->add_flag("--json", prefetch_json, "print the summary as JSON");
  HashOptions hash_opts;
  bool hash_no_partial = false;
  auto* hash = app.add_subcommand("hash", "prefix-hash chunk names of a token-id file");
  hash->add_option("--tokens", hash_opts.tokens_file,
                   "token ids: whitespace-separated integers or a JSON array (- for stdin)")
      ->required();
  hash->add_option("--chunk-tokens", hash_opts.chunk_tokens, "tokens per chunk (default 256)")
      ->check(CLI::Range(1LL, 1000000000LL));
  hash->add_option("--prefix", hash_opts.prefix, "directory to prepend to each name");
  hash->add_option("--seed", hash_opts.seed, "string hashed into the first link (default kvfs)");
  hash->add_flag("--no-partial", hash_no_partial,
                 "leave out a last chunk shorter than --chunk-tokens");
  hash->add_flag("--json", hash_opts.json, "print the names as JSON");
  TopOptions top_opts;
  auto* top = app.add_subcommand("top", "live throughput, lookups, hit rate and usage");
  top->add_option("MOUNTPOINT", top_opts.mountpoint, "a kvfs mount point (or any path in it)")
      ->required();
  top->add_option("--interval", top_opts.interval_s, "seconds between updates (default 1)")
      ->check(CLI::Range(0.05, 86400.0));
  top->add_option("--count", top_opts.count, "stop after N updates (default: until Ctrl-C)")
      ->check(CLI::Range(0LL, 1000000000LL));
  top->add_flag("--json", top_opts.json, "one JSON object per update");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // A misspelt command got CLI11's "A subcommand is required": name it and the commands.
    if (argc > 1 && argv[1][0] != '-') {
      std::string known;
      bool found = false;
      for (const CLI::App* sub : app.get_subcommands(nullptr)) {
        found = found || sub->get_name() == argv[1];
        known += (known.empty() ? "" : ", ") + sub->get_name();
      }
      if (!found) {
        std::fprintf(stderr, "kvfsctl: no command '%s' (commands: %s; see kvfsctl --help)\n",
                     argv[1], known.c_str());
        return 2;
      }
    }
    int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }
  try {
    if (status->parsed()) return Status(mountpoint, status_json);
    if (nodes->parsed()) return Nodes(MountRootOf(nodes_mount), nodes_json);
    for (auto* cmd : drain_cmds)
      if (cmd->parsed())
        return Drain(MountRootOf(drain_mount), cmd->get_name() == "drain", drain_node);
    if (where->parsed()) {
      for (const auto& p : where_paths) MountRootOf(p);  // exit 2 before any work
      return Where(where_paths, where_json);
    }
    for (auto* cmd : pin_cmds) {
      if (!cmd->parsed()) continue;
      for (const auto& p : pin_paths) MountRootOf(p);  // exit 2 before any change
      return PinCommand(cmd->get_name(), pin_paths, pin_json);
    }
    if (verify->parsed()) {
      for (const auto& p : verify_paths) MountRootOf(p);  // exit 2 before any work
      return Verify(verify_paths, verify_json);
    }
    if (prefetch->parsed()) {
      for (const auto& p : prefetch_paths) {
        try {
          MountRootOf(p);  // exit 2 before any work when a path is off kvfs
        } catch (const Failure& f) {
          if (f.code == kExitUsage) throw;  // a missing path is counted as a miss
        }
      }
      return Prefetch(prefetch_paths, prefetch_json);
    }
    if (hash->parsed()) {
      hash_opts.include_partial = !hash_no_partial;
      return Hash(hash_opts);
    }
    if (top->parsed()) return Top(top_opts);
    return Stat(path, stat_json);
  } catch (const Failure& f) {
    std::fprintf(stderr, "%s\n", f.message.c_str());
    // Scripts that asked for JSON get JSON on stdout even when the command failed.
    const auto cmds = app.get_subcommands();
    if (!cmds.empty() && cmds.front()->count("--json") > 0) {
      std::printf("%s\n",
                  JsonText(nlohmann::json{{"error", f.message}, {"exit_status", f.code}}).c_str());
    }
    return f.code;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kvfsctl: %s\n", e.what());
    return 1;
  }
}
