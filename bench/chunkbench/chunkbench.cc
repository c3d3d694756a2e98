// chunkbench: kvfs beside the native filesystem, same workloads, same run, one table.
// Each row runs a workload on a kvfs mount and on a plain directory of the same disk and prints
// both with their ratio (kvfs / native) and the CPU seconds each spent per GiB moved.
#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench_fs.h"
#include "daemon.h"
#include "kvfs/size.h"

namespace fs = std::filesystem;
using kvfs::bench::Measure;
using kvfs::bench::Workload;

namespace {

struct Row {
  std::string test;
  uint64_t size = 0;
  int threads = 1;
  Measure kvfs, native;
  double kvfs_cpu_per_gib = 0, native_cpu_per_gib = 0;
};

struct Ctx {
  kvfs::bench::Daemon* daemon = nullptr;
  std::vector<Row> rows;
  bool failed = false;
};

double CpuPerGib(const Measure& m, double extra_cpu) {
  if (m.bytes == 0) return 0;
  return (m.cpu_seconds + extra_cpu) / (static_cast<double>(m.bytes) / (1ull << 30));
}

// Runs `fn` on the kvfs side (counting the daemon's CPU too) and on the native side.
// `before_each(kvfs)` prepares each side right before it is timed (drop or warm the cache).
template <typename Fn>
void Compare(Ctx& ctx, const std::string& test, uint64_t size, int threads, Fn fn,
             const std::function<void(bool)>& before_each = {}) {
  Row row{test, size, threads, {}, {}, 0, 0};
  if (before_each) before_each(true);
  double d0 = ctx.daemon->CpuSeconds();
  auto k = fn(true);
  double daemon_cpu = ctx.daemon->CpuSeconds() - d0;
  if (before_each) before_each(false);
  auto n = fn(false);
  if (!k.ok() || !n.ok()) {
    std::fprintf(stderr, "chunkbench: %s failed: %s\n", test.c_str(),
                 (!k.ok() ? k.status() : n.status()).ToString().c_str());
    ctx.failed = true;
    return;
  }
  row.kvfs = *k;
  row.native = *n;
  row.kvfs.cpu_seconds += daemon_cpu;
  row.kvfs_cpu_per_gib = CpuPerGib(row.kvfs, 0);
  row.native_cpu_per_gib = CpuPerGib(row.native, 0);
  std::printf("%-22s %6s %3d %12.1f %12.1f %6s %7.2f %9.2f %9.2f\n", row.test.c_str(),
              size ? kvfs::FormatSize(size).c_str() : "-", threads, row.kvfs.value,
              row.native.value, row.kvfs.unit.c_str(), row.kvfs.value / row.native.value,
              row.kvfs_cpu_per_gib, row.native_cpu_per_gib);
  std::fflush(stdout);
  ctx.rows.push_back(row);
}

void RemoveTree(const std::string& dir) {
  std::error_code ec;
  fs::remove_all(dir, ec);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"chunkbench: kvfs vs the native filesystem on KV-chunk workloads"};
  std::string kvfs_bin = KVFS_BIN_DEFAULT;
  std::string workdir = "/var/tmp";
  std::string sizes_arg = "2M,8M,32M";
  std::string threads_arg = "1,4";
  std::string bytes_arg = "512M";
  std::string json_path;
  std::string durability = "close";
  std::vector<std::string> kvfs_args;
  bool quick = false;
  bool no_meta = false;
  bool meta_only = false;
  app.add_option("--kvfs", kvfs_bin, "kvfs binary");
  app.add_option("--workdir", workdir,
                 "where the native directory and the kvfs data directory go (same disk)");
  app.add_option("--sizes", sizes_arg, "chunk sizes, comma separated");
  app.add_option("--threads", threads_arg, "thread counts, comma separated");
  app.add_option("--bytes", bytes_arg, "bytes written per data test");
  app.add_option("--durability", durability, "kvfs durability mode (close|async)");
  app.add_option("--kvfs-arg", kvfs_args, "extra argument passed to kvfs (repeatable)");
  app.add_option("--json", json_path, "write the rows as JSON to this file");
  app.add_flag("--quick", quick, "tiny run for smoke tests");
  app.add_flag("--no-meta", no_meta, "data rows only (no lookup and small-publish rows)");
  app.add_flag("--meta-only", meta_only, "lookup and small-publish rows only (no data rows)");
  CLI11_PARSE(app, argc, argv);

  std::vector<uint64_t> sizes;
  std::vector<int> thread_counts;
  for (auto& s : CLI::detail::split(sizes_arg, ',')) {
    auto v = kvfs::ParseSize(s);
    if (!v.ok() || *v == 0) {
      std::fprintf(stderr, "chunkbench: bad size '%s'\n", s.c_str());
      return 2;
    }
    sizes.push_back(*v);
  }
  for (auto& t : CLI::detail::split(threads_arg, ',')) thread_counts.push_back(std::stoi(t));
  auto total = kvfs::ParseSize(bytes_arg);
  if (!total.ok()) {
    std::fprintf(stderr, "chunkbench: %s\n", total.status().ToString().c_str());
    return 2;
  }
  uint64_t bytes = quick ? (16ull << 20) : *total;
  int lookup_files = quick ? 200 : 2000, lookup_rounds = quick ? 5 : 50;
  int miss_count = quick ? 2000 : 50000, small_count = quick ? 100 : 2000;

  std::string root = workdir + "/chunkbench." + std::to_string(getpid());
  std::string mnt = root + "/mnt", data = root + "/data", native = root + "/native";
  for (auto& d : {root, mnt, data, native}) fs::create_directories(d);
  uint64_t capacity = std::max<uint64_t>(2 * bytes + (1ull << 30), 2ull << 30);
  std::vector<std::string> args = {"--capacity", std::to_string(capacity >> 20) + "M",
                                   "--durability", durability};
  args.insert(args.end(), kvfs_args.begin(), kvfs_args.end());
  kvfs::bench::Daemon daemon;
  if (auto st = daemon.Start(kvfs_bin, mnt, data, args); !st.ok()) {
    std::fprintf(stderr, "chunkbench: %s\n", st.ToString().c_str());
    RemoveTree(root);
    return 1;
  }
  bool can_drop = kvfs::bench::DropCaches();
  Ctx ctx;
  ctx.daemon = &daemon;

  std::printf("chunkbench: kvfs (durability=%s) vs native directory %s, %s per data test\n",
              durability.c_str(), native.c_str(), kvfs::FormatSize(bytes).c_str());
  if (!can_drop) std::printf("note: cannot drop caches (not root): cold reads are not cold\n");
  std::printf("%-22s %6s %3s %12s %12s %6s %7s %9s %9s\n", "test", "size", "thr", "kvfs", "native",
              "unit", "ratio", "kvfs_cpu", "nat_cpu");
  std::printf("%-22s %6s %3s %12s %12s %6s %7s %9s %9s\n", "", "", "", "", "", "", "", "s/GiB",
              "s/GiB");

  auto dir_of = [&](bool k, const std::string& name) { return (k ? mnt : native) + "/" + name; };
  for (uint64_t size : meta_only ? std::vector<uint64_t>{} : sizes) {
    for (int threads : thread_counts) {
      int files = std::max<int>(threads, static_cast<int>(bytes / size));
      std::string name = "d" + std::to_string(size >> 20) + "m" + std::to_string(threads) + "t";
      auto w = [&](bool k) { return Workload{dir_of(k, name), size, files, threads}; };
      Compare(ctx, "write+close", size, threads,
              [&](bool k) { return kvfs::bench::WriteFiles(w(k), false); });
      Compare(ctx, "write+fdatasync", size, threads,
              [&](bool k) { return kvfs::bench::WriteFiles(w(k), true); });
      Compare(
          ctx, "cold read", size, threads, [&](bool k) { return kvfs::bench::ReadFiles(w(k)); },
          [](bool) { kvfs::bench::DropCaches(); });
      // O_DIRECT 1 MiB reads: through kvfs every READ is served by the daemon.
      Compare(ctx, "direct read", size, threads,
              [&](bool k) { return kvfs::bench::ReadFiles(w(k), true); });
      // Each side is read once untimed right before its timed pass: the cold-read row dropped
      // the caches before the native side ran, so without this kvfs's "hot" pass was cold.
      Compare(
          ctx, "hot re-read", size, threads, [&](bool k) { return kvfs::bench::ReadFiles(w(k)); },
          [&](bool k) { (void)kvfs::bench::ReadFiles(w(k)); });
      RemoveTree(dir_of(true, name));
      RemoveTree(dir_of(false, name));
    }
  }
  for (int threads : no_meta ? std::vector<int>{} : thread_counts) {
    std::string name = "meta" + std::to_string(threads);
    auto w = [&](bool k) { return Workload{dir_of(k, name), 4096, lookup_files, threads}; };
    Compare(ctx, "lookup hit", 0, threads, [&](bool k) -> kvfs::Result<Measure> {
      auto st = kvfs::bench::WriteFiles(w(k), false);
      if (!st.ok()) return st.status();
      return kvfs::bench::LookupHits(w(k), lookup_rounds);
    });
    Compare(ctx, "lookup miss distinct", 0, threads, [&](bool k) {
      return kvfs::bench::LookupMissesDistinct(dir_of(k, name), miss_count, threads);
    });
    Compare(ctx, "lookup miss repeated", 0, threads, [&](bool k) {
      return kvfs::bench::LookupMissesRepeated(dir_of(k, name), 1000, miss_count / 1000 * 4,
                                               threads);
    });
    Compare(ctx, "publish 64K", 64 << 10, threads, [&](bool k) {
      return kvfs::bench::SmallPublish(dir_of(k, name + "s"), 64 << 10, small_count, threads);
    });
    RemoveTree(dir_of(true, name));
    RemoveTree(dir_of(false, name));
    RemoveTree(dir_of(true, name + "s"));
    RemoveTree(dir_of(false, name + "s"));
  }

  if (!json_path.empty()) {
    nlohmann::json rows = nlohmann::json::array();
    for (auto& r : ctx.rows) {
      rows.push_back({{"test", r.test},
                      {"size", r.size},
                      {"threads", r.threads},
                      {"kvfs", r.kvfs.value},
                      {"native", r.native.value},
                      {"unit", r.kvfs.unit},
                      {"ratio", r.kvfs.value / r.native.value},
                      {"kvfs_cpu_s_per_gib", r.kvfs_cpu_per_gib},
                      {"native_cpu_s_per_gib", r.native_cpu_per_gib}});
    }
    std::ofstream(json_path) << rows.dump(2) << "\n";
  }
  daemon.Stop();
  RemoveTree(root);
  return ctx.failed ? 1 : 0;
}
