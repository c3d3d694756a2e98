// TCP client and server on 127.0.0.1 (ephemeral ports) with an in-memory handler.
#include <gtest/gtest.h>
#include <poll.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>

#include <atomic>
#include <cstring>
#include <sstream>
#include <thread>

#include "auth.h"
#include "kvfs/transport.h"
#include "memory_handler.h"
#include "tcp_client.h"
#include "tcp_frame_io.h"
#include "tcp_socket.h"
#include "tcp_test_fixture.h"

namespace kvfs {
namespace {

using namespace std::chrono_literals;
using tcp_test::RandomBytes;
using tcp_test::TcpTransportTest;
using tcp_test::TestSecret;
using testing::MemoryHandler;

TEST_F(TcpTransportTest, PingPutGetHitAndMiss) {
  StartServer();
  auto c = Client();
  ASSERT_TRUE(c->Ping().ok());
  std::vector<uint8_t> data = RandomBytes(1000, 1);
  auto put = c->Put({"/m/a", 0644, 0, {}, 0, 0}, data);
  ASSERT_TRUE(put.ok()) << put.status().ToString();
  std::vector<uint8_t> out(data.size());
  auto hit = c->Get({"/m/a", 0, data.size(), 0}, out);
  ASSERT_TRUE(hit.ok());
  EXPECT_EQ(hit->object_size, 1000u);
  EXPECT_EQ(hit->version, put->version);
  EXPECT_EQ(out, data);
  auto miss = c->Get({"/m/none", 0, 10, 0}, out);
  EXPECT_EQ(miss.status().err(), ENOENT);
}

TEST_F(TcpTransportTest, PutAndGetMultiMiBByteExact) {
  StartServer();
  auto c = Client();
  const std::vector<uint8_t> data = RandomBytes(24u << 20, 2);
  ASSERT_TRUE(c->Put({"/big", 0644, 0, {}, 0, 0}, data).ok());
  std::vector<uint8_t> out(data.size());
  auto r = c->Get({"/big", 0, data.size(), 0}, out);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->length, data.size());
  EXPECT_EQ(r->object_size, data.size());
  EXPECT_TRUE(out == data);
  // A range at 4096, and a read of the tail that comes back short.
  std::vector<uint8_t> part(1 << 20);
  r = c->Get({"/big", 4096, part.size(), 0}, part);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(0, std::memcmp(part.data(), data.data() + 4096, part.size()));
  r = c->Get({"/big", data.size() - 100, part.size(), 0}, part);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->length, 100u);
  EXPECT_EQ(0, std::memcmp(part.data(), data.data() + data.size() - 100, 100));
}

TEST_F(TcpTransportTest, LargeGetIsFetchedAsParallelPiecesByteExact) {
  StartServer();
  ClientOptions opts;
  opts.connections = 4;
  opts.get_piece_bytes = 2u << 20;
  opts.get_parallel_pieces = 4;
  auto c = Client(opts);
  const std::vector<uint8_t> data = RandomBytes((6u << 20) + 123, 5);
  auto put = c->Put({"/split", 0644, 0, {}, 0, 0}, data);
  ASSERT_TRUE(put.ok());
  // Four pieces of 2 MiB: the handler holds them until three are in flight at once, so this
  // passes only if the pieces really travel in parallel.
  handler_.RequireConcurrency(3);
  std::vector<uint8_t> out(8u << 20);
  auto r = c->Get({"/split", 0, out.size(), 0}, out);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_GE(handler_.max_concurrent(), 3);
  EXPECT_EQ(r->length, data.size());  // the last piece came back short
  EXPECT_EQ(r->object_size, data.size());
  EXPECT_EQ(r->version, put->version);
  EXPECT_EQ(0, std::memcmp(out.data(), data.data(), data.size()));
  // Pieces wholly past the end answer nothing; the bytes that exist still come back.
  r = c->Get({"/split", 5u << 20, out.size(), 0}, out);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->length, data.size() - (5u << 20));
  EXPECT_EQ(0, std::memcmp(out.data(), data.data() + (5u << 20), r->length));
  // Every piece carries the version: a stale one fails as a whole.
  EXPECT_EQ(c->Get({"/split", 0, out.size(), put->version + 1}, out).status().err(), ESTALE);
  EXPECT_LE(static_cast<TcpPeerClient*>(c.get())->open_connections(), 4u);

  // One connection: the same pieces, one after the other, at an odd offset and length.
  opts.connections = 1;
  opts.get_parallel_pieces = 1;
  opts.get_piece_bytes = 1u << 20;
  auto one = Client(opts);
  std::fill(out.begin(), out.end(), 0);
  r = one->Get({"/split", 12345, (3u << 20) + 7, 0}, out);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->length, (3u << 20) + 7);
  EXPECT_EQ(0, std::memcmp(out.data(), data.data() + 12345, r->length));
  EXPECT_EQ(static_cast<TcpPeerClient*>(one.get())->open_connections(), 1u);
}

TEST_F(TcpTransportTest, OnePieceGetGoesAsTwoHalvesOnIdleConnections) {
  StartServer();
  ClientOptions opts;
  opts.connections = 2;
  opts.get_parallel_pieces = 2;  // get_piece_bytes 2 MiB, get_split_unit 1 MiB: the defaults
  auto c = Client(opts);
  CallOptions split;
  split.split = true;  // a caller that waits for each GET (a reader with pieces ahead does not)
  const std::vector<uint8_t> data = RandomBytes((3u << 20) + 99, 8);
  auto put = c->Put({"/half", 0644, 0, {}, 0, 0}, data);
  ASSERT_TRUE(put.ok());
  // A 2 MiB GET at offset 1 MiB: two 1 MiB GETs, both in flight at once (the handler holds
  // the first until the second arrives).
  handler_.RequireConcurrency(2, std::chrono::seconds(2));
  const int gets_before = handler_.digest_gets();
  std::vector<uint8_t> out(2u << 20);
  auto r = c->Get({"/half", 1u << 20, out.size(), 0}, out, split);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(handler_.max_concurrent(), 2);
  EXPECT_EQ(handler_.digest_gets() - gets_before, 2);
  EXPECT_EQ(r->length, out.size());
  EXPECT_EQ(r->version, put->version);
  EXPECT_EQ(0, std::memcmp(out.data(), data.data() + (1u << 20), out.size()));
  // 1.5 MiB from 2 MiB: halves of 1 MiB and the short rest (the object ends first).
  std::fill(out.begin(), out.end(), 0);
  r = c->Get({"/half", 2u << 20, (3u << 20) / 2, 0}, out, split);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->length, data.size() - (2u << 20));
  EXPECT_EQ(0, std::memcmp(out.data(), data.data() + (2u << 20), r->length));
  EXPECT_EQ(handler_.digest_gets() - gets_before, 4);
  handler_.RequireConcurrency(0);
  // Whole: an offset inside a unit, a length of one unit, a client that may not split.
  r = c->Get({"/half", 4096, 2u << 20, 0}, out, split);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(0, std::memcmp(out.data(), data.data() + 4096, 2u << 20));
  r = c->Get({"/half", 0, 1u << 20, 0}, out, split);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(handler_.digest_gets() - gets_before, 6);
  opts.get_parallel_pieces = 1;
  auto serial = Client(opts);
  r = serial->Get({"/half", 0, 2u << 20, 0}, out, split);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(handler_.digest_gets() - gets_before, 7);
  EXPECT_EQ(0, std::memcmp(out.data(), data.data(), 2u << 20));
  r = c->Get({"/half", 0, 2u << 20, 0}, out);  // a caller that did not ask
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(handler_.digest_gets() - gets_before, 8);
}

TEST_F(TcpTransportTest, RemoteErrnoComesBackAndConnectionIsReused) {
  StartServer();
  ClientOptions opts;
  opts.connections = 1;
  auto c = Client(opts);
  std::vector<uint8_t> out(16);
  auto r = c->Get({"/missing", 0, 16, 0}, out);
  EXPECT_EQ(r.status().err(), ENOENT);
  EXPECT_NE(r.status().message().find("no chunk /missing"), std::string::npos);
  ASSERT_TRUE(c->Put({"/v", 0644, 0, {}, 0, 0}, out).ok());
  EXPECT_EQ(c->Get({"/v", 0, 16, 999}, out).status().err(), ESTALE);
  EXPECT_TRUE(c->Ping().ok());
  EXPECT_EQ(static_cast<TcpPeerClient*>(c.get())->open_connections(), 1u);
}

TEST_F(TcpTransportTest, Stats) {
  StartServer();
  auto c = Client();
  std::vector<uint8_t> data(10, 1);
  ASSERT_TRUE(c->Put({"/x", 0644, 0, {}, 0, 0}, data).ok());
  auto st = c->Stats();
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->files, 1u);
  EXPECT_EQ(st->logical_bytes, 10u);
  EXPECT_EQ(st->devices, std::vector<std::string>{"memory"});
}

TEST_F(TcpTransportTest, ConcurrentRequestsOverSeveralConnections) {
  ServerOptions sopts;
  sopts.threads = 8;
  StartServer(sopts);
  ClientOptions copts;
  copts.connections = 4;
  auto c = Client(copts);
  std::vector<std::vector<uint8_t>> blobs;
  for (int i = 0; i < 8; ++i) {
    blobs.push_back(RandomBytes(1 << 20, 100 + i));
    ASSERT_TRUE(c->Put({"/c/" + std::to_string(i), 0644, 0, {}, 0, 0}, blobs.back()).ok());
  }
  // Gets block in the handler until 4 are in flight at once: only true concurrency over 4
  // connections gets past that (otherwise the handler times out after 5 s and the check fails).
  handler_.RequireConcurrency(4);
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      std::vector<uint8_t> out(1 << 20);
      for (int k = 0; k < 10; ++k) {
        const int i = (t + k) % 8;
        auto r = c->Get({"/c/" + std::to_string(i), 0, out.size(), 0}, out);
        if (!r.ok() || out != blobs[i]) ++failures;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(handler_.max_concurrent(), 4);
  EXPECT_LE(static_cast<TcpPeerClient*>(c.get())->open_connections(), 4u);
}

TEST(TcpTimeouts, SilentServerCostsOneTimeout) {
  // A server that accepts connections and then never says a word.
  auto listener = TcpListen("127.0.0.1", 0, 16);
  ASSERT_TRUE(listener.ok());
  const uint16_t port = LocalPort(listener->get()).value();
  std::atomic<bool> stop{false};
  std::atomic<int> accepted{0};
  std::thread acceptor([&] {
    std::vector<Fd> held;
    while (!stop) {
      if (!WaitFd(listener->get(), POLLIN, Clock::now() + 50ms).ok()) continue;
      int fd = ::accept(listener->get(), nullptr, nullptr);
      if (fd >= 0) {
        held.emplace_back(fd);
        ++accepted;
      }
    }
  });
  ClientOptions opts;
  opts.secret = TestSecret();
  opts.request_timeout = 300ms;
  auto c = MakePeerClient({"127.0.0.1", port}, opts).value();
  const auto t0 = Clock::now();
  Status st = c->Ping();
  const auto elapsed = Clock::now() - t0;
  EXPECT_EQ(st.err(), ETIMEDOUT) << st.ToString();
  EXPECT_LT(elapsed, 3s);  // generous: 10x the deadline
  // A per-call deadline overrides the default.
  const auto t1 = Clock::now();
  EXPECT_EQ(c->Ping(CallOptions{100ms}).err(), ETIMEDOUT);
  EXPECT_LT(Clock::now() - t1, 1s);
  stop = true;
  acceptor.join();
  EXPECT_GE(accepted.load(), 1);
}

TEST_F(TcpTransportTest, StalledHandlerAfterAuthTimesOut) {
  // Authenticated, then the server stops answering (its handler is stuck): one timeout.
  handler_.RequireConcurrency(1000, 1500ms);  // every Get waits 1.5 s in the handler
  StartServer();
  ClientOptions opts;
  opts.request_timeout = 300ms;
  auto c = Client(opts);
  ASSERT_TRUE(c->Ping().ok());
  std::vector<uint8_t> out(10);
  const auto t0 = Clock::now();
  EXPECT_EQ(c->Get({"/slow", 0, 10, 0}, out).status().err(), ETIMEDOUT);
  EXPECT_LT(Clock::now() - t0, 3s);
  // The timed-out connection was dropped, not reused with a late answer in it.
  EXPECT_TRUE(c->Ping().ok());
}

TEST(TcpTimeouts, GoneServerGivesPromptConnectionError) {
  uint16_t port;
  {
    auto listener = TcpListen("127.0.0.1", 0, 16);
    ASSERT_TRUE(listener.ok());
    port = LocalPort(listener->get()).value();
  }  // closed: nothing listens on the port now
  ClientOptions opts;
  opts.secret = TestSecret();
  opts.request_timeout = 5s;
  auto c = MakePeerClient({"127.0.0.1", port}, opts).value();
  const auto t0 = Clock::now();
  Status st = c->Ping();
  EXPECT_EQ(st.err(), ECONNREFUSED) << st.ToString();
  EXPECT_LT(Clock::now() - t0, 2s);
}

TEST_F(TcpTransportTest, WrongSecretRefused) {
  StartServer();
  ClientOptions opts;
  opts.secret = SharedSecret::FromBytes("some-other-secret-987654").value();
  auto c = Client(opts);
  Status st = c->Ping();
  EXPECT_EQ(st.err(), EACCES) << st.ToString();
}

TEST_F(TcpTransportTest, MissingSecretRefused) {
  StartServer();
  ClientOptions opts;  // no secret
  auto c = MakePeerClient({"127.0.0.1", server_->port()}, opts);
  EXPECT_EQ(c.status().err(), EACCES);
  // And on the wire: AUTH with a proof made without the secret is refused and closed.
  Fd fd = RawConnect();
  ClientHandshake hs(SharedSecret{});
  ASSERT_TRUE(SendFrame(fd.get(), wire::MsgType::kHello, 0, 1, wire::Encode(hs.Start()), {},
                        Clock::now() + 2s)
                  .ok());
  ReceivedFrame f;
  ASSERT_TRUE(RecvFrame(fd.get(), 8192, Clock::now() + 2s, false, nullptr, &f).ok());
  ASSERT_TRUE(SendFrame(fd.get(), wire::MsgType::kAuth, 0, 2, wire::Encode(wire::Auth{}), {},
                        Clock::now() + 2s)
                  .ok());
  EXPECT_EQ(RecvErrorReply(fd.get()), EACCES);
  EXPECT_TRUE(ClosedByServer(fd.get()));
}

TEST_F(TcpTransportTest, RequestBeforeAuthRefused) {
  StartServer();
  Fd fd = RawConnect();
  ASSERT_TRUE(SendFrame(fd.get(), wire::MsgType::kGet, 0, 1,
                        wire::Encode(wire::GetRequest{"/x", 0, 10, 0}), {}, Clock::now() + 2s)
                  .ok());
  EXPECT_EQ(RecvErrorReply(fd.get()), EACCES);
  EXPECT_TRUE(ClosedByServer(fd.get()));
}

TEST_F(TcpTransportTest, OversizedFrameClosesConnection) {
  ServerOptions sopts;
  sopts.max_frame = 1 << 20;
  StartServer(sopts);
  // Before auth: a header announcing 100 MiB.
  {
    Fd fd = RawConnect();
    uint8_t head[wire::kHeaderSize];
    wire::EncodeHeader({wire::MsgType::kHello, 0, 1, 100u << 20}, head);
    ASSERT_EQ(::send(fd.get(), head, sizeof head, MSG_NOSIGNAL), static_cast<ssize_t>(sizeof head));
    EXPECT_TRUE(ClosedByServer(fd.get()));
  }
  // After auth: a PUT over the server's cap.
  {
    Fd fd = RawConnect();
    RawHandshake(fd.get());
    uint8_t head[wire::kHeaderSize];
    wire::EncodeHeader({wire::MsgType::kPut, 0, 3, 2u << 20}, head);
    ASSERT_EQ(::send(fd.get(), head, sizeof head, MSG_NOSIGNAL), static_cast<ssize_t>(sizeof head));
    EXPECT_TRUE(ClosedByServer(fd.get()));
  }
  // Through the client: the PUT fails, the next request works on a fresh connection.
  ClientOptions copts;
  copts.max_frame = 8 << 20;
  auto c = Client(copts);
  std::vector<uint8_t> big(2 << 20, 7);
  Status st = c->Put({"/too-big", 0644, 0, {}, 0, 0}, big).status();
  EXPECT_FALSE(st.ok());
  EXPECT_TRUE(st.err() == EMSGSIZE || st.err() == ECONNRESET || st.err() == EPIPE) << st.ToString();
  EXPECT_TRUE(c->Ping().ok());
}

TEST_F(TcpTransportTest, GarbageClosesConnection) {
  StartServer();
  Fd fd = RawConnect();
  std::string junk(64, 'z');
  ASSERT_EQ(::send(fd.get(), junk.data(), junk.size(), MSG_NOSIGNAL), 64);
  EXPECT_TRUE(ClosedByServer(fd.get()));
  // The server is fine afterwards.
  EXPECT_TRUE(Client()->Ping().ok());
}

TEST_F(TcpTransportTest, AFloodOfGarbageConnectionsLogsAFewLines) {
  // Anyone who can reach the port could write one warning per bad connection into the
  // operator's log, as fast as they connect (300 connections: 224 lines, 2026-11-27).
  std::ostringstream captured;
  auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(captured);
  auto previous = spdlog::default_logger();
  spdlog::set_default_logger(std::make_shared<spdlog::logger>("capture", sink));
  StartServer();
  for (int i = 0; i < 100; ++i) {
    Fd fd = RawConnect();
    std::string junk(64, static_cast<char>('a' + i % 26));
    ASSERT_EQ(::send(fd.get(), junk.data(), junk.size(), MSG_NOSIGNAL), 64);
    EXPECT_TRUE(ClosedByServer(fd.get()));
  }
  EXPECT_TRUE(Client()->Ping().ok());
  spdlog::set_default_logger(previous);
  const std::string log = captured.str();
  size_t lines = 0;
  for (size_t at = log.find("before authentication"); at != std::string::npos;
       at = log.find("before authentication", at + 1))
    ++lines;
  EXPECT_GE(lines, 1u) << "the first ones still say who and what";
  EXPECT_LE(lines, 10u) << log;
}

TEST_F(TcpTransportTest, HalfFramesBeforeAuthHoldNoWorker) {
  // Anyone who can reach the port may send part of a frame and stop. Before authentication no
  // worker waits for the rest, so the peers that do authenticate are served at once, not after
  // io_timeout of every stalled stranger.
  ServerOptions sopts;
  sopts.threads = 2;
  sopts.io_timeout = 20s;
  StartServer(sopts);
  std::vector<Fd> stalled;
  const std::string hello =
      wire::EncodeFrame(wire::MsgType::kHello, 0, 1, wire::Encode(wire::Hello{"stalled", {}}));
  for (size_t cut : {size_t{7}, wire::kHeaderSize, hello.size() - 1, size_t{1}, size_t{20}}) {
    Fd fd = RawConnect();
    ASSERT_EQ(::send(fd.get(), hello.data(), cut, MSG_NOSIGNAL), static_cast<ssize_t>(cut));
    stalled.push_back(std::move(fd));
  }
  ClientOptions copts;
  copts.request_timeout = 3s;
  auto c = Client(copts);
  ASSERT_NE(c, nullptr);
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(c->Ping().ok());
  // The rest of a stalled HELLO still gets its CHALLENGE.
  ASSERT_EQ(::send(stalled[2].get(), hello.data() + hello.size() - 1, 1, MSG_NOSIGNAL), 1);
  ReceivedFrame f;
  ASSERT_TRUE(RecvFrame(stalled[2].get(), 8192, Clock::now() + 5s, false, nullptr, &f).ok());
  EXPECT_EQ(f.header.type, wire::MsgType::kChallenge);
}

TEST_F(TcpTransportTest, MalformedMetaAfterAuthClosesConnection) {
  StartServer();
  Fd fd = RawConnect();
  RawHandshake(fd.get());
  ASSERT_TRUE(
      SendFrame(fd.get(), wire::MsgType::kGet, 0, 3, "\xff\xff\xff\xff", {}, Clock::now() + 2s)
          .ok());
  ReceivedFrame f;
  ASSERT_TRUE(RecvFrame(fd.get(), 8192, Clock::now() + 2s, false, nullptr, &f).ok());
  EXPECT_EQ(f.header.type, wire::MsgType::kError);
  EXPECT_TRUE(ClosedByServer(fd.get()));
}

TEST_F(TcpTransportTest, HandlerExceptionBecomesEio) {
  StartServer();
  auto c = Client();
  std::vector<uint8_t> out(8);
  auto r = c->Get({"throw", 0, 8, 0}, out);
  EXPECT_EQ(r.status().err(), EIO);
  EXPECT_TRUE(c->Ping().ok());
}

TEST_F(TcpTransportTest, StopClosesIdleConnectionsPromptly) {
  StartServer();
  auto c = Client();
  ASSERT_TRUE(c->Ping().ok());
  const auto t0 = Clock::now();
  server_->Stop();
  EXPECT_LT(Clock::now() - t0, 5s);
  Status st = c->Ping(CallOptions{1s});
  EXPECT_FALSE(st.ok());
}

TEST_F(TcpTransportTest, ClientSurvivesServerRestartOnSamePort) {
  StartServer();
  auto c = Client();
  ASSERT_TRUE(c->Ping().ok());
  const uint16_t port = server_->port();
  server_.reset();  // the node goes away; the client's pooled connection is now dead
  ServerOptions opts;
  opts.host = "127.0.0.1";
  opts.port = port;  // and comes back at the same address
  opts.secret = TestSecret();
  auto s = StartPeerServer(opts, &handler_);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  server_ = std::move(s).value();
  // The dead pooled socket is noticed before use and replaced: the first call succeeds.
  EXPECT_TRUE(c->Ping().ok());
  EXPECT_EQ(static_cast<TcpPeerClient*>(c.get())->open_connections(), 1u);
}

TEST(TcpServerOptions, RefusesToStartWithoutSecret) {
  MemoryHandler handler;
  ServerOptions opts;
  opts.host = "127.0.0.1";
  EXPECT_EQ(StartPeerServer(opts, &handler).status().err(), EINVAL);
}

TEST(TransportFactory, ParsesKinds) {
  EXPECT_EQ(ParseTransportKind("tcp").value(), TransportKind::kTcp);
  EXPECT_EQ(ParseTransportKind("rdma").value(), TransportKind::kRdma);
  EXPECT_EQ(ParseTransportKind("auto").value(), TransportKind::kAuto);
  EXPECT_EQ(ParseTransportKind("udp").status().err(), EINVAL);
}

TEST(TransportFactory, AutoFallsBackToTcpWithoutDevice) {
  if (RdmaDeviceAvailable()) GTEST_SKIP() << "host has an RDMA device";
  MemoryHandler handler;
  ServerOptions sopts;
  sopts.kind = TransportKind::kAuto;
  sopts.host = "127.0.0.1";
  sopts.secret = TestSecret();
  auto server = StartPeerServer(sopts, &handler);
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  ClientOptions copts;
  copts.kind = TransportKind::kAuto;
  copts.secret = TestSecret();
  auto c = MakePeerClient({"127.0.0.1", (*server)->port()}, copts);
  ASSERT_TRUE(c.ok());
  EXPECT_NE(dynamic_cast<TcpPeerClient*>(c->get()), nullptr);
  EXPECT_TRUE((*c)->Ping().ok());
  // Explicit RDMA without a device is a clear error, not a silent fallback.
  copts.kind = TransportKind::kRdma;
  EXPECT_EQ(MakePeerClient({"127.0.0.1", (*server)->port()}, copts).status().err(), ENODEV);
  sopts.kind = TransportKind::kRdma;
  EXPECT_EQ(StartPeerServer(sopts, &handler).status().err(), ENODEV);
}

}  // namespace
}  // namespace kvfs
