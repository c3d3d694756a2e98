// Peer addresses: what --listen and --advertise accept, and what a node accepts from another
// node's registration in etcd (where garbage once crashed the reader: std::stoul threw).
#include <gtest/gtest.h>

#include "kvfs/transport.h"

namespace kvfs {
namespace {

TEST(PeerAddress, Parses) {
  auto a = ParsePeerAddress("127.0.0.2:7400");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->host, "127.0.0.2");
  EXPECT_EQ(a->port, 7400);
  auto b = ParsePeerAddress("[::1]:80");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->host, "::1");
  auto c = ParsePeerAddress("node-a.example:7400");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->host, "node-a.example");
  EXPECT_EQ(ParsePeerAddress("h:65535")->port, 65535);
}

TEST(PeerAddress, RefusesGarbageWithoutThrowing) {
  for (const char* bad : {"",
                          ":7400",
                          "127.0.0.2:",
                          "127.0.0.2:x",
                          "127.0.0.2:0",
                          "127.0.0.2:65536",
                          "127.0.0.1:notaport",
                          "127.0.0.1:99999999999999999999",
                          "127.0.0.1:-1",
                          "127.0.0.1:+80",
                          "127.0.0.1: 80",
                          "::1:80",
                          "[::1]80",
                          "[::1]:",
                          "[zz]:80",
                          "[",
                          "]:1",
                          "a b:1",
                          "1.2.3:4",
                          "-host:1",
                          ".host:1",
                          "host\n:1",
                          "nocolon"}) {
    auto p = ParsePeerAddress(bad);
    EXPECT_FALSE(p.ok()) << bad;
    EXPECT_EQ(p.status().err(), EINVAL) << bad;
  }
  EXPECT_FALSE(ParsePeerAddress(std::string(300, 'a') + ":1").ok());
  EXPECT_FALSE(ParsePeerAddress(std::string("a\0b:1", 5)).ok());
}

TEST(PeerAddress, KnowsAWildcardInAnySpelling) {
  for (const char* w : {"0.0.0.0", "::", "0::0", "0:0:0:0:0:0:0:0"})
    EXPECT_TRUE(IsWildcardHost(w)) << w;
  for (const char* h : {"127.0.0.1", "::1", "10.0.0.1", "node-a", "0.0.0.1", ""})
    EXPECT_FALSE(IsWildcardHost(h)) << h;
}

}  // namespace
}  // namespace kvfs
