// What the TCP transport tests share: a secret, reproducible payloads, and a fixture that runs
// a server over an in-memory handler on 127.0.0.1 (ephemeral port) and speaks to it with real
// clients or, for bad protocol, by hand.
#pragma once

#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>

#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "auth.h"
#include "kvfs/transport.h"
#include "memory_handler.h"
#include "tcp_frame_io.h"
#include "tcp_socket.h"

namespace kvfs::tcp_test {

using namespace std::chrono_literals;
using testing::MemoryHandler;

inline SharedSecret TestSecret() {
  return SharedSecret::FromBytes("kvfs-test-secret-0123456789").value();
}

inline std::vector<uint8_t> RandomBytes(size_t n, uint64_t seed) {
  std::vector<uint8_t> v(n);
  std::mt19937_64 rng(seed);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t x = rng();
    std::memcpy(&v[i], &x, 8);
  }
  for (; i < n; ++i) v[i] = static_cast<uint8_t>(rng());
  return v;
}

class TcpTransportTest : public ::testing::Test {
 protected:
  void StartServer(ServerOptions opts = {}) {
    opts.host = "127.0.0.1";
    opts.port = 0;
    if (opts.secret.empty()) opts.secret = TestSecret();
    auto s = StartPeerServer(opts, &handler_);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    server_ = std::move(s).value();
  }
  std::unique_ptr<PeerClient> Client(ClientOptions opts = {}, bool with_secret = true) {
    if (with_secret && opts.secret.empty()) opts.secret = TestSecret();
    auto c = MakePeerClient({"127.0.0.1", server_->port()}, opts);
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    return c.ok() ? std::move(c).value() : nullptr;
  }
  // A raw socket to the server, for speaking (bad) protocol by hand.
  Fd RawConnect() {
    auto fd = TcpConnect("127.0.0.1", server_->port(), 0, Clock::now() + 2s);
    EXPECT_TRUE(fd.ok()) << fd.status().ToString();
    return fd.ok() ? std::move(fd).value() : Fd();
  }
  // Waits for the server to close `fd` (reading and discarding what it sends first).
  bool ClosedByServer(int fd) {
    const Deadline deadline = Clock::now() + 5s;
    char buf[4096];
    while (Clock::now() < deadline) {
      if (!WaitFd(fd, POLLIN, deadline).ok()) return false;
      ssize_t n = ::recv(fd, buf, sizeof buf, 0);
      if (n == 0) return true;
      if (n < 0 && errno != EAGAIN && errno != EINTR) return true;  // reset counts as closed
    }
    return false;
  }
  // The errno of the next frame on `fd`, which must be an error reply; -1 (and a test failure
  // saying why) for anything else.
  int RecvErrorReply(int fd) {
    ReceivedFrame f;
    Status st = RecvFrame(fd, 8192, Clock::now() + 2s, false, nullptr, &f);
    if (!st.ok()) {
      ADD_FAILURE() << "no reply: " << st.ToString();
      return -1;
    }
    if (f.header.type != wire::MsgType::kError) {
      ADD_FAILURE() << "reply type " << static_cast<int>(f.header.type) << ", not an error";
      return -1;
    }
    wire::ErrorReply err;
    if (!wire::Decode(wire::AsBytes(f.meta), &err).ok()) {
      ADD_FAILURE() << "error reply does not decode";
      return -1;
    }
    return err.err;
  }
  void RawHandshake(int fd) {
    ClientHandshake hs(secret_);
    ASSERT_TRUE(
        SendFrame(fd, wire::MsgType::kHello, 0, 1, wire::Encode(hs.Start()), {}, Clock::now() + 2s)
            .ok());
    ReceivedFrame f;
    ASSERT_TRUE(RecvFrame(fd, 8192, Clock::now() + 2s, false, nullptr, &f).ok());
    wire::Challenge ch;
    ASSERT_TRUE(wire::Decode(wire::AsBytes(f.meta), &ch).ok());
    auto auth = hs.OnChallenge(ch);
    ASSERT_TRUE(auth.ok());
    ASSERT_TRUE(
        SendFrame(fd, wire::MsgType::kAuth, 0, 2, wire::Encode(*auth), {}, Clock::now() + 2s).ok());
    ASSERT_TRUE(RecvFrame(fd, 8192, Clock::now() + 2s, false, nullptr, &f).ok());
    ASSERT_EQ(f.header.type, wire::MsgType::kAuthOk);
  }

  SharedSecret secret_ = TestSecret();
  MemoryHandler handler_;
  std::unique_ptr<PeerServer> server_;
};

}  // namespace kvfs::tcp_test
