// LocalEngine::ReadForPeer, the read behind a cluster GET with digests: the bytes of Read, with
// digests that cover them; a whole raw segment goes out with its stored checksum and unchecked
// (so damage at rest reaches the receiver's check, never a silent pass), every other piece
// (partial, hole, lz4) is checked here and digested after. Whole raw segments land straight in a
// 4 KiB-aligned caller buffer (O_DIRECT, no copy) and a checked read there still checks them.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>
#include <xxhash.h>

#include <cstdlib>
#include <cstring>
#include <mutex>

#include "io_fault_injector.h"
#include "local_engine_test_util.h"
#include "memory_store.h"
#include "temp_dir.h"

namespace kvfs {
namespace {

using local_engine_test::FlipDeviceByte;
using local_engine_test::kMiB;
using local_engine_test::OpenOk;
using local_engine_test::OpenWithFaults;
using local_engine_test::Opts;
using local_engine_test::Pattern;
using local_engine_test::Publish;
using local_engine_test::WriteChunk;
using testing::TempDir;

struct PeerRead {
  std::vector<uint8_t> bytes;
  std::vector<DataDigest> digests;
};

PeerRead ReadOk(ChunkStore& store, const LayoutRef& l, uint64_t off, size_t len) {
  PeerRead r;
  r.bytes.resize(len);
  auto n = store.ReadForPeer(l, off, r.bytes.data(), len, &r.digests);
  EXPECT_TRUE(n.ok()) << n.status().ToString();
  r.bytes.resize(n.ok() ? *n : 0);
  return r;
}

// True when the digests cover `bytes` exactly and each matches its span.
bool DigestsMatch(const PeerRead& r) {
  size_t pos = 0;
  for (const DataDigest& d : r.digests) {
    if (d.length == 0 || d.length > r.bytes.size() - pos) return false;
    if (XXH3_64bits(r.bytes.data() + pos, d.length) != d.xxh3) return false;
    pos += d.length;
  }
  return pos == r.bytes.size();
}

std::vector<uint32_t> Lengths(const PeerRead& r) {
  std::vector<uint32_t> v;
  for (const DataDigest& d : r.digests) v.push_back(d.length);
  return v;
}

TEST(PeerReadTest, WholeRawSegmentsCarryTheirStoredChecksumOthersAreDigestedAfterTheCheck) {
  TempDir dir;
  auto e = OpenOk(Opts(dir.path()));
  ASSERT_NE(e, nullptr);
  const auto data = Pattern(4 * kMiB + 5, 7);
  LayoutRef l = WriteChunk(*e, data);
  ASSERT_EQ(l->segments.size(), 5u);

  PeerRead whole = ReadOk(*e, l, 0, data.size() + 100);  // asks past the end: 4 MiB + 5
  EXPECT_TRUE(whole.bytes == data);
  ASSERT_EQ(whole.digests.size(), 5u);
  for (size_t i = 0; i < 5; ++i) EXPECT_EQ(whole.digests[i].xxh3, l->segments[i].checksum) << i;
  EXPECT_EQ(whole.digests[4].length, 5u);
  EXPECT_TRUE(DigestsMatch(whole));

  // Unaligned: a partial head, two whole segments, a partial tail.
  PeerRead mid = ReadOk(*e, l, 100, 3 * kMiB);
  EXPECT_TRUE(mid.bytes == std::vector<uint8_t>(data.begin() + 100, data.begin() + 100 + 3 * kMiB));
  EXPECT_EQ(Lengths(mid), (std::vector<uint32_t>{kMiB - 100, kMiB, kMiB, 100}));
  EXPECT_EQ(mid.digests[1].xxh3, l->segments[1].checksum);
  EXPECT_TRUE(DigestsMatch(mid));

  // Past the end: nothing, and no digests.
  PeerRead none = ReadOk(*e, l, data.size(), kMiB);
  EXPECT_TRUE(none.bytes.empty());
  EXPECT_TRUE(none.digests.empty());
}

TEST(PeerReadTest, HolesAndLz4SegmentsAreDigestedFromTheirCheckedBytes) {
  TempDir dir;
  EngineOptions o = Opts(dir.path());
  o.compression = Compression::kLz4;
  auto e = OpenOk(o);
  ASSERT_NE(e, nullptr);
  // [0, 2 MiB) a hole; [2 MiB, 3 MiB) compressible; [3 MiB, 4 MiB) random (stored raw).
  std::vector<uint8_t> data(4 * kMiB, 0);
  for (size_t i = 2 * kMiB; i < 3 * kMiB; ++i) data[i] = static_cast<uint8_t>(i / 4096);
  const auto noise = Pattern(kMiB, 3);
  std::copy(noise.begin(), noise.end(), data.begin() + 3 * kMiB);
  auto w = e->NewWriter(nullptr);
  ASSERT_TRUE(w.ok());
  ASSERT_TRUE((*w)->Write(2 * kMiB, data.data() + 2 * kMiB, 2 * kMiB).ok());
  auto l = (*w)->Finish();
  ASSERT_TRUE(l.ok());
  ASSERT_EQ((*l)->segments.size(), 2u);
  ASSERT_EQ((*l)->segments[0].codec, Codec::kLz4);
  ASSERT_EQ((*l)->segments[1].codec, Codec::kNone);

  PeerRead r = ReadOk(*e, *l, 0, data.size());
  EXPECT_TRUE(r.bytes == data);
  EXPECT_EQ(Lengths(r), (std::vector<uint32_t>{kMiB, kMiB, kMiB, kMiB}));
  EXPECT_TRUE(DigestsMatch(r));
  EXPECT_NE(r.digests[2].xxh3, (*l)->segments[0].checksum);  // of the raw bytes, not the stored
  EXPECT_EQ(r.digests[3].xxh3, (*l)->segments[1].checksum);
}

TEST(PeerReadTest, DamageAtRestGoesOutUncheckedUnderTheGoodDigestAndReadThenDropsIt) {
  TempDir dir;
  auto e = OpenOk(Opts(dir.path()));
  ASSERT_NE(e, nullptr);
  const auto data = Pattern(3 * kMiB, 9);
  LayoutRef l = WriteChunk(*e, data);
  ASSERT_TRUE(Publish(*e, e->NewId(), "bad", l).ok());
  ASSERT_NO_FATAL_FAILURE(FlipDeviceByte(dir.path(), l->segments[1].offset + 4242, 0x08));
  // The whole raw segment is not checked here: the receiver's check is what finds it.
  PeerRead r = ReadOk(*e, l, 0, data.size());
  ASSERT_EQ(r.bytes.size(), data.size());
  EXPECT_FALSE(r.bytes == data);
  EXPECT_FALSE(DigestsMatch(r));
  EXPECT_EQ(r.digests[1].xxh3, l->segments[1].checksum);
  EXPECT_EQ(e->Stats().files, 1u);
  // Part of the damaged segment is checked here: refused as corruption, and the record goes.
  std::vector<uint8_t> part(1000);
  std::vector<DataDigest> digests{{7, 7}};
  auto partial = e->ReadForPeer(l, kMiB + 4000, part.data(), part.size(), &digests);
  ASSERT_FALSE(partial.ok());
  EXPECT_TRUE(partial.status().IsCorruption()) << partial.status().ToString();
  EXPECT_EQ(digests, (std::vector<DataDigest>{{7, 7}}));  // what it had, untouched
  EXPECT_EQ(e->Stats().corrupt_dropped, 1u);
  EXPECT_EQ(e->Stats().files, 0u);
  // What the receiver falls back to: a checked Read, which refuses it too.
  std::vector<uint8_t> again(data.size());
  EXPECT_FALSE(e->Read(l, 0, again.data(), again.size()).ok());
}

// Records the buffers device reads go to.
class ReadTargets : public IoFaultInjector {
 public:
  Status BeforeIo(IoRequest& r) override {
    if (!r.write && !r.journal) {
      std::lock_guard lock(mu_);
      targets_.push_back(r.data);
    }
    return Status::Ok();
  }
  size_t CountIn(const uint8_t* begin, size_t len) {
    std::lock_guard lock(mu_);
    size_t n = 0;
    for (const uint8_t* t : targets_) n += t >= begin && t < begin + len;
    return n;
  }

 private:
  std::mutex mu_;
  std::vector<const uint8_t*> targets_;
};

TEST(PeerReadTest, WholeRawSegmentsAreReadStraightIntoAnAlignedBufferAndStillChecked) {
  TempDir dir;
  auto targets = std::make_shared<ReadTargets>();
  auto e = OpenWithFaults(dir.path(), targets);
  ASSERT_NE(e, nullptr);
  const auto data = Pattern(4 * kMiB + 5, 11);
  LayoutRef l = WriteChunk(*e, data);
  ASSERT_TRUE(Publish(*e, e->NewId(), "direct", l).ok());
  const size_t cap = 5 * kMiB;
  std::unique_ptr<uint8_t, decltype(&std::free)> buf(
      static_cast<uint8_t*>(std::aligned_alloc(4096, cap)), &std::free);
  ASSERT_NE(buf, nullptr);

  // Checked read: segments 0-3 go straight into the buffer, the 5-byte tail through the ring.
  auto n = e->Read(l, 0, buf.get(), cap);
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  ASSERT_EQ(*n, data.size());
  EXPECT_EQ(0, std::memcmp(buf.get(), data.data(), data.size()));
  EXPECT_EQ(targets->CountIn(buf.get(), cap), 4u);
  // For a peer, the same, with the stored checksums.
  std::memset(buf.get(), 0, cap);
  std::vector<DataDigest> digests;
  n = e->ReadForPeer(l, 0, buf.get(), cap, &digests);
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(0, std::memcmp(buf.get(), data.data(), data.size()));
  EXPECT_EQ(targets->CountIn(buf.get(), cap), 8u);
  ASSERT_EQ(digests.size(), 5u);
  for (size_t i = 0; i < 5; ++i) EXPECT_EQ(digests[i].xxh3, l->segments[i].checksum);
  // Not at a segment boundary: nothing lands in place, bytes still exact.
  n = e->Read(l, 100, buf.get(), 2 * kMiB);
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(0, std::memcmp(buf.get(), data.data() + 100, 2 * kMiB));
  EXPECT_EQ(targets->CountIn(buf.get(), cap), 8u);

  // Damage segment 1 on the device: the checked in-place read still finds it.
  ASSERT_NO_FATAL_FAILURE(FlipDeviceByte(dir.path(), l->segments[1].offset + 5, 0x01));
  n = e->Read(l, 0, buf.get(), cap);
  ASSERT_FALSE(n.ok());
  EXPECT_TRUE(n.status().IsCorruption()) << n.status().ToString();
  EXPECT_EQ(e->Stats().corrupt_dropped, 1u);
}

TEST(PeerReadTest, StoresWithoutThePathSayEopnotsupp) {
  MemoryStore m;
  auto w = m.NewWriter(nullptr);
  ASSERT_TRUE(w.ok());
  ASSERT_TRUE((*w)->Write(0, "abc", 3).ok());
  auto l = (*w)->Finish();
  ASSERT_TRUE(l.ok());
  std::vector<uint8_t> out(3);
  std::vector<DataDigest> digests;
  EXPECT_EQ(m.ReadForPeer(*l, 0, out.data(), 3, &digests).status().err(), EOPNOTSUPP);
  EXPECT_TRUE(digests.empty());
}

}  // namespace
}  // namespace kvfs
