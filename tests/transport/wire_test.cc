// Wire protocol: every message round-trips through a whole frame; every class of malformed frame
// is rejected with a Status.
#include "kvfs/wire.h"

#include <gtest/gtest.h>
#include <xxhash.h>

#include <cstring>

namespace kvfs::wire {
namespace {

template <typename T>
T RoundTrip(MsgType type, uint32_t flags, const T& msg, std::span<const uint8_t> data = {}) {
  const std::string frame = EncodeFrame(type, flags, 42, Encode(msg), data);
  FrameView view;
  Status st = DecodeFrame(AsBytes(frame), kDefaultMaxFrame, &view);
  EXPECT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(view.header.type, type);
  EXPECT_EQ(view.header.flags, flags);
  EXPECT_EQ(view.header.request_id, 42u);
  EXPECT_EQ(view.data.size(), data.size());
  if (!data.empty()) {
    EXPECT_EQ(0, std::memcmp(view.data.data(), data.data(), data.size()));
  }
  T out{};
  st = Decode(view.meta, &out);
  EXPECT_TRUE(st.ok()) << st.ToString();
  return out;
}

TEST(WireHeader, RoundTripsEveryField) {
  FrameHeader h;
  h.type = MsgType::kGet;
  h.flags = kFlagResponse | kFlagRdmaData;
  h.request_id = 0x0102030405060708ull;
  h.payload_len = 1234;
  uint8_t buf[kHeaderSize];
  EncodeHeader(h, buf);
  FrameHeader out;
  ASSERT_TRUE(DecodeHeader({buf, sizeof buf}, kDefaultMaxFrame, &out).ok());
  EXPECT_EQ(out.type, h.type);
  EXPECT_EQ(out.flags, h.flags);
  EXPECT_EQ(out.request_id, h.request_id);
  EXPECT_EQ(out.payload_len, h.payload_len);
  // Little-endian magic "KVFW" on the wire.
  EXPECT_EQ(0, std::memcmp(buf, "KVFW", 4));
}

TEST(WireCrc32c, KnownVectorAndHardwareMatchesTable) {
  EXPECT_EQ(Crc32c("123456789", 9), 0xE3069283u);  // the standard CRC-32C check value
  EXPECT_EQ(Crc32cPortable("123456789", 9), 0xE3069283u);
  std::vector<uint8_t> buf(10000);
  for (size_t i = 0; i < buf.size(); ++i) buf[i] = static_cast<uint8_t>(i * 131 + 7);
  // Piece by piece equals all at once, at any split.
  for (size_t split : {0, 1, 8, 333, 9999, 10000}) {
    EXPECT_EQ(Crc32cExtend(Crc32c(buf.data(), split), buf.data() + split, buf.size() - split),
              Crc32c(buf.data(), buf.size()))
        << split;
  }
  EXPECT_EQ(Crc32cExtend(0, buf.data(), 100), Crc32c(buf.data(), 100));
  for (size_t off : {0, 1, 3, 7}) {
    for (size_t len : {0, 1, 7, 8, 9, 63, 64, 4097, 9000}) {
      EXPECT_EQ(Crc32c(buf.data() + off, len), Crc32cPortable(buf.data() + off, len))
          << off << " " << len;
    }
  }
}

TEST(WireMessages, Hello) {
  Hello m{"node-a", {}};
  m.nonce[0] = 1;
  m.nonce[31] = 255;
  Hello out = RoundTrip(MsgType::kHello, 0, m);
  EXPECT_EQ(out.node, "node-a");
  EXPECT_EQ(out.nonce, m.nonce);
}

TEST(WireMessages, ChallengeAuthAuthOk) {
  Challenge c;
  c.nonce.fill(7);
  EXPECT_EQ(RoundTrip(MsgType::kChallenge, kFlagResponse, c).nonce, c.nonce);
  Auth a;
  a.proof.fill(9);
  EXPECT_EQ(RoundTrip(MsgType::kAuth, 0, a).proof, a.proof);
  AuthOk ok;
  ok.proof.fill(3);
  ok.node = "node42";
  AuthOk back = RoundTrip(MsgType::kAuthOk, kFlagResponse, ok);
  EXPECT_EQ(back.proof, ok.proof);
  EXPECT_EQ(back.node, "node42");
}

TEST(WireMessages, PingAndPong) {
  RoundTrip(MsgType::kPing, 0, Ping{});
  RoundTrip(MsgType::kPing, kFlagResponse, Pong{});
}

TEST(WireMessages, GetWithInlineData) {
  GetRequest req{"obj:1234", 4096, 1 << 20, 5};
  GetRequest r = RoundTrip(MsgType::kGet, 0, req);
  EXPECT_EQ(r.key, "obj:1234");
  EXPECT_EQ(r.offset, 4096u);
  EXPECT_EQ(r.length, 1u << 20);
  EXPECT_EQ(r.version, 5u);

  std::vector<uint8_t> data(100000);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<uint8_t>(i * 31);
  GetReply reply{1 << 24, 5, data.size(), 0xdeadbeef, std::nullopt, {}};
  GetReply out = RoundTrip(MsgType::kGet, kFlagResponse, reply, data);
  EXPECT_EQ(out.object_size, 1u << 24);
  EXPECT_EQ(out.length, data.size());
  EXPECT_EQ(out.data_crc, 0xdeadbeefu);
  EXPECT_FALSE(out.remote.has_value());
}

TEST(WireMessages, GetWithRdmaGrant) {
  GetReply reply{1 << 25, 3, 1 << 20, 7, RemoteBuffer{99, 0x7f0000001000ull, 0xabcd, 1 << 20}, {}};
  GetReply out = RoundTrip(MsgType::kGet, kFlagResponse | kFlagRdmaData, reply);
  ASSERT_TRUE(out.remote.has_value());
  EXPECT_EQ(out.remote->token, 99u);
  EXPECT_EQ(out.remote->addr, 0x7f0000001000ull);
  EXPECT_EQ(out.remote->rkey, 0xabcdu);
  EXPECT_EQ(out.remote->length, 1u << 20);
}

TEST(WireMessages, GetWithDigestsAndWithoutThemReadsAsBefore) {
  GetReply reply{3 << 20, 2, (2 << 20) + 7, 0, std::nullopt, {{1 << 20, 11}, {(1 << 20) + 7, 12}}};
  GetReply out = RoundTrip(MsgType::kGet, kFlagResponse | kFlagDataDigests, reply);
  EXPECT_EQ(out.digests, reply.digests);
  EXPECT_EQ(out.length, reply.length);
  // Without digests the encoding is the one an answer had before they existed.
  reply.digests.clear();
  const std::string plain = Encode(reply);
  EXPECT_EQ(plain.size(), 8u * 3 + 4 + 1);
  GetReply back;
  back.digests = {{1, 1}};
  ASSERT_TRUE(Decode(AsBytes(plain), &back).ok());
  EXPECT_TRUE(back.digests.empty());
}

TEST(WireMessages, MalformedDigestsAreRefused) {
  GetReply base{100, 1, 100, 0, std::nullopt, {}};
  const std::string head = Encode(base);
  auto with = [&](uint32_t count, std::vector<std::pair<uint32_t, uint64_t>> spans) {
    std::string m = head;
    auto put = [&](uint64_t v, int n) {
      for (int i = 0; i < n; ++i) m.push_back(static_cast<char>(v >> (8 * i)));
    };
    put(count, 4);
    for (auto [len, h] : spans) {
      put(len, 4);
      put(h, 8);
    }
    GetReply out;
    return Decode(AsBytes(m), &out);
  };
  EXPECT_TRUE(with(2, {{60, 1}, {40, 2}}).ok());
  EXPECT_EQ(with(0, {}).err(), EPROTO);                          // an empty list is left out
  EXPECT_EQ(with(2, {{60, 1}}).err(), EPROTO);                   // fewer than counted
  EXPECT_EQ(with(1, {{60, 1}, {40, 2}}).err(), EPROTO);          // more than counted
  EXPECT_EQ(with(2, {{60, 1}, {41, 2}}).err(), EPROTO);          // do not add up to length
  EXPECT_EQ(with(3, {{60, 1}, {0, 3}, {40, 2}}).err(), EPROTO);  // an empty span
  EXPECT_EQ(with(kMaxDigests + 1, {}).err(), EPROTO);            // over the cap
  // Truncated anywhere in the list.
  const std::string good = [&] {
    GetReply r = base;
    r.digests = {{60, 1}, {40, 2}};
    return Encode(r);
  }();
  for (size_t n = head.size() + 1; n < good.size(); ++n) {
    GetReply out;
    EXPECT_EQ(Decode(AsBytes(std::string_view(good).substr(0, n)), &out).err(), EPROTO) << n;
  }
}

TEST(WireMessages, CheckDigestsFindsAFlippedBitAndSpansThatDoNotCoverTheData) {
  std::vector<uint8_t> data(3000);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<uint8_t>(i * 7);
  const std::vector<DataDigest> d = {{1000, XXH3_64bits(data.data(), 1000)},
                                     {2000, XXH3_64bits(data.data() + 1000, 2000)}};
  EXPECT_TRUE(CheckDigests(d, data).ok());
  EXPECT_TRUE(CheckDigests({}, {}).ok());
  for (size_t at : {0, 999, 1000, 2999}) {
    std::vector<uint8_t> bad = data;
    bad[at] ^= 0x40;
    EXPECT_EQ(CheckDigests(d, bad).err(), EIO) << at;
  }
  EXPECT_EQ(CheckDigests({}, data).err(), EIO);  // bytes no digest covers
  EXPECT_EQ(CheckDigests(d, std::span<const uint8_t>(data).subspan(0, 2999)).err(), EIO);
  EXPECT_EQ(CheckDigests({d[0]}, data).err(), EIO);
  std::vector<uint8_t> longer = data;
  longer.push_back(1);
  EXPECT_EQ(CheckDigests(d, longer).err(), EIO);
}

TEST(WireMessages, PutWithData) {
  std::vector<uint8_t> data(4096, 0x5a);
  PutRequest req;
  req.key = "/a/b";
  req.mode = 0600;
  req.flags = kFlagPinned;
  req.mtime = {5, 6};
  req.prefix_parent = 11;
  req.length = data.size();
  req.data_crc = Crc32c(data.data(), data.size());
  PutRequest out = RoundTrip(MsgType::kPut, kFlagDataCrc, req, data);
  EXPECT_EQ(out.data_crc, req.data_crc);
  EXPECT_EQ(out.key, "/a/b");
  EXPECT_EQ(out.mode, 0600u);
  EXPECT_EQ(out.flags, static_cast<uint32_t>(kFlagPinned));
  EXPECT_EQ(out.mtime.sec, 5);
  EXPECT_EQ(out.prefix_parent, 11u);
  EXPECT_EQ(out.length, 4096u);
  PutReply pr = RoundTrip(MsgType::kPut, kFlagResponse, PutReply{12, 13});
  EXPECT_EQ(pr.id, 12u);
  EXPECT_EQ(pr.version, 13u);
}

TEST(WireMessages, StatsErrorRelease) {
  RoundTrip(MsgType::kStats, 0, StatsRequest{});
  StoreStats st;
  st.capacity_bytes = 1ull << 40;
  st.used_bytes = 5;
  st.evictions = 7;
  st.segment_size = 1 << 20;
  st.devices = {"/dev/a", "/data/device0.kvfs"};
  StoreStats so = RoundTrip(MsgType::kStats, kFlagResponse, st);
  EXPECT_EQ(so.capacity_bytes, 1ull << 40);
  EXPECT_EQ(so.evictions, 7u);
  EXPECT_EQ(so.devices, st.devices);
  ErrorReply e = RoundTrip(MsgType::kError, kFlagResponse, ErrorReply{ENOENT, "no such chunk"});
  EXPECT_EQ(e.err, ENOENT);
  EXPECT_EQ(e.message, "no such chunk");
  EXPECT_EQ(RoundTrip(MsgType::kRdmaRelease, 0, RdmaRelease{1234}).token, 1234u);
}

// ---- malformed frames ----

std::string GoodFrame() {
  return EncodeFrame(MsgType::kGet, 0, 1, Encode(GetRequest{"/p", 0, 1, 0}));
}

Status DecodeBytes(const std::string& bytes, uint32_t cap = kDefaultMaxFrame) {
  FrameView view;
  return DecodeFrame(AsBytes(bytes), cap, &view);
}

// Re-seals the header checksum after a deliberate edit, so only the edited field is wrong.
void Reseal(std::string& frame) {
  const uint32_t crc = Crc32c(frame.data(), 28);
  for (int i = 0; i < 4; ++i) frame[28 + i] = static_cast<char>(crc >> (8 * i));
}

TEST(WireMalformed, GoodFrameDecodes) { EXPECT_TRUE(DecodeBytes(GoodFrame()).ok()); }

TEST(WireMalformed, BadMagic) {
  std::string f = GoodFrame();
  f[0] = 'X';
  Status st = DecodeBytes(f);
  EXPECT_EQ(st.err(), EPROTO);
  EXPECT_NE(st.message().find("magic"), std::string::npos);
}

TEST(WireMalformed, BadChecksum) {
  std::string f = GoodFrame();
  f[17] ^= 0x01;  // request id bit: only the checksum can notice
  Status st = DecodeBytes(f);
  EXPECT_EQ(st.err(), EPROTO);
  EXPECT_NE(st.message().find("checksum"), std::string::npos);
}

TEST(WireMalformed, BadVersionWithValidChecksum) {
  std::string f = GoodFrame();
  f[4] = 2;
  Reseal(f);
  Status st = DecodeBytes(f);
  EXPECT_EQ(st.err(), EPROTO);
  EXPECT_NE(st.message().find("version"), std::string::npos) << st.ToString();
}

TEST(WireMalformed, ReservedBitsWithValidChecksum) {
  std::string f = GoodFrame();
  f[25] = 1;
  Reseal(f);
  EXPECT_EQ(DecodeBytes(f).err(), EPROTO);
}

TEST(WireMalformed, UnknownType) {
  // Past the end, and the retired numbers of the old namespace messages (LOOKUP, LIST, REMOVE,
  // RENAME, NAMESPACE_PUSH/PULL).
  for (uint16_t type : {uint16_t{0}, uint16_t{6}, uint16_t{7}, uint16_t{10}, uint16_t{11},
                        uint16_t{15}, uint16_t{16}, uint16_t{kMaxMsgType + 1}, uint16_t{0xffff}}) {
    std::string f = EncodeFrame(static_cast<MsgType>(type), 0, 1, "");
    Status st = DecodeBytes(f);
    EXPECT_EQ(st.err(), EPROTO) << type;
    EXPECT_NE(st.message().find("unknown message type"), std::string::npos);
  }
}

TEST(WireMalformed, UnknownFlags) {
  std::string f = EncodeFrame(MsgType::kPing, 1u << 7, 1, "");
  EXPECT_EQ(DecodeBytes(f).err(), EPROTO);
}

TEST(WireMalformed, Oversized) {
  std::string meta(2000, 'a');
  std::string f = EncodeFrame(MsgType::kError, kFlagResponse, 1, meta);
  Status st = DecodeBytes(f, /*cap=*/1024);
  EXPECT_EQ(st.err(), EMSGSIZE);
}

TEST(WireMalformed, TruncatedAtEveryLength) {
  const std::string f = GoodFrame();
  for (size_t n = 0; n < f.size(); ++n) {
    Status st = DecodeBytes(f.substr(0, n));
    EXPECT_FALSE(st.ok()) << n;
    EXPECT_EQ(st.err(), EPROTO) << n;
  }
}

TEST(WireMalformed, TrailingBytes) { EXPECT_EQ(DecodeBytes(GoodFrame() + "x").err(), EPROTO); }

TEST(WireMalformed, MetaLengthPastPayload) {
  std::string f = GoodFrame();
  f[kHeaderSize] = static_cast<char>(0xff);  // meta_len low byte
  EXPECT_EQ(DecodeBytes(f).err(), EPROTO);
}

TEST(WireMalformed, DataOnAFrameThatCarriesNone) {
  const uint8_t extra[3] = {1, 2, 3};
  std::string f = EncodeFrame(MsgType::kGet, 0, 1, Encode(GetRequest{"/p", 0, 1, 0}), extra);
  EXPECT_EQ(DecodeBytes(f).err(), EPROTO);
}

TEST(WireMalformed, MetaTruncatedOrPadded) {
  const std::string meta = Encode(GetRequest{"key", 0, 10, 0});
  GetRequest r;
  for (size_t n = 0; n < meta.size(); ++n) {
    EXPECT_EQ(Decode(AsBytes(meta.substr(0, n)), &r).err(), EPROTO) << n;
  }
  EXPECT_EQ(Decode(AsBytes(meta + "z"), &r).err(), EPROTO);
}

TEST(WireMalformed, FieldLimits) {
  GetRequest g;
  EXPECT_EQ(
      Decode(AsBytes(Encode(GetRequest{std::string(kMaxPathLen + 1, 'a'), 0, 1, 0})), &g).err(),
      EPROTO);
  EXPECT_EQ(Decode(AsBytes(Encode(GetRequest{std::string("a\0b", 3), 0, 1, 0})), &g).err(), EPROTO);
  EXPECT_EQ(Decode(AsBytes(Encode(GetRequest{"k", ~0ull, 2, 0})), &g).err(), EPROTO);  // wraps
  ErrorReply e;
  EXPECT_EQ(Decode(AsBytes(Encode(ErrorReply{0, "ok is not an error"})), &e).err(), EPROTO);
}

}  // namespace
}  // namespace kvfs::wire
