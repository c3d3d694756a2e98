// A bounded randomized fuzz loop over the frame and message decoders: mutated valid frames and
// random bytes must either decode into views inside the input or fail with a Status; never crash
// or read out of bounds (run under ASan/UBSan to make the latter loud).
#include <gtest/gtest.h>

#include <random>

#include "kvfs/wire.h"

namespace kvfs::wire {
namespace {

std::vector<std::string> Seeds() {
  std::vector<std::string> seeds;
  const uint8_t data[64] = {1, 2, 3};
  Hello hello{"node", {}};
  seeds.push_back(EncodeFrame(MsgType::kHello, 0, 1, Encode(hello)));
  seeds.push_back(EncodeFrame(MsgType::kPing, 0, 2, Encode(Ping{})));
  seeds.push_back(EncodeFrame(MsgType::kGet, 0, 4, Encode(GetRequest{"k", 0, 64, 0})));
  seeds.push_back(
      EncodeFrame(MsgType::kGet, kFlagResponse, 4, Encode(GetReply{64, 1, 64, 0, {}, {}}), data));
  seeds.push_back(
      EncodeFrame(MsgType::kPut, 0, 5, Encode(PutRequest{"k", 0644, 0, {}, 0, 64, 0}), data));
  seeds.push_back(EncodeFrame(MsgType::kError, kFlagResponse, 6, Encode(ErrorReply{EIO, "x"})));
  StoreStats st;
  st.devices = {"d0"};
  seeds.push_back(EncodeFrame(MsgType::kStats, kFlagResponse, 7, Encode(st)));
  return seeds;
}

// Decodes the meta as the message its header names, the way a peer would.
void DecodeAsPeer(const FrameView& v) {
  const bool resp = v.header.flags & kFlagResponse;
  switch (v.header.type) {
    case MsgType::kHello: {
      Hello m;
      (void)Decode(v.meta, &m);
      break;
    }
    case MsgType::kChallenge: {
      Challenge m;
      (void)Decode(v.meta, &m);
      break;
    }
    case MsgType::kAuth: {
      Auth m;
      (void)Decode(v.meta, &m);
      break;
    }
    case MsgType::kAuthOk: {
      AuthOk m;
      (void)Decode(v.meta, &m);
      break;
    }
    case MsgType::kPing: {
      Ping m;
      (void)Decode(v.meta, &m);
      break;
    }
    case MsgType::kGet: {
      if (resp) {
        GetReply m;
        (void)Decode(v.meta, &m);
      } else {
        GetRequest m;
        (void)Decode(v.meta, &m);
      }
      break;
    }
    case MsgType::kPut: {
      if (resp) {
        PutReply m;
        (void)Decode(v.meta, &m);
      } else {
        PutRequest m;
        (void)Decode(v.meta, &m);
      }
      break;
    }
    case MsgType::kStats: {
      if (resp) {
        StoreStats m;
        (void)Decode(v.meta, &m);
      } else {
        StatsRequest m;
        (void)Decode(v.meta, &m);
      }
      break;
    }
    case MsgType::kError: {
      ErrorReply m;
      (void)Decode(v.meta, &m);
      break;
    }
    case MsgType::kRdmaRelease: {
      RdmaRelease m;
      (void)Decode(v.meta, &m);
      break;
    }
  }
}

void CheckOne(const std::string& bytes, size_t* accepted) {
  FrameView v;
  Status st = DecodeFrame(AsBytes(bytes), 1 << 20, &v);
  if (!st.ok()) {
    EXPECT_TRUE(st.err() == EPROTO || st.err() == EMSGSIZE) << st.ToString();
    return;
  }
  ++*accepted;
  const auto* begin = reinterpret_cast<const uint8_t*>(bytes.data());
  const auto* end = begin + bytes.size();
  EXPECT_GE(v.meta.data(), begin);
  EXPECT_LE(v.meta.data() + v.meta.size(), end);
  EXPECT_LE(v.data.data() + v.data.size(), end);
  EXPECT_EQ(kHeaderSize + kMetaLenSize + v.meta.size() + v.data.size(), bytes.size());
  DecodeAsPeer(v);
}

TEST(WireFuzz, MutatedFramesNeverCrash) {
  std::mt19937_64 rng(12345);  // fixed seed: reproducible
  const auto seeds = Seeds();
  size_t accepted = 0;
  for (int iter = 0; iter < 20000; ++iter) {
    std::string f = seeds[rng() % seeds.size()];
    const int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits && !f.empty(); ++e) {
      switch (rng() % 5) {
        case 0:
          f[rng() % f.size()] ^= static_cast<char>(1u << (rng() % 8));
          break;
        case 1:
          f.resize(rng() % f.size());
          break;
        case 2:
          f.push_back(static_cast<char>(rng()));
          break;
        case 3:
          f[rng() % f.size()] = static_cast<char>(rng());
          break;
        case 4:
          // Edit beyond the header only, so the checksum still holds and the payload decoders
          // (not just the header check) see the damage.
          if (f.size() > kHeaderSize)
            f[kHeaderSize + rng() % (f.size() - kHeaderSize)] = static_cast<char>(rng());
          break;
      }
    }
    CheckOne(f, &accepted);
  }
  // Payload-only edits keep many frames decodable: the loop did reach the meta decoders.
  EXPECT_GT(accepted, 100u);
}

TEST(WireFuzz, RandomBytesNeverCrash) {
  std::mt19937_64 rng(777);
  size_t accepted = 0;
  for (int iter = 0; iter < 20000; ++iter) {
    std::string f(rng() % 128, '\0');
    for (char& c : f) c = static_cast<char>(rng());
    CheckOne(f, &accepted);
    // And every message decoder straight on random bytes.
    FrameView v;
    v.header.type = static_cast<MsgType>(1 + rng() % kMaxMsgType);
    v.header.flags = rng() % 2 ? static_cast<uint32_t>(kFlagResponse) : 0u;
    v.meta = AsBytes(f);
    DecodeAsPeer(v);
  }
  EXPECT_EQ(accepted, 0u);  // random bytes never pass the magic + checksum
}

}  // namespace
}  // namespace kvfs::wire
