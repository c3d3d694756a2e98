// chunkbench: kvfs beside the native filesystem, same workloads, same run, one table.
// Each row runs a workload on a kvfs mount and on a plain directory of the same disk and prints
// both with their ratio (kvfs / native) and the CPU seconds each spent per GiB moved. The read
// rows also read the native files through a generic FUSE passthrough (libfuse's passthrough_ll,
// cache=always), which shows what the kernel's FUSE path allows any daemon.
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
#include <optional>
#include <string>
#include <vector>

#include "bench_fs.h"
#include "daemon.h"
#include "kvfs/size.h"

namespace fs = std::filesystem;
using kvfs::bench::Measure;
using kvfs::bench::Workload;

namespace {

// Where a workload runs: the kvfs mount, the native directory, or the native directory through
// the generic passthrough mount.
enum class Side { kKvfs, kNative, kPassthrough };

struct Row {
  std::string test;
  uint64_t size = 0;
  int threads = 1;
  Measure kvfs, native;
  double kvfs_cpu_per_gib = 0, native_cpu_per_gib = 0;
  int64_t kvfs_daemon_bytes = -1;      // served by the kvfs daemon to reads during its pass
  std::optional<Measure> passthrough;  // read rows, when the passthrough is mounted
};

struct Ctx {
  kvfs::bench::Daemon* daemon = nullptr;
  kvfs::bench::Daemon* passthrough = nullptr;  // null: no passthrough column
  std::vector<Row> rows;
  bool failed = false;
};

double CpuPerGib(const Measure& m, double extra_cpu) {
  if (m.bytes == 0) return 0;
  return (m.cpu_seconds + extra_cpu) / (static_cast<double>(m.bytes) / (1ull << 30));
}

// Runs `fn` on `side`, counting the CPU of the daemon that serves it (if any) too, and in
// `daemon_bytes` what a kvfs daemon served to reads meanwhile (a hot pass that reaches it lost
// its page cache). `before_each(side)` prepares the side right before it is timed (drop or warm
// the cache).
template <typename Fn>
kvfs::Result<Measure> RunSide(kvfs::bench::Daemon* daemon, Side side, Fn fn,
                              const std::function<void(Side)>& before_each,
                              int64_t* daemon_bytes = nullptr) {
  if (before_each) before_each(side);
  double d0 = daemon ? daemon->CpuSeconds() : 0;
  const int64_t b0 = daemon && daemon_bytes ? daemon->BytesRead() : -1;
  auto m = fn(side);
  if (m.ok() && daemon) m->cpu_seconds += daemon->CpuSeconds() - d0;
  if (daemon_bytes) {
    const int64_t b1 = b0 >= 0 ? daemon->BytesRead() : -1;
    *daemon_bytes = b1 >= 0 ? b1 - b0 : -1;
  }
  return m;
}

constexpr int kHotPasses = 8;

// `fn` run `n` times, as one measure over all of them.
kvfs::Result<Measure> Repeated(int n, const std::function<kvfs::Result<Measure>()>& fn) {
  Measure total;
  for (int i = 0; i < n; ++i) {
    auto m = fn();
    if (!m.ok()) return m;
    total.unit = m->unit;
    total.seconds += m->seconds;
    total.cpu_seconds += m->cpu_seconds;
    total.bytes += m->bytes;
  }
  total.value =
      total.seconds > 0 ? static_cast<double>(total.bytes) / (1 << 20) / total.seconds : 0;
  return total;
}

// Runs `fn` on the kvfs side and on the native side, and with `passthrough` (a read row) on the
// passthrough mount too when there is one.
template <typename Fn>
void Compare(Ctx& ctx, const std::string& test, uint64_t size, int threads, Fn fn,
             const std::function<void(Side)>& before_each = {}, bool passthrough = false) {
  Row row{test, size, threads, {}, {}, 0, 0, -1, std::nullopt};
  auto k = RunSide(ctx.daemon, Side::kKvfs, fn, before_each, &row.kvfs_daemon_bytes);
  auto n = RunSide(nullptr, Side::kNative, fn, before_each);
  kvfs::Result<Measure> p = Measure{};
  if (passthrough && ctx.passthrough)
    p = RunSide(ctx.passthrough, Side::kPassthrough, fn, before_each);
  for (auto* r : {&k, &n, &p}) {
    if (r->ok()) continue;
    std::fprintf(stderr, "chunkbench: %s failed: %s\n", test.c_str(),
                 r->status().ToString().c_str());
    ctx.failed = true;
    return;
  }
  row.kvfs = *k;
  row.native = *n;
  row.kvfs_cpu_per_gib = CpuPerGib(row.kvfs, 0);
  row.native_cpu_per_gib = CpuPerGib(row.native, 0);
  char pt[48] = "";
  if (passthrough && ctx.passthrough) {
    row.passthrough = *p;
    std::snprintf(pt, sizeof(pt), " %12.1f %7.2f %9.2f", p->value, row.kvfs.value / p->value,
                  CpuPerGib(*p, 0));
  } else {
    std::snprintf(pt, sizeof(pt), " %12s %7s %9s", "-", "-", "-");
  }
  char served[24] = "-";
  if (row.kvfs_daemon_bytes >= 0)
    std::snprintf(served, sizeof(served), "%.0f",
                  static_cast<double>(row.kvfs_daemon_bytes) / (1 << 20));
  std::printf("%-22s %6s %3d %12.1f %12.1f %6s %7.2f %9.2f %9.2f%s %8s\n", row.test.c_str(),
              size ? kvfs::FormatSize(size).c_str() : "-", threads, row.kvfs.value,
              row.native.value, row.kvfs.unit.c_str(), row.kvfs.value / row.native.value,
              row.kvfs_cpu_per_gib, row.native_cpu_per_gib, pt, served);
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
  std::string passthrough_bin = KVFS_PASSTHROUGH_DEFAULT;
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
  app.add_option("--passthrough", passthrough_bin,
                 "generic FUSE passthrough compared on the read rows (libfuse's passthrough_ll; "
                 "empty: no passthrough column)");
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
  std::string pt_mnt = root + "/passthrough";
  for (auto& d : {root, mnt, data, native, pt_mnt}) fs::create_directories(d);
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
  kvfs::bench::Daemon passthrough;
  bool have_passthrough = !passthrough_bin.empty() && !meta_only;
  if (have_passthrough) {
    auto st = passthrough.StartFuse(
        {passthrough_bin, "-f", "-o", "source=" + native, "-o", "cache=always", pt_mnt}, pt_mnt,
        root + "/passthrough.log");
    if (!st.ok()) {
      std::fprintf(stderr, "chunkbench: no passthrough column: %s\n", st.ToString().c_str());
      have_passthrough = false;
    }
  }
  bool can_drop = kvfs::bench::DropCaches();
  Ctx ctx;
  ctx.daemon = &daemon;
  ctx.passthrough = have_passthrough ? &passthrough : nullptr;

  std::printf("chunkbench: kvfs (durability=%s) vs native directory %s, %s per data test\n",
              durability.c_str(), native.c_str(), kvfs::FormatSize(bytes).c_str());
  if (!can_drop) std::printf("note: cannot drop caches (not root): cold reads are not cold\n");
  if (have_passthrough) {
    std::printf(
        "read rows: pthru = the native files through %s (cache=always), k/pt = kvfs / "
        "pthru\n",
        passthrough_bin.c_str());
  }
  std::printf(
      "kvfs_rd: MiB the kvfs daemon served to reads during the timed kvfs pass (a hot pass "
      "that is not 0 lost its page cache)\n");
  std::printf("%-22s %6s %3s %12s %12s %6s %7s %9s %9s %12s %7s %9s %8s\n", "test", "size", "thr",
              "kvfs", "native", "unit", "ratio", "kvfs_cpu", "nat_cpu", "pthru", "k/pt", "pt_cpu",
              "kvfs_rd");
  std::printf("%-22s %6s %3s %12s %12s %6s %7s %9s %9s %12s %7s %9s %8s\n", "", "", "", "", "", "",
              "", "s/GiB", "s/GiB", "", "", "s/GiB", "MiB");

  auto dir_of = [&](Side side, const std::string& name) {
    return (side == Side::kKvfs ? mnt : side == Side::kNative ? native : pt_mnt) + "/" + name;
  };
  for (uint64_t size : meta_only ? std::vector<uint64_t>{} : sizes) {
    for (int threads : thread_counts) {
      int files = std::max<int>(threads, static_cast<int>(bytes / size));
      std::string name = "d" + std::to_string(size >> 20) + "m" + std::to_string(threads) + "t";
      auto w = [&](Side k) { return Workload{dir_of(k, name), size, files, threads}; };
      Compare(ctx, "write+close", size, threads,
              [&](Side k) { return kvfs::bench::WriteFiles(w(k), false); });
      Compare(ctx, "write+fdatasync", size, threads,
              [&](Side k) { return kvfs::bench::WriteFiles(w(k), true); });
      Compare(
          ctx, "cold read", size, threads, [&](Side k) { return kvfs::bench::ReadFiles(w(k)); },
          [](Side) { kvfs::bench::DropCaches(); }, true);
      // O_DIRECT 1 MiB reads: through kvfs every READ is served by the daemon.
      Compare(
          ctx, "direct read", size, threads,
          [&](Side k) { return kvfs::bench::ReadFiles(w(k), true); }, {}, true);
      // Each side is read once untimed right before its timed passes: the cold-read row dropped
      // the caches before the native side ran, so without this kvfs's "hot" pass was cold.
      // Several passes: one hot pass over the data set lasts about 0.1 s, which left the row's
      // ratios anywhere from 0.4 to 1.3 between runs.
      Compare(
          ctx, "hot re-read", size, threads,
          [&](Side k) {
            return Repeated(kHotPasses, [&] { return kvfs::bench::ReadFiles(w(k)); });
          },
          [&](Side k) { (void)kvfs::bench::ReadFiles(w(k)); }, true);
      RemoveTree(dir_of(Side::kKvfs, name));
      RemoveTree(dir_of(Side::kNative, name));
    }
  }
  for (int threads : no_meta ? std::vector<int>{} : thread_counts) {
    std::string name = "meta" + std::to_string(threads);
    auto w = [&](Side k) { return Workload{dir_of(k, name), 4096, lookup_files, threads}; };
    Compare(ctx, "lookup hit", 0, threads, [&](Side k) -> kvfs::Result<Measure> {
      auto st = kvfs::bench::WriteFiles(w(k), false);
      if (!st.ok()) return st.status();
      return kvfs::bench::LookupHits(w(k), lookup_rounds);
    });
    Compare(ctx, "lookup miss distinct", 0, threads, [&](Side k) {
      return kvfs::bench::LookupMissesDistinct(dir_of(k, name), miss_count, threads);
    });
    Compare(ctx, "lookup miss repeated", 0, threads, [&](Side k) {
      return kvfs::bench::LookupMissesRepeated(dir_of(k, name), 1000, miss_count / 1000 * 4,
                                               threads);
    });
    Compare(ctx, "publish 64K", 64 << 10, threads, [&](Side k) {
      return kvfs::bench::SmallPublish(dir_of(k, name + "s"), 64 << 10, small_count, threads);
    });
    RemoveTree(dir_of(Side::kKvfs, name));
    RemoveTree(dir_of(Side::kNative, name));
    RemoveTree(dir_of(Side::kKvfs, name + "s"));
    RemoveTree(dir_of(Side::kNative, name + "s"));
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
                      {"native_cpu_s_per_gib", r.native_cpu_per_gib},
                      {"kvfs_daemon_read_bytes", r.kvfs_daemon_bytes}});
      if (r.passthrough) {
        rows.back()["passthrough"] = r.passthrough->value;
        rows.back()["ratio_passthrough"] = r.kvfs.value / r.passthrough->value;
        rows.back()["passthrough_cpu_s_per_gib"] = CpuPerGib(*r.passthrough, 0);
      }
    }
    std::ofstream(json_path) << rows.dump(2) << "\n";
  }
  daemon.Stop();
  passthrough.Stop();
  RemoveTree(root);
  return ctx.failed ? 1 : 0;
}
