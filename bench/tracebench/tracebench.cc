// tracebench: replays a KV-cache request trace against the eviction policies (in-process
// simulation, the default) or through a directory (--dir, e.g. a kvfs mount) and reports block
// and request hit rates, bytes moved, a modelled TTFT and the offline optimum beside each
// policy. See docs/eviction.md for the results and their meaning.
#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "belady_oracle.h"
#include "dir_replay.h"
#include "eviction_policy.h"
#include "report.h"
#include "synthetic_trace.h"
#include "trace_reader.h"
#include "trace_replay.h"
#include "ttft_model.h"

#ifndef KVFS_DEFAULT_TRACE
#define KVFS_DEFAULT_TRACE "conversation_trace.jsonl"
#endif

namespace {

using namespace kvfs;
using namespace kvfs::eviction;
using namespace kvfs::tracebench;

std::vector<std::string> Split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  std::string item;
  while (std::getline(in, item, ',')) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

double Seconds(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

int Fail(const Status& s) {
  std::cerr << "tracebench: " << s.ToString() << "\n";
  return 1;
}

// What a kvfs mount says about its cache in <root>/.kvfs/status (absent elsewhere).
struct MountPolicy {
  std::string policy;
  double high_watermark = 1, low_watermark = 1;
  uint64_t evictions = 0;
};

MountPolicy ReadMountPolicy(const std::string& dir) {
  MountPolicy m;
  std::ifstream in(dir + "/.kvfs/status");
  if (!in) return m;
  std::stringstream text;
  text << in.rdbuf();
  auto j = nlohmann::json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return m;
  m.policy = j.value("eviction_policy", std::string());
  m.high_watermark = j.value("high_watermark", 1.0);
  m.low_watermark = j.value("low_watermark", 1.0);
  m.evictions = j.value("evictions", uint64_t{0});
  return m;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Replay a KV-cache trace against eviction policies (see docs/eviction.md)"};
  std::string trace_path = KVFS_DEFAULT_TRACE;
  std::string policies_arg = "lru,fifo,lfu,prefix";
  std::string capacities_arg = "0.05,0.10,0.25,0.50";
  uint64_t block_bytes = 0;
  std::string dir, csv_path, json_path, plot_path, segment = "all";
  double time_scale = 0;
  size_t max_requests = 0;
  int64_t synthetic_seed = -1;
  uint32_t synthetic_requests = 20000;
  PolicyOptions popts;
  TtftModel model;
  bool parent_hints = false;
  app.add_option("--trace", trace_path, "JSONL trace (Mooncake format)");
  app.add_option("--policies", policies_arg, "comma-separated: lru,fifo,lfu,prefix");
  app.add_option("--capacities", capacities_arg, "capacities as shares of the working set");
  app.add_option("--block-bytes", block_bytes,
                 "bytes per block (default: 64 MiB = 512 tokens x 128 KiB in simulation, "
                 "64 KiB with --dir)");
  app.add_option("--dir", dir, "replay through this directory (e.g. in a kvfs mount)");
  app.add_option("--time-scale", time_scale,
                 "--dir: pace requests at trace time x this (0 = back to back)");
  app.add_option("--max-requests", max_requests, "use only the first N requests (0 = all)");
  app.add_option("--segment", segment, "all | first-half | second-half of the trace")
      ->check(CLI::IsMember({"all", "first-half", "second-half"}));
  app.add_option("--synthetic", synthetic_seed,
                 "use a generated trace with this seed instead of --trace");
  app.add_option("--synthetic-requests", synthetic_requests, "requests in the generated trace");
  app.add_option("--csv", csv_path, "write rows as CSV");
  app.add_option("--json", json_path, "write rows as JSON");
  app.add_option("--plot", plot_path, "write an SVG plot of hit rate vs capacity");
  app.add_option("--prefix-protected", popts.prefix_protected_fraction,
                 "prefix: share of bytes for re-read blocks");
  app.add_option("--prefix-adapt-step", popts.prefix_adapt_step,
                 "prefix: protected share change per ghost hit (0 = fixed)");
  app.add_option("--lfu-aging", popts.lfu_aging, "lfu: weight of the aging floor");
  app.add_flag("--parent-hints", parent_hints,
               "give policies the explicit parent link (else prefix learns it from order); "
               "with --dir: set user.kvfs.parent on every written block");
  app.add_option("--compute-us-per-token", model.compute_us_per_token, "TTFT model: T");
  app.add_option("--kv-bytes-per-token", model.kv_bytes_per_token, "TTFT model: KV bytes/token");
  app.add_option("--read-mib-s", model.read_mib_s, "TTFT model: read bandwidth");
  app.add_option("--write-mib-s", model.write_mib_s, "TTFT model: write bandwidth");
  CLI11_PARSE(app, argc, argv);

  // ---- The trace ----
  std::vector<TraceRequest> trace;
  std::string label;
  if (synthetic_seed >= 0) {
    SyntheticTraceOptions so;
    so.seed = static_cast<uint64_t>(synthetic_seed);
    so.requests = synthetic_requests;
    trace = GenerateSyntheticTrace(so);
    label = "synthetic(seed=" + std::to_string(synthetic_seed) + ")";
  } else {
    auto loaded = ReadJsonlTrace(trace_path, 0);
    if (!loaded.ok()) return Fail(loaded.status());
    trace = std::move(*loaded);
    label = trace_path;
  }
  if (segment != "all") {
    // Halves of the trace: policies that learn start cold on the half they are measured on.
    const size_t half = trace.size() / 2;
    if (segment == "first-half")
      trace.resize(half);
    else
      trace.erase(trace.begin(), trace.begin() + static_cast<std::ptrdiff_t>(half));
    label += " [" + segment + "]";
  }
  if (max_requests && trace.size() > max_requests) trace.resize(max_requests);
  if (trace.empty()) return Fail(Status::Invalid("the trace has no requests"));

  std::vector<double> capacities;
  for (const auto& c : Split(capacities_arg)) {
    char* end = nullptr;
    double v = std::strtod(c.c_str(), &end);
    if (!end || *end || v <= 0) return Fail(Status::Invalid("bad capacity '" + c + "'"));
    capacities.push_back(v);
  }
  const std::vector<std::string> policies = Split(policies_arg);
  for (const auto& p : policies) {
    auto made = MakePolicy(p, popts);
    if (!made.ok()) return Fail(made.status());
  }

  const uint64_t distinct = DistinctBlocks(trace);
  const uint32_t block_tokens = 512;
  if (block_bytes == 0) block_bytes = dir.empty() ? 512ull * model.kv_bytes_per_token : 64 << 10;
  uint64_t refs = 0;
  for (const auto& r : trace) refs += r.blocks.size();
  std::printf("trace: %s: %zu requests, %llu block references, %llu distinct blocks\n",
              label.c_str(), trace.size(), static_cast<unsigned long long>(refs),
              static_cast<unsigned long long>(distinct));
  std::printf("block: %u tokens, %llu bytes; working set %.1f GiB\n", block_tokens,
              static_cast<unsigned long long>(block_bytes),
              double(distinct) * double(block_bytes) / 1073741824.0);
  std::printf("%s\n", model.Describe().c_str());
  std::printf(
      "block hit rate = block references served from the cache (prefix up to the first miss)\n"
      "request hit rate = of the requests an unbounded cache would serve something to, the\n"
      "  share that got all of it (every reusable block present)\n\n");

  const auto references = ReferenceSequence(trace);
  auto optimum_at = [&](uint64_t capacity_bytes) {
    BeladyOracle oracle(references);
    ReplayOptions ro;
    ro.block_bytes = block_bytes;
    ro.capacity_bytes = capacity_bytes;
    ro.block_tokens = block_tokens;
    return ReplayTrace(trace, oracle, ro);
  };

  // One simulated row: `name` at `capacity_bytes`.
  auto simulate = [&](const std::string& name, const std::string& label, double fraction,
                      uint64_t capacity_bytes, const ReplayResult& opt) {
    auto policy = std::move(MakePolicy(name, popts)).value();
    ReplayOptions ro;
    ro.block_bytes = block_bytes;
    ro.capacity_bytes = capacity_bytes;
    ro.block_tokens = block_tokens;
    ro.parent_hints = parent_hints;
    auto t = std::chrono::steady_clock::now();
    auto res = ReplayTrace(trace, *policy, ro);
    Row row;
    row.seconds = Seconds(t);
    row.policy = label;
    row.capacity_fraction = fraction;
    row.capacity_bytes = capacity_bytes;
    row.block_hit_rate = res.block_hit_rate();
    row.request_hit_rate = res.request_hit_rate();
    row.optimum_block_hit_rate = opt.block_hit_rate();
    row.optimum_request_hit_rate = opt.request_hit_rate();
    row.bytes_read = res.bytes_read;
    row.bytes_written = res.bytes_written;
    row.evictions = res.evictions;
    auto ttft = ModelTtft(model, trace, res.hit_blocks, block_tokens);
    row.ttft_no_cache_ms = ttft.mean_no_cache_ms;
    row.ttft_cache_ms = ttft.mean_cache_ms;
    row.ttft_speedup = ttft.speedup();
    return row;
  };

  std::vector<Row> rows;
  if (!dir.empty()) {
    // ---- Through a directory: the filesystem enforces its own capacity ----
    DirReplayOptions dopts{dir, block_bytes, time_scale, parent_hints};
    auto res = ReplayThroughDirectory(trace, dopts);
    if (!res.ok()) return Fail(res.status());
    const MountPolicy mount = ReadMountPolicy(dir);
    const auto& d = *res;
    const double working_set = double(distinct) * double(block_bytes);
    Row row;
    row.policy = mount.policy.empty() ? "dir" : "dir:" + mount.policy;
    row.capacity_bytes = d.fs_capacity_bytes;
    row.capacity_fraction = double(d.fs_capacity_bytes) / working_set;
    row.block_hit_rate = d.replay.block_hit_rate();
    row.request_hit_rate = d.replay.request_hit_rate();
    row.bytes_read = d.replay.bytes_read;
    row.bytes_written = d.replay.bytes_written;
    row.evictions = mount.evictions;
    row.read_mib_s = d.read_seconds > 0 ? d.replay.bytes_read / 1048576.0 / d.read_seconds : 0;
    row.seconds = d.total_seconds;
    TtftModel measured = model;
    if (row.read_mib_s > 0) measured.read_mib_s = row.read_mib_s;
    auto ttft = ModelTtft(measured, trace, d.replay.hit_blocks, block_tokens);
    row.ttft_no_cache_ms = ttft.mean_no_cache_ms;
    row.ttft_cache_ms = ttft.mean_cache_ms;
    row.ttft_speedup = ttft.speedup();
    auto opt = optimum_at(std::min<uint64_t>(d.fs_capacity_bytes, distinct * block_bytes));
    row.optimum_block_hit_rate = opt.block_hit_rate();
    row.optimum_request_hit_rate = opt.request_hit_rate();
    rows.push_back(row);
    std::printf(
        "dir %s: %llu lookups, %llu verify failures, %llu write failures, %llu parent "
        "xattr failures, %.1f s (read %.1f s, write %.1f s); TTFT uses the measured read "
        "rate (%s)\n",
        dir.c_str(), static_cast<unsigned long long>(d.lookups),
        static_cast<unsigned long long>(d.verify_failures),
        static_cast<unsigned long long>(d.write_failures),
        static_cast<unsigned long long>(d.xattr_failures), d.total_seconds, d.read_seconds,
        d.write_seconds, measured.Describe().c_str());
    if (d.verify_failures) std::printf("WARNING: some reads returned wrong bytes\n");
    // The same policy simulated where a kvfs mount keeps its usage: between the low and the
    // high watermark of its capacity (it evicts when a publish passes the high one).
    if (!mount.policy.empty() && MakePolicy(mount.policy, popts).ok()) {
      for (auto [tag, mark] :
           {std::pair{"high", mount.high_watermark}, std::pair{"low", mount.low_watermark}}) {
        const auto cap =
            static_cast<uint64_t>(double(d.fs_capacity_bytes) * mark) / block_bytes * block_bytes;
        auto o = optimum_at(std::min<uint64_t>(cap, distinct * block_bytes));
        rows.push_back(simulate(mount.policy, "sim:" + mount.policy + "@" + tag,
                                double(cap) / working_set, cap, o));
      }
    }
  } else {
    // ---- In-process simulation ----
    for (double cap : capacities) {
      const uint64_t capacity_bytes = static_cast<uint64_t>(cap * double(distinct)) * block_bytes;
      auto opt = optimum_at(capacity_bytes);
      for (const auto& name : policies)
        rows.push_back(simulate(name, name, cap, capacity_bytes, opt));
    }
  }

  PrintTable(std::cout, rows);
  std::cout.flush();
  if (!csv_path.empty()) {
    if (Status s = WriteCsv(csv_path, rows); !s.ok()) return Fail(s);
  }
  if (!json_path.empty()) {
    if (Status s = WriteJson(json_path, rows, label); !s.ok()) return Fail(s);
  }
  if (!plot_path.empty()) {
    if (Status s = WriteSvg(plot_path, rows, "Block hit rate vs capacity: " + label); !s.ok()) {
      return Fail(s);
    }
  }
  return 0;
}
