// remotebench: a remote chunk read (node B reading a chunk only node A holds, over loopback TCP)
// beside the two baselines DESIGN §9 names: iperf3 one stream (the wire's ceiling) and Redis GET
// of the same objects (a key-value store doing the same job). One table, ratios per row, CPU
// seconds per GiB moved. Not a test: numbers depend on the load of the machine (printed).
#include <sys/resource.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>
#include <vector>

#include "cluster_pair.h"
#include "iperf3_baseline.h"
#include "redis_baseline.h"

namespace fs = std::filesystem;
using namespace remotebench;

namespace {

constexpr double kGiB = 1024.0 * 1024 * 1024;

// Incompressible, reproducible bytes for object `index`, so a read can be checked.
void FillObject(std::span<uint8_t> out, uint64_t index) {
  uint64_t x = 0x9E3779B97F4A7C15ull * (index + 1);
  size_t i = 0;
  for (; i + 8 <= out.size(); i += 8) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    std::memcpy(out.data() + i, &x, 8);
  }
  for (; i < out.size(); ++i) out[i] = static_cast<uint8_t>(i);
}

double ProcessCpuSeconds() {
  struct rusage ru {};
  ::getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
         static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

std::string LoadAverage() {
  double l[3] = {0, 0, 0};
  if (::getloadavg(l, 3) != 3) return "?";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.2f %.2f %.2f", l[0], l[1], l[2]);
  return buf;
}

struct Measure {
  double gbps = 0;         // 1e9 bytes per second
  double cpu_per_gib = 0;  // CPU seconds (all processes involved) per GiB moved
  bool ok = false;
};

// Runs `read_one(thread, object, buffer)` from `threads` threads until `total` bytes were read,
// each thread cycling over its share of the objects. `cpu` says how much CPU has been used.
template <typename ReadOne, typename Cpu>
Measure Timed(size_t threads, size_t objects, size_t size, uint64_t total, ReadOne read_one,
              Cpu cpu) {
  const uint64_t per_thread = std::max<uint64_t>(1, total / size / threads);
  std::vector<std::vector<uint8_t>> bufs(threads, std::vector<uint8_t>(size));
  std::atomic<bool> failed{false};
  // Warm-up (connections, page faults of the buffers): one read per thread, untimed.
  for (size_t t = 0; t < threads; ++t) {
    if (!read_one(t, t % objects, std::span<uint8_t>(bufs[t]))) return {};
  }
  const double cpu0 = cpu();
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::thread> ts;
  for (size_t t = 0; t < threads; ++t) {
    ts.emplace_back([&, t] {
      for (uint64_t i = 0; i < per_thread && !failed.load(); ++i) {
        if (!read_one(t, (t + i * threads) % objects, std::span<uint8_t>(bufs[t]))) {
          failed = true;
        }
      }
    });
  }
  for (auto& th : ts) th.join();
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double bytes = static_cast<double>(per_thread * threads * size);
  Measure m;
  m.ok = !failed.load();
  m.gbps = bytes / secs / 1e9;
  m.cpu_per_gib = (cpu() - cpu0) / (bytes / kGiB);
  return m;
}

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

struct Row {
  size_t size = 0, threads = 0;
  Measure kvfs, redis;
  double iperf = 0;  // GB/s, one stream
};

std::string DefaultDir() {
  // tmpfs: the engine's O_DIRECT reads then cost what a page-cache hit would, so the row times
  // the network path rather than this machine's virtio disk (use --dir to put it on a disk).
  std::error_code ec;
  if (fs::is_directory("/dev/shm", ec)) return "/dev/shm";
  return fs::temp_directory_path().string();
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"remotebench: remote chunk GET over loopback TCP vs iperf3 and Redis"};
  std::vector<size_t> sizes_mib{2, 8, 32};
  std::vector<size_t> thread_counts{1, 4};
  uint64_t total_mib = 1024;
  size_t repeat = 3;
  double iperf_seconds = 2;
  std::string dir = DefaultDir();
  std::string json_path;
  bool quick = false, no_redis = false, no_iperf = false;
  uint64_t set_mib = 256;
  app.add_option("--sizes", sizes_mib, "chunk sizes in MiB")->default_str("2 8 32");
  app.add_option("--threads", thread_counts, "concurrent readers")->default_str("1 4");
  app.add_option("--bytes", total_mib, "MiB read per measurement")->capture_default_str();
  app.add_option("--set", set_mib, "MiB of distinct objects per size")->capture_default_str();
  app.add_option("--repeat", repeat, "runs per cell; the median is shown")->capture_default_str();
  app.add_option("--iperf-seconds", iperf_seconds, "iperf3 -t per run")->capture_default_str();
  app.add_option("--dir", dir, "where the engines' device files and redis's dir go")
      ->capture_default_str();
  app.add_option("--json", json_path, "write the rows as JSON to this file");
  app.add_flag("--quick", quick,
               "small run: 128 MiB per cell, 64 MiB of objects, one repeat, 1 s iperf3");
  app.add_flag("--no-redis", no_redis, "skip the Redis baseline");
  app.add_flag("--no-iperf", no_iperf, "skip the iperf3 baseline");
  CLI11_PARSE(app, argc, argv);
  if (quick) {  // smaller defaults; options given explicitly still win
    if (app.count("--bytes") == 0) total_mib = 128;
    if (app.count("--set") == 0) set_mib = 64;
    if (app.count("--repeat") == 0) repeat = 1;
    if (app.count("--iperf-seconds") == 0) iperf_seconds = 1;
  }
  repeat = std::max<size_t>(1, repeat);

  const std::string root = dir + "/remotebench-" + std::to_string(::getpid());
  fs::create_directories(root + "/redis");
  struct Cleanup {
    std::string path;
    ~Cleanup() {
      std::error_code ec;
      fs::remove_all(path, ec);
    }
  } cleanup{root};

  const size_t max_size = *std::max_element(sizes_mib.begin(), sizes_mib.end()) << 20;
  const uint64_t set_bytes = std::max<uint64_t>(set_mib << 20, 2 * max_size);
  ClusterPair pair;
  if (auto st = pair.Start(root, 2 * set_bytes + (64u << 20)); !st.ok()) {
    std::fprintf(stderr, "remotebench: cluster nodes: %s\n", st.ToString().c_str());
    return 1;
  }
  RedisServer redis;
  std::vector<std::unique_ptr<RespClient>> redis_clients;
  if (!no_redis) {
    if (auto st = redis.Start(root + "/redis"); !st.ok()) {
      std::fprintf(stderr, "remotebench: %s\n", st.ToString().c_str());
      return 1;
    }
  }

  std::printf(
      "remotebench: node B reads chunks only node A holds (ClusterStore over LocalEngine "
      "in %s, loopback TCP)\n",
      dir.c_str());
  std::printf("%llu MiB per cell, median of %zu; load average at start: %s\n",
              static_cast<unsigned long long>(total_mib), repeat, LoadAverage().c_str());
  std::printf("%-10s %5s %3s %8s %8s %6s %8s %6s %9s %9s\n", "test", "size", "thr", "kvfs",
              "iperf3", "ratio", "redis", "ratio", "kvfs_cpu", "redis_cpu");
  std::printf("%-10s %5s %3s %8s %8s %6s %8s %6s %9s %9s\n", "", "MiB", "", "GB/s", "GB/s", "",
              "GB/s", "", "s/GiB", "s/GiB");

  std::vector<Row> rows;
  bool failed = false;
  for (size_t size_mib : sizes_mib) {
    const size_t size = size_mib << 20;
    const size_t objects = std::max<size_t>(2, set_bytes / size);
    std::vector<uint8_t> data(size);
    std::vector<kvfs::LayoutRef> layouts;
    std::vector<std::string> names;
    for (size_t i = 0; i < objects; ++i) {
      FillObject(data, i);
      names.push_back("obj-" + std::to_string(size_mib) + "m-" + std::to_string(i));
      if (auto st = pair.Publish(names.back(), data); !st.ok()) {
        std::fprintf(stderr, "remotebench: publish: %s\n", st.ToString().c_str());
        return 1;
      }
    }
    for (const auto& n : names) {
      auto l = pair.LayoutOnB(n);
      if (!l.ok()) {
        std::fprintf(stderr, "remotebench: %s\n", l.status().ToString().c_str());
        return 1;
      }
      layouts.push_back(*l);
    }
    // Every object once through node B, checked byte for byte, before anything is timed.
    std::vector<uint8_t> got(size);
    for (size_t i = 0; i < objects; ++i) {
      FillObject(data, i);
      auto n = pair.ReadOnB(layouts[i], got);
      if (!n.ok() || *n != size || got != data) {
        std::fprintf(stderr, "remotebench: node B read wrong bytes of %s: %s\n", names[i].c_str(),
                     n.ok() ? "content differs" : n.status().ToString().c_str());
        return 1;
      }
    }
    if (!no_redis) {
      redis_clients.clear();
      for (size_t t = 0; t < *std::max_element(thread_counts.begin(), thread_counts.end()); ++t) {
        auto c = std::make_unique<RespClient>();
        if (auto st = c->Connect(redis.port()); !st.ok()) {
          std::fprintf(stderr, "remotebench: redis: %s\n", st.ToString().c_str());
          return 1;
        }
        redis_clients.push_back(std::move(c));
      }
      (void)redis_clients[0]->FlushAll();
      for (size_t i = 0; i < objects; ++i) {
        FillObject(data, i);
        if (auto st = redis_clients[0]->Set(names[i], data); !st.ok()) {
          std::fprintf(stderr, "remotebench: redis SET: %s\n", st.ToString().c_str());
          return 1;
        }
      }
      FillObject(data, 0);
      auto n = redis_clients[0]->Get(names[0], got);
      if (!n.ok() || *n != size || got != data) {
        std::fprintf(stderr, "remotebench: redis returned wrong bytes\n");
        return 1;
      }
    }
    data = {};
    got = {};

    for (size_t threads : thread_counts) {
      std::vector<double> kv, kv_cpu, rd, rd_cpu, ip;
      for (size_t r = 0; r < repeat; ++r) {
        if (!no_iperf) {
          auto res = RunIperf3(iperf_seconds, root);
          if (!res.ok()) {
            std::fprintf(stderr, "remotebench: iperf3: %s\n", res.status().ToString().c_str());
            no_iperf = true;
          } else {
            ip.push_back(res->bytes_per_second / 1e9);
          }
        }
        Measure k = Timed(
            threads, objects, size, total_mib << 20,
            [&](size_t, size_t obj, std::span<uint8_t> buf) {
              auto n = pair.ReadOnB(layouts[obj], buf);
              if (!n.ok()) std::fprintf(stderr, "kvfs read: %s\n", n.status().ToString().c_str());
              return n.ok() && *n == buf.size();
            },
            ProcessCpuSeconds);
        if (!k.ok) failed = true;
        kv.push_back(k.gbps);
        kv_cpu.push_back(k.cpu_per_gib);
        if (!no_redis) {
          Measure m = Timed(
              threads, objects, size, total_mib << 20,
              [&](size_t t, size_t obj, std::span<uint8_t> buf) {
                auto n = redis_clients[t]->Get(names[obj], buf);
                if (!n.ok()) std::fprintf(stderr, "redis: %s\n", n.status().ToString().c_str());
                return n.ok() && *n == buf.size();
              },
              [&] { return ProcessCpuSeconds() + redis.CpuSeconds(); });
          if (!m.ok) failed = true;
          rd.push_back(m.gbps);
          rd_cpu.push_back(m.cpu_per_gib);
        }
      }
      Row row;
      row.size = size;
      row.threads = threads;
      row.kvfs = {Median(kv), Median(kv_cpu), true};
      row.redis = {Median(rd), Median(rd_cpu), !no_redis};
      row.iperf = Median(ip);
      rows.push_back(row);
      auto ratio = [](double a, double b) { return b > 0 ? a / b : 0.0; };
      std::printf("%-10s %5zu %3zu %8.2f %8.2f %6.2f %8.2f %6.2f %9.3f %9.3f\n", "remote_get",
                  size_mib, threads, row.kvfs.gbps, row.iperf, ratio(row.kvfs.gbps, row.iperf),
                  row.redis.gbps, ratio(row.kvfs.gbps, row.redis.gbps), row.kvfs.cpu_per_gib,
                  row.redis.cpu_per_gib);
      std::fflush(stdout);
    }
    if (auto st = pair.RemoveAll(); !st.ok()) {
      std::fprintf(stderr, "remotebench: remove: %s\n", st.ToString().c_str());
    }
    if (!no_redis) (void)redis_clients[0]->FlushAll();
  }
  std::printf("load average at end: %s\n", LoadAverage().c_str());
  redis_clients.clear();
  redis.Stop();

  if (!json_path.empty()) {
    nlohmann::json out = nlohmann::json::array();
    for (const Row& r : rows) {
      if (r.iperf > 0) {
        out.push_back({{"test", "remote_get_vs_iperf3"},
                       {"size", r.size},
                       {"threads", r.threads},
                       {"kvfs", r.kvfs.gbps},
                       {"native", r.iperf},
                       {"native_name", "iperf3 one stream"},
                       {"unit", "GB/s"},
                       {"ratio", r.kvfs.gbps / r.iperf},
                       {"kvfs_cpu_s_per_gib", r.kvfs.cpu_per_gib}});
      }
      if (r.redis.ok && r.redis.gbps > 0) {
        out.push_back({{"test", "remote_get_vs_redis"},
                       {"size", r.size},
                       {"threads", r.threads},
                       {"kvfs", r.kvfs.gbps},
                       {"native", r.redis.gbps},
                       {"native_name", "redis GET"},
                       {"unit", "GB/s"},
                       {"ratio", r.kvfs.gbps / r.redis.gbps},
                       {"kvfs_cpu_s_per_gib", r.kvfs.cpu_per_gib},
                       {"native_cpu_s_per_gib", r.redis.cpu_per_gib}});
      }
    }
    std::ofstream(json_path) << out.dump(2) << "\n";
  }
  return failed ? 1 : 0;
}
