// kvfsctl top MOUNTPOINT: a live view of a mount, from the differences between successive
// readings of MOUNTPOINT/.kvfs/stats. On a terminal the screen is redrawn every interval;
// otherwise one line (or, with --json, one JSON object) is printed per interval, so the output
// can be logged or piped. Ctrl-C (SIGINT) or SIGTERM ends it with exit status 0.
//
// Throughput is what the daemon served: re-reads answered by the kernel's page cache and
// lookups answered by its dentry cache never reach kvfs and are not counted.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "json_text.h"
#include "kvfs/size.h"
#include "kvfsctl.h"

namespace kvfs::fs {
namespace {

volatile sig_atomic_t g_stop = 0;

void OnSignal(int) { g_stop = 1; }

struct Sample {
  std::chrono::steady_clock::time_point at;
  std::map<std::string, double> values;

  double Get(const char* key) const {
    auto it = values.find(key);
    return it == values.end() ? 0.0 : it->second;
  }
};

Sample ReadSample(const std::string& stats_file) {
  std::ifstream in(stats_file);
  if (!in) throw Failure{kExitFailure, "kvfsctl top: cannot read " + stats_file};
  Sample s;
  s.at = std::chrono::steady_clock::now();
  std::string key;
  double value = 0;
  while (in >> key >> value) s.values[key] = value;
  if (s.values.empty()) throw Failure{kExitFailure, "kvfsctl top: no counters in " + stats_file};
  return s;
}

// A counter's growth; a restarted daemon starts again from 0, which is not negative traffic.
double Delta(const Sample& a, const Sample& b, const char* key) {
  return std::max(0.0, b.Get(key) - a.Get(key));
}

nlohmann::json Row(const Sample& a, const Sample& b) {
  const double dt = std::max(1e-6, std::chrono::duration<double>(b.at - a.at).count());
  // The hit rate as kvfsctl(8) defines it: published files opened to read against names looked
  // up and not found. Lookups alone say little: the kernel answers repeated ones itself.
  const double hits = Delta(a, b, "hits"), misses = Delta(a, b, "misses");
  const double cap = b.Get("capacity_bytes"), used = b.Get("used_bytes");
  auto count = [](double v) { return static_cast<uint64_t>(std::llround(v)); };
  return nlohmann::json{
      {"time",
       std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count()},
      {"interval_s", dt},
      {"read_bytes_per_s", Delta(a, b, "bytes_read") / dt},
      {"write_bytes_per_s", Delta(a, b, "bytes_written") / dt},
      {"reads_per_s", Delta(a, b, "reads") / dt},
      {"writes_per_s", Delta(a, b, "writes") / dt},
      {"lookups_per_s", Delta(a, b, "lookups") / dt},
      {"lookup_hits", count(Delta(a, b, "lookup_hits"))},
      {"lookup_misses", count(Delta(a, b, "lookup_misses"))},
      {"hits", count(hits)},
      {"misses", count(misses)},
      // Neither in the interval: no rate to show, rather than a made-up 0 or 100%.
      {"hit_rate", hits + misses > 0 ? nlohmann::json(hits / (hits + misses)) : nlohmann::json()},
      {"evictions", count(Delta(a, b, "evictions"))},
      {"used_bytes", count(used)},
      {"capacity_bytes", count(cap)},
      {"used_ratio", cap > 0 ? used / cap : 0.0},
      {"files", count(b.Get("files"))},
  };
}

std::string Rate(double bytes_per_s) {
  return FormatSize(static_cast<uint64_t>(bytes_per_s)) + "/s";
}

std::string HitRate(const nlohmann::json& r) {
  if (r["hit_rate"].is_null()) return "-";
  char buf[16];
  std::snprintf(buf, sizeof buf, "%.1f%%", 100.0 * r["hit_rate"].get<double>());
  return buf;
}

void PrintScreen(const std::string& root, double interval, const nlohmann::json& r) {
  // Home the cursor and clear: the whole view is redrawn, like top(1).
  std::printf("\x1b[H\x1b[2J");
  std::printf("kvfs top: %s, every %.1f s (Ctrl-C quits)\n\n", root.c_str(), interval);
  std::printf("  read       %12s  %8.0f ops/s\n", Rate(r["read_bytes_per_s"].get<double>()).c_str(),
              r["reads_per_s"].get<double>());
  std::printf("  write      %12s  %8.0f ops/s\n",
              Rate(r["write_bytes_per_s"].get<double>()).c_str(), r["writes_per_s"].get<double>());
  std::printf(
      "  hit rate   %10s  %llu hits (files opened to read), %llu misses (names not found)\n",
      HitRate(r).c_str(), r["hits"].get<unsigned long long>(),
      r["misses"].get<unsigned long long>());
  std::printf("  lookups    %10.0f/s  %llu found, %llu not found\n",
              r["lookups_per_s"].get<double>(), r["lookup_hits"].get<unsigned long long>(),
              r["lookup_misses"].get<unsigned long long>());
  std::printf("  evictions  %llu\n", r["evictions"].get<unsigned long long>());
  std::printf("  used       %s of %s (%.1f%%), %llu files\n",
              FormatSize(r["used_bytes"].get<uint64_t>()).c_str(),
              FormatSize(r["capacity_bytes"].get<uint64_t>()).c_str(),
              100.0 * r["used_ratio"].get<double>(), r["files"].get<unsigned long long>());
}

void PrintHeader() {
  std::printf("%-8s %12s %12s %8s %8s %9s %6s %6s %10s %6s\n", "time", "read", "write", "reads/s",
              "writes/s", "lookups/s", "hit%", "evict", "used", "used%");
}

void PrintLine(const nlohmann::json& r) {
  const time_t now = std::time(nullptr);
  struct tm tm;
  localtime_r(&now, &tm);
  char clock[16];
  std::strftime(clock, sizeof clock, "%H:%M:%S", &tm);
  std::printf("%-8s %12s %12s %8.0f %8.0f %9.0f %6s %6llu %10s %5.1f%%\n", clock,
              Rate(r["read_bytes_per_s"].get<double>()).c_str(),
              Rate(r["write_bytes_per_s"].get<double>()).c_str(), r["reads_per_s"].get<double>(),
              r["writes_per_s"].get<double>(), r["lookups_per_s"].get<double>(), HitRate(r).c_str(),
              r["evictions"].get<unsigned long long>(),
              FormatSize(r["used_bytes"].get<uint64_t>()).c_str(),
              100.0 * r["used_ratio"].get<double>());
}

// Sleeps `seconds` in short steps so a signal ends the wait promptly.
void Wait(double seconds) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (!g_stop && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
}

}  // namespace

int Top(const TopOptions& o) {
  const std::string root = MountRootOf(o.mountpoint);
  const std::string stats = root + "/.kvfs/stats";
  struct sigaction sa {};
  sa.sa_handler = OnSignal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  const bool screen = !o.json && ::isatty(STDOUT_FILENO) == 1;
  if (!o.json && !screen) PrintHeader();
  std::fflush(stdout);
  Sample prev = ReadSample(stats);
  for (long long printed = 0; !g_stop && (o.count == 0 || printed < o.count); ++printed) {
    Wait(o.interval_s);
    if (g_stop) break;
    Sample cur = ReadSample(stats);
    nlohmann::json row = Row(prev, cur);
    if (o.json)
      std::printf("%s\n", JsonText(row).c_str());
    else if (screen)
      PrintScreen(root, o.interval_s, row);
    else
      PrintLine(row);
    std::fflush(stdout);
    prev = std::move(cur);
  }
  return kExitOk;
}

}  // namespace kvfs::fs
