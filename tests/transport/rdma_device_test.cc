// RDMA with a real device: a server with RDMA data and a client that READs chunk bytes. Skipped
// (with "no RDMA device") on hosts without one, such as the CI machine.
#include <gtest/gtest.h>
#include <infiniband/verbs.h>

#include <random>

#include "kvfs/transport.h"
#include "memory_handler.h"
#include "rdma_endpoint.h"

namespace kvfs {
namespace {

bool HaveDevice() {
  int n = 0;
  struct ibv_device** list = ::ibv_get_device_list(&n);
  if (list != nullptr) ::ibv_free_device_list(list);
  return list != nullptr && n > 0;
}

TEST(RdmaDevice, ListenerAllocatesProtectionDomain) {
  if (!HaveDevice()) GTEST_SKIP() << "no RDMA device";
  auto l = RdmaListener::Start("0.0.0.0", 0);
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  EXPECT_NE((*l)->pd(), nullptr);
}

TEST(RdmaDevice, GetMovesChunkByRdmaRead) {
  if (!HaveDevice()) GTEST_SKIP() << "no RDMA device";
  testing::MemoryHandler handler;
  SharedSecret secret = SharedSecret::FromBytes("kvfs-rdma-test-secret-0123").value();
  ServerOptions sopts;
  sopts.kind = TransportKind::kRdma;
  sopts.host = "0.0.0.0";
  sopts.secret = secret;
  auto server = StartPeerServer(sopts, &handler);
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  ClientOptions copts;
  copts.kind = TransportKind::kRdma;
  copts.secret = secret;
  auto client = MakePeerClient({"127.0.0.1", (*server)->port()}, copts);
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  std::vector<uint8_t> data(8 << 20);
  std::mt19937 rng(5);
  for (auto& b : data) b = static_cast<uint8_t>(rng());
  ASSERT_TRUE((*client)->Put({"/r", 0644, 0, {}, 0, 0}, data).ok());
  std::vector<uint8_t> out(data.size());
  auto r = (*client)->Get({"/r", 0, out.size(), 0}, out);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->length, data.size());
  EXPECT_TRUE(out == data);
}

}  // namespace
}  // namespace kvfs
