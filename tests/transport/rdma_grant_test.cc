// The server's RDMA control flow without a device: a TCP peer server with an export pool over a
// fake registrar answers GET|RDMA_DATA with a grant; the "READ" is a memcpy from the granted
// address (same process), then RDMA_RELEASE returns the buffer to the pool.
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "memory_handler.h"
#include "rdma_buffer_exporter.h"
#include "tcp_client.h"
#include "tcp_server.h"

namespace kvfs {
namespace {

using namespace std::chrono_literals;

class FakeRegistrar : public MemoryRegistrar {
 public:
  Result<MemoryRegion> Register(void* addr, size_t length) override {
    MemoryRegion r;
    r.addr = reinterpret_cast<uint64_t>(addr);
    r.length = length;
    r.lkey = ++keys;
    r.rkey = 0x1000 + keys;
    return r;
  }
  void Deregister(const MemoryRegion&) override {}
  uint32_t keys = 0;
};

class RdmaGrantTest : public ::testing::Test {
 protected:
  void SetUp() override {
    secret_ = SharedSecret::FromBytes("kvfs-grant-test-secret-012").value();
    ServerOptions so;
    so.host = "127.0.0.1";
    so.secret = secret_;
    auto s = TcpPeerServer::Start(so, &handler_);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    server_ = std::move(s).value();
    ClientOptions co;
    co.secret = secret_;
    client_ = std::make_unique<TcpPeerClient>(PeerAddress{"127.0.0.1", server_->port()}, co);
    data_.resize(3 << 20);
    std::mt19937 rng(9);
    for (auto& b : data_) b = static_cast<uint8_t>(rng());
    ASSERT_TRUE(client_->Put({"/g", 0644, 0, {}, 0, 0}, data_, CallOptions{}).ok());
  }
  void TearDown() override {
    server_.reset();  // before the exporter it points to
  }
  Result<ReceivedFrame> GrantGet(uint64_t offset, uint64_t length) {
    return client_->Call(wire::MsgType::kGet, wire::kFlagRdmaData,
                         wire::Encode(wire::GetRequest{"/g", offset, length, 0}), {}, nullptr,
                         Clock::now() + 5s);
  }

  SharedSecret secret_;
  testing::MemoryHandler handler_;
  FakeRegistrar registrar_;
  RdmaBufferExporter exporter_{&registrar_, 16 << 20};
  std::unique_ptr<TcpPeerServer> server_;
  std::unique_ptr<TcpPeerClient> client_;
  std::vector<uint8_t> data_;
};

TEST_F(RdmaGrantTest, WithoutExporterTheServerSaysNotSupported) {
  EXPECT_EQ(GrantGet(0, 100).status().err(), EOPNOTSUPP);
}

TEST_F(RdmaGrantTest, GrantPointsAtTheBytesAndReleaseReturnsTheBuffer) {
  server_->SetExporter(&exporter_);
  auto frame = GrantGet(4096, 1 << 20);
  ASSERT_TRUE(frame.ok()) << frame.status().ToString();
  EXPECT_TRUE(frame->header.flags & wire::kFlagRdmaData);
  EXPECT_EQ(frame->data_len, 0u);  // no inline bytes
  wire::GetReply reply;
  ASSERT_TRUE(wire::Decode(wire::AsBytes(frame->meta), &reply).ok());
  ASSERT_TRUE(reply.remote.has_value());
  EXPECT_EQ(reply.length, 1u << 20);
  EXPECT_EQ(reply.remote->length, 1u << 20);
  EXPECT_GT(reply.remote->rkey, 0x1000u);
  EXPECT_EQ(exporter_.outstanding(), 1u);
  // What a one-sided READ of the grant would fetch.
  EXPECT_EQ(0, std::memcmp(reinterpret_cast<const void*>(reply.remote->addr), data_.data() + 4096,
                           reply.length));
  auto rel = client_->Call(wire::MsgType::kRdmaRelease, 0,
                           wire::Encode(wire::RdmaRelease{reply.remote->token}), {}, nullptr,
                           Clock::now() + 5s);
  ASSERT_TRUE(rel.ok()) << rel.status().ToString();
  EXPECT_EQ(exporter_.outstanding(), 0u);
  EXPECT_EQ(exporter_.pooled(), 1u);
}

TEST_F(RdmaGrantTest, HandlerErrorReleasesTheGrant) {
  server_->SetExporter(&exporter_);
  auto frame = client_->Call(wire::MsgType::kGet, wire::kFlagRdmaData,
                             wire::Encode(wire::GetRequest{"/missing", 0, 100, 0}), {}, nullptr,
                             Clock::now() + 5s);
  EXPECT_EQ(frame.status().err(), ENOENT);
  EXPECT_EQ(exporter_.outstanding(), 0u);
}

TEST_F(RdmaGrantTest, ExhaustedBudgetSaysNoMemorySoClientsFallBack) {
  RdmaBufferExporter tiny(&registrar_, 1 << 20);
  server_->SetExporter(&tiny);
  EXPECT_EQ(GrantGet(0, 2 << 20).status().err(), ENOMEM);
  server_->SetExporter(nullptr);
}

}  // namespace
}  // namespace kvfs
