// Data checksums on the TCP transport: a PUT's CRC, GETs that carry the serving engine's
// digests and are checked once by the receiver, and what happens when the bytes do not match
// (damaged on the way: read again with the server's check; damaged at rest: EIO).
#include <gtest/gtest.h>
#include <xxhash.h>

#include <vector>

#include "kvfs/transport.h"
#include "memory_handler.h"
#include "tcp_client.h"
#include "tcp_frame_io.h"
#include "tcp_test_fixture.h"

namespace kvfs {
namespace {

using namespace std::chrono_literals;
using tcp_test::RandomBytes;
using tcp_test::TcpTransportTest;

TEST_F(TcpTransportTest, PutWithWrongDataChecksumIsRefused) {
  StartServer();
  Fd fd = RawConnect();
  RawHandshake(fd.get());
  std::vector<uint8_t> data(5000, 0x33);
  wire::PutRequest req{"/crc", 0644, 0, {}, 0, data.size(), 0};
  req.data_crc = wire::Crc32c(data.data(), data.size()) ^ 1;  // one bit off
  ASSERT_TRUE(SendFrame(fd.get(), wire::MsgType::kPut, wire::kFlagDataCrc, 3, wire::Encode(req),
                        data, Clock::now() + 2s)
                  .ok());
  EXPECT_EQ(RecvErrorReply(fd.get()), EIO);
  // Nothing was stored, and the connection still serves (the framing was intact).
  ASSERT_TRUE(SendFrame(fd.get(), wire::MsgType::kGet, 0, 4,
                        wire::Encode(wire::GetRequest{"/crc", 0, 10, 0}), {}, Clock::now() + 2s)
                  .ok());
  EXPECT_EQ(RecvErrorReply(fd.get()), ENOENT);
}

TEST_F(TcpTransportTest, ChecksumsCanBeTurnedOff) {
  StartServer();
  ClientOptions opts;
  opts.data_checksums = false;
  auto c = Client(opts);
  std::vector<uint8_t> data = RandomBytes(3 << 20, 4), out(3 << 20);
  ASSERT_TRUE(c->Put({"/nocrc", 0644, 0, {}, 0, 0}, data).ok());
  ASSERT_TRUE(c->Get({"/nocrc", 0, out.size(), 0}, out).ok());
  EXPECT_TRUE(out == data);
}

TEST_F(TcpTransportTest, GetsCarryTheHandlersDigestsAndAreCheckedOnceByTheReceiver) {
  StartServer();
  auto c = Client();
  const std::vector<uint8_t> data = RandomBytes(5u << 20, 21);
  ASSERT_TRUE(c->Put({"/dg", 0644, 0, {}, 0, 0}, data).ok());
  std::vector<uint8_t> out(data.size());
  auto r = c->Get({"/dg", 0, out.size(), 0}, out);  // three 2 MiB pieces
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(out == data);
  EXPECT_TRUE(r->digests.empty());  // checked: the caller gets bytes, not digests
  EXPECT_EQ(handler_.digest_gets(), 3);
  EXPECT_EQ(handler_.checked_gets(), 0);
}

TEST_F(TcpTransportTest, BytesDamagedOnTheWayAreReadAgainWithTheServersCheck) {
  StartServer();
  auto c = Client();
  const std::vector<uint8_t> data = RandomBytes(5u << 20, 22);
  ASSERT_TRUE(c->Put({"/flip", 0644, 0, {}, 0, 0}, data).ok());
  handler_.DamageInFlight(2);
  std::vector<uint8_t> out(data.size());
  auto r = c->Get({"/flip", 0, out.size(), 0}, out);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(out == data);
  // Two pieces failed their digests and were asked again, checked by the server (CRC).
  EXPECT_EQ(handler_.digest_gets(), 3);
  EXPECT_EQ(handler_.checked_gets(), 2);
  EXPECT_TRUE(c->Ping().ok());  // the connections stay usable
}

TEST_F(TcpTransportTest, ACopyDamagedAtRestIsEioNeverWrongBytes) {
  StartServer();
  auto c = Client();
  const std::vector<uint8_t> data = RandomBytes(3u << 20, 23);
  ASSERT_TRUE(c->Put({"/rot", 0644, 0, {}, 0, 0}, data).ok());
  handler_.DamageCopies(true);
  std::vector<uint8_t> out(data.size());
  auto r = c->Get({"/rot", 0, out.size(), 0}, out);
  EXPECT_EQ(r.status().err(), EIO) << r.status().ToString();
  EXPECT_GE(handler_.checked_gets(), 1);  // the server was made to look at its copy
  handler_.DamageCopies(false);
  r = c->Get({"/rot", 0, out.size(), 0}, out);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(out == data);
}

TEST_F(TcpTransportTest, ServerComputesADigestWhenTheHandlerGivesNone) {
  // A raw GET asking for digests: the in-memory handler gives none, the server computes one.
  StartServer();
  auto c = Client();
  const std::vector<uint8_t> data = RandomBytes(4000, 24);
  ASSERT_TRUE(c->Put({"/raw", 0644, 0, {}, 0, 0}, data).ok());
  Fd fd = RawConnect();
  RawHandshake(fd.get());
  ASSERT_TRUE(SendFrame(fd.get(), wire::MsgType::kGet, wire::kFlagDataDigests, 7,
                        wire::Encode(wire::GetRequest{"/raw", 0, 4000, 0}), {}, Clock::now() + 2s)
                  .ok());
  std::vector<uint8_t> got(4000);
  auto sink = [&](const ReceivedFrame&) -> Result<std::span<uint8_t>> {
    return std::span<uint8_t>(got);
  };
  ReceivedFrame f;
  ASSERT_TRUE(RecvFrame(fd.get(), wire::kDefaultMaxFrame, Clock::now() + 2s, false, sink, &f).ok());
  EXPECT_TRUE(f.header.flags & wire::kFlagDataDigests);
  wire::GetReply reply;
  ASSERT_TRUE(wire::Decode(wire::AsBytes(f.meta), &reply).ok());
  ASSERT_EQ(reply.digests.size(), 1u);
  EXPECT_EQ(reply.digests[0].length, 4000u);
  EXPECT_TRUE(wire::CheckDigests(reply.digests, got).ok());
  EXPECT_TRUE(got == data);
}

TEST(GetDataChecksum, MismatchIsEioMissingIsEproto) {
  std::vector<uint8_t> data(1000, 9);
  wire::GetReply reply{1000, 1, 1000, wire::Crc32c(data.data(), data.size()), std::nullopt, {}};
  const uint32_t asked = wire::kFlagDataCrc;
  const uint32_t answered = wire::kFlagResponse | wire::kFlagDataCrc;
  EXPECT_TRUE(CheckDataCrc(answered, asked, reply, wire::Crc32c(data.data(), 1000)).ok());
  data[500] ^= 0x10;  // a flipped bit in transit
  EXPECT_EQ(CheckDataCrc(answered, asked, reply, wire::Crc32c(data.data(), 1000)).err(), EIO);
  EXPECT_EQ(CheckDataCrc(wire::kFlagResponse, asked, reply, 0).err(), EPROTO);
  EXPECT_TRUE(CheckDataCrc(wire::kFlagResponse, 0, reply, 0).ok());  // not asked
}

TEST(GetDataDigests, MismatchIsTheRetryErrnoMissingIsEproto) {
  std::vector<uint8_t> data(1000, 9);
  wire::GetReply reply{1000, 1, 1000, 0, std::nullopt, {{1000, XXH3_64bits(data.data(), 1000)}}};
  const uint32_t asked = wire::kFlagDataDigests;
  const uint32_t answered = wire::kFlagResponse | wire::kFlagDataDigests;
  EXPECT_TRUE(CheckDataDigests(answered, asked, reply, data).ok());
  data[999] ^= 0x01;
  EXPECT_EQ(CheckDataDigests(answered, asked, reply, data).err(), kDigestMismatch);
  EXPECT_EQ(CheckDataDigests(wire::kFlagResponse, asked, reply, data).err(), EPROTO);
  wire::GetReply bare = reply;
  bare.digests.clear();
  EXPECT_EQ(CheckDataDigests(answered, asked, bare, data).err(), EPROTO);
  EXPECT_TRUE(CheckDataDigests(wire::kFlagResponse, 0, bare, data).ok());  // not asked
}

}  // namespace
}  // namespace kvfs
