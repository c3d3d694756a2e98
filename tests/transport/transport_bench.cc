// Ad-hoc throughput of GET over loopback TCP: one server, one client, N GETs of SIZE bytes each
// from one connection (or THREADS connections in parallel), then LOOKUP round trips. Not a test;
// prints MiB/s and ops/s.
//   kvfs_transport_bench [size_mib=32] [count=64] [threads=1] [sockbuf_bytes=8M; 0 = autotune]
//   [crc=1] [handler_copy=1] [piece_kib=2048; 0 = one GET per request, never split into pieces]
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "kvfs/transport.h"

namespace {

class StaticHandler : public kvfs::RequestHandler {
 public:
  StaticHandler(size_t size, bool copy) : data_(size, 0x5a), copy_(copy) {}
  // Copies from memory like a page-cache hit on the serving node would.
  kvfs::Result<kvfs::wire::GetReply> Get(const kvfs::wire::GetRequest&, std::span<uint8_t> out,
                                         std::vector<kvfs::DataDigest>*) override {
    const size_t n = std::min(out.size(), data_.size());
    if (copy_) std::memcpy(out.data(), data_.data(), n);
    return kvfs::wire::GetReply{data_.size(), 1, n, 0, std::nullopt, {}};
  }
  kvfs::Result<kvfs::wire::PutReply> Put(const kvfs::wire::PutRequest&,
                                         std::span<const uint8_t>) override {
    return kvfs::wire::PutReply{};
  }
  kvfs::Result<kvfs::StoreStats> Stats() override { return kvfs::StoreStats{}; }

 private:
  std::vector<uint8_t> data_;
  bool copy_;  // false: answer whatever the buffer holds, to time the transport alone
};

}  // namespace

int main(int argc, char** argv) {
  const size_t size = (argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 32) << 20;
  const int count = argc > 2 ? std::atoi(argv[2]) : 64;
  const int threads = argc > 3 ? std::atoi(argv[3]) : 1;
  const int sockbuf = argc > 4 ? std::atoi(argv[4]) : 8 << 20;
  const bool crc = argc > 5 ? std::atoi(argv[5]) != 0 : true;
  const bool copy = argc > 6 ? std::atoi(argv[6]) != 0 : true;
  const uint64_t piece_kib = argc > 7 ? std::strtoull(argv[7], nullptr, 10) : 2048;
  auto secret = kvfs::SharedSecret::FromBytes("bench-secret-0123456789abcdef").value();
  StaticHandler handler(size, copy);
  kvfs::ServerOptions sopts;
  sopts.host = "127.0.0.1";
  sopts.secret = secret;
  sopts.socket_buffer_bytes = sockbuf;
  auto server = kvfs::StartPeerServer(sopts, &handler);
  if (!server.ok()) {
    std::fprintf(stderr, "server: %s\n", server.status().ToString().c_str());
    return 1;
  }
  kvfs::ClientOptions copts;
  copts.secret = secret;
  copts.connections = static_cast<size_t>(threads);
  copts.socket_buffer_bytes = sockbuf;
  copts.data_checksums = crc;
  copts.get_piece_bytes = piece_kib << 10;
  // Room for a second piece in flight beside each caller.
  copts.connections = static_cast<size_t>(threads) * (piece_kib > 0 ? 2 : 1);
  copts.request_timeout = std::chrono::seconds(30);
  auto client = kvfs::MakePeerClient({"127.0.0.1", (*server)->port()}, copts).value();
  std::vector<std::vector<uint8_t>> bufs(threads, std::vector<uint8_t>(size));
  // Warm up: connections, page faults of the buffers.
  for (auto& b : bufs) (void)client->Get({"k", 0, size, 0}, b);
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::thread> ts;
  std::atomic<int> errors{0};
  for (int t = 0; t < threads; ++t) {
    ts.emplace_back([&, t] {
      for (int i = t; i < count; i += threads) {
        auto r = client->Get({"k", 0, size, 0}, bufs[t]);
        if (!r.ok() || r->length != size) ++errors;
      }
    });
  }
  for (auto& th : ts) th.join();
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double mib = static_cast<double>(size) * count / (1 << 20);
  std::printf(
      "GET %zu MiB x %d, %d thread(s), sockbuf %d, crc %d, copy %d, piece %llu KiB: %.0f MiB/s "
      "(%.2f Gbit/s), %d errors\n",
      size >> 20, count, threads, sockbuf, crc ? 1 : 0, copy ? 1 : 0,
      static_cast<unsigned long long>(piece_kib), mib / secs, mib * 8 * 1.048576 / 1000 / secs,
      errors.load());
  // Small-request round trips: one thread, one connection.
  const int pings = 20000;
  const auto l0 = std::chrono::steady_clock::now();
  for (int i = 0; i < pings; ++i) {
    if (!client->Ping().ok()) ++errors;
  }
  const double lsecs = std::chrono::duration<double>(std::chrono::steady_clock::now() - l0).count();
  std::printf("PING x %d: %.0f ops/s, %.1f us mean round trip\n", pings, pings / lsecs,
              lsecs / pings * 1e6);
  return errors.load() == 0 ? 0 : 1;
}
