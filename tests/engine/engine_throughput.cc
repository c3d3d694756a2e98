// Ad-hoc single-thread throughput of the local engine on 32 MiB chunks: write + Finish + Apply
// (durability=close), then Read of each chunk. Usage: kvfs_engine_throughput DIR [chunks]
// [close|async] [off|lz4]. Prints MiB/s; not a test and asserts nothing about speed.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "kvfs/local_engine.h"

using namespace kvfs;

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s DIR [chunks] [close|async] [off|lz4]\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  const int chunks = argc > 2 ? std::atoi(argv[2]) : 16;
  const uint64_t chunk = 32ull << 20;
  EngineOptions o;
  o.data_dir = dir;
  o.capacity = chunk * (chunks + 2);
  if (argc > 3 && std::strcmp(argv[3], "async") == 0) o.durability = Durability::kAsync;
  if (argc > 4 && std::strcmp(argv[4], "lz4") == 0) o.compression = Compression::kLz4;
  std::filesystem::remove_all(dir);
  auto opened = LocalEngine::Open(o);
  if (!opened.ok()) {
    std::fprintf(stderr, "open: %s\n", opened.status().ToString().c_str());
    return 1;
  }
  auto& e = *opened.value();
  std::vector<uint8_t> data(chunk);
  std::mt19937_64 rng(1);
  for (size_t i = 0; i < data.size(); i += 8) {
    uint64_t x = rng();
    std::memcpy(&data[i], &x, 8);
  }
  std::vector<LayoutRef> layouts;
  using Clock = std::chrono::steady_clock;
  auto t0 = Clock::now();
  for (int c = 0; c < chunks; ++c) {
    auto w = std::move(e.NewWriter(nullptr)).value();
    for (uint64_t off = 0; off < chunk; off += 1 << 20) {  // 1 MiB writes, like FUSE
      Status st = w->Write(off, data.data() + off, 1 << 20);
      if (!st.ok()) return std::fprintf(stderr, "write: %s\n", st.ToString().c_str()), 1;
    }
    auto l = w->Finish();
    if (!l.ok()) return std::fprintf(stderr, "finish: %s\n", l.status().ToString().c_str()), 1;
    MetaBatch b;
    ObjectRecord r;
    r.id = e.NewId();
    r.parent = kRootId;
    r.name = "c" + std::to_string(c);
    r.layout = *l;
    b.puts.push_back(r);
    Status st = e.Apply(b);
    if (!st.ok()) return std::fprintf(stderr, "apply: %s\n", st.ToString().c_str()), 1;
    layouts.push_back(*l);
  }
  const double wsec = std::chrono::duration<double>(Clock::now() - t0).count();
  std::vector<uint8_t> out(chunk);
  double rsec = 0, rsec2 = 0;
  for (double* sec : {&rsec, &rsec2}) {  // two passes: the second shows the steady state
    t0 = Clock::now();
    for (const auto& l : layouts) {
      auto n = e.Read(l, 0, out.data(), out.size());
      if (!n.ok() || *n != chunk) return std::fprintf(stderr, "read failed\n"), 1;
    }
    *sec = std::chrono::duration<double>(Clock::now() - t0).count();
  }
  if (out != data) return std::fprintf(stderr, "read returned wrong bytes\n"), 1;
  const double mib = static_cast<double>(chunk) * chunks / (1 << 20);
  std::printf(
      "%d x 32 MiB, durability=%s compression=%s: write+Finish+Apply %.0f MiB/s, "
      "Read %.0f MiB/s (second pass %.0f MiB/s)\n",
      chunks, o.durability == Durability::kAsync ? "async" : "close",
      o.compression == Compression::kLz4 ? "lz4" : "off", mib / wsec, mib / rsec, mib / rsec2);
  layouts.clear();
  opened = Status::Error(EIO, "closed");  // close before removing
  std::filesystem::remove_all(dir);
  return 0;
}
