#include "membership.h"

#include <gtest/gtest.h>

#include "cluster_test_util.h"

namespace kvfs::cluster {
namespace {

using testing::NullHandler;
using testing::TestSecret;
using testing::WaitFor;

std::unique_ptr<PeerServer> Serve(RequestHandler* h, uint16_t port = 0) {
  ServerOptions so;
  so.host = "127.0.0.1";
  so.port = port;
  so.secret = TestSecret();
  so.threads = 2;
  auto s = StartPeerServer(so, h);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return s.ok() ? std::move(*s) : nullptr;
}

MembershipOptions FastOptions() {
  MembershipOptions o;
  o.ping_interval = std::chrono::milliseconds(50);
  o.ping_timeout = std::chrono::milliseconds(500);
  o.misses_to_down = 3;
  o.client.secret = TestSecret();
  o.client.connect_timeout = std::chrono::milliseconds(500);
  o.client.request_timeout = std::chrono::milliseconds(500);
  return o;
}

TEST(Membership, RejectsBadNodeLists) {
  EXPECT_EQ(Membership::Create(0, {}, FastOptions()).status().err(), EINVAL);
  std::vector<NodeInfo> dup{{2, {"127.0.0.1", 1}}, {2, {"127.0.0.1", 2}}};
  EXPECT_EQ(Membership::Create(1, dup, FastOptions()).status().err(), EINVAL);
  std::vector<NodeInfo> zero{{0, {"127.0.0.1", 1}}};
  EXPECT_EQ(Membership::Create(1, zero, FastOptions()).status().err(), EINVAL);
}

TEST(Membership, SelfIsAlwaysLiveAndHasNoClient) {
  auto m = Membership::Create(1, {{1, {"127.0.0.1", 1}}}, FastOptions());
  ASSERT_TRUE(m.ok());
  EXPECT_EQ((*m)->AllNodes(), std::vector<NodeId>{1});
  EXPECT_EQ((*m)->LiveNodes(), std::vector<NodeId>{1});
  EXPECT_TRUE((*m)->IsUp(1));
  EXPECT_EQ((*m)->Client(1), nullptr);
}

TEST(Membership, StoppedPeerGoesDownAndComesBackUp) {
  NullHandler h2, h3;
  auto s2 = Serve(&h2);
  auto s3 = Serve(&h3);
  ASSERT_TRUE(s2 && s3);
  const uint16_t port3 = s3->port();
  std::vector<NodeInfo> nodes{
      {1, {"127.0.0.1", 1}}, {2, {"127.0.0.1", s2->port()}}, {3, {"127.0.0.1", port3}}};
  auto m = Membership::Create(1, nodes, FastOptions());
  ASSERT_TRUE(m.ok());
  std::atomic<int> ups{0};
  (*m)->SetOnUp([&](NodeId id) {
    if (id == 3) ++ups;
  });
  (*m)->Start();
  EXPECT_EQ((*m)->LiveNodes(), (std::vector<NodeId>{1, 2, 3}));

  s3->Stop();
  s3.reset();
  ASSERT_TRUE(WaitFor([&] { return !(*m)->IsUp(3); }));
  EXPECT_TRUE((*m)->IsUp(2));
  EXPECT_EQ((*m)->LiveNodes(), (std::vector<NodeId>{1, 2}));

  s3 = Serve(&h3, port3);
  ASSERT_TRUE(s3);
  ASSERT_TRUE(WaitFor([&] { return (*m)->IsUp(3); }));
  // The callback runs just after the state flips, on the pinger thread.
  EXPECT_TRUE(WaitFor([&] { return ups.load() == 1; }));
  (*m)->Stop();
}

TEST(Membership, WrongSecretCountsAsDown) {
  NullHandler h;
  auto s = Serve(&h);
  ASSERT_TRUE(s);
  MembershipOptions o = FastOptions();
  o.client.secret = TestSecret("a-different-secret-0123456789");
  auto m = Membership::Create(1, {{2, {"127.0.0.1", s->port()}}}, o);
  ASSERT_TRUE(m.ok());
  for (int i = 0; i < 3; ++i) (*m)->PingOnce();
  EXPECT_FALSE((*m)->IsUp(2));
}

TEST(Membership, MissesBelowTheThresholdKeepAPeerUp) {
  // Nothing listens on this port (bound and closed by a server we stop at once).
  NullHandler h;
  auto s = Serve(&h);
  ASSERT_TRUE(s);
  const uint16_t port = s->port();
  s->Stop();
  auto m = Membership::Create(1, {{2, {"127.0.0.1", port}}}, FastOptions());
  ASSERT_TRUE(m.ok());
  (*m)->PingOnce();
  (*m)->PingOnce();
  EXPECT_TRUE((*m)->IsUp(2));
  (*m)->PingOnce();
  EXPECT_FALSE((*m)->IsUp(2));
}

}  // namespace
}  // namespace kvfs::cluster
