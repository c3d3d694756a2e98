// Corruption handling of the local engine: a segment whose checksum fails gives EIO, its record
// is dropped (journaled, so a restart does not bring it back), the listener is told, and every
// other chunk keeps reading. Verify() finds the same corruption without a caller's buffer.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <mutex>
#include <random>
#include <vector>

#include "kvfs/local_engine.h"
#include "temp_dir.h"

namespace kvfs {
namespace {

using testing::TempDir;
constexpr uint64_t kMiB = 1 << 20;

EngineOptions Opts(const std::string& dir) {
  EngineOptions o;
  o.data_dir = dir;
  o.capacity = 64 * kMiB;
  o.queue_depth = 8;
  return o;
}

std::vector<uint8_t> Random(size_t n, uint32_t seed) {
  std::vector<uint8_t> v(n);
  std::mt19937 rng(seed);
  for (auto& b : v) b = static_cast<uint8_t>(rng());
  return v;
}

LayoutRef WriteChunk(ChunkStore& store, const std::vector<uint8_t>& data) {
  auto w = store.NewWriter(nullptr);
  EXPECT_TRUE(w.ok());
  EXPECT_TRUE((*w)->Write(0, data.data(), data.size()).ok());
  auto l = (*w)->Finish();
  EXPECT_TRUE(l.ok()) << l.status().ToString();
  return l.ok() ? *l : nullptr;
}

Status Publish(ChunkStore& store, ObjectId id, const std::string& name, LayoutRef layout) {
  ObjectRecord r;
  r.id = id;
  r.parent = kRootId;
  r.name = name;
  r.type = ObjectType::kFile;
  r.mode = 0644;
  r.layout = std::move(layout);
  MetaBatch b;
  b.puts.push_back(std::move(r));
  return store.Apply(b);
}

void FlipByte(const std::string& device, uint64_t offset) {
  int fd = ::open(device.c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  uint8_t c = 0;
  ASSERT_EQ(::pread(fd, &c, 1, offset), 1);
  c ^= 0x40;
  ASSERT_EQ(::pwrite(fd, &c, 1, offset), 1);
  ::fsync(fd);
  ::close(fd);
}

bool HasRecord(const ChunkStore& store, ObjectId id) {
  for (const auto& r : store.Records()) {
    if (r.id == id) return true;
  }
  return false;
}

class RecordingListener : public StoreListener {
 public:
  void OnDropped(ObjectId id) override {
    std::lock_guard lock(mu);
    dropped.push_back(id);
  }
  std::mutex mu;
  std::vector<ObjectId> dropped;
};

TEST(EngineCorruptionTest, ReadOfCorruptSegmentDropsTheRecordAndTellsTheListener) {
  TempDir dir;
  auto opened = LocalEngine::Open(Opts(dir.path()));
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  auto& e = *opened;
  RecordingListener listener;
  e->SetListener(&listener);
  auto bad = Random(2 * kMiB, 1), good = Random(kMiB + 5, 2);
  LayoutRef lb = WriteChunk(*e, bad), lg = WriteChunk(*e, good);
  ASSERT_TRUE(Publish(*e, 10, "bad", lb).ok());
  ASSERT_TRUE(Publish(*e, 11, "good", lg).ok());
  FlipByte(dir.path() + "/device0.kvfs", lb->segments[1].offset + 4000);

  std::vector<uint8_t> out(bad.size());
  auto n = e->Read(lb, 0, out.data(), out.size());
  ASSERT_FALSE(n.ok());
  EXPECT_EQ(n.status().err(), EIO);
  EXPECT_FALSE(HasRecord(*e, 10));
  EXPECT_TRUE(HasRecord(*e, 11));
  {
    std::lock_guard lock(listener.mu);
    EXPECT_EQ(listener.dropped, std::vector<ObjectId>{10});
  }
  // A second failing read of the same (already dropped) layout drops nothing more.
  EXPECT_FALSE(e->Read(lb, kMiB, out.data(), kMiB).ok());
  StoreStats s = e->Stats();
  EXPECT_EQ(s.corrupt_dropped, 1u);
  EXPECT_EQ(s.checksum_failures, 2u);
  EXPECT_EQ(s.files, 1u);

  std::vector<uint8_t> back(good.size());
  ASSERT_EQ(*e->Read(lg, 0, back.data(), back.size()), good.size());
  EXPECT_EQ(back, good);

  // The removal is journaled: a restart does not bring the corrupt record back.
  e->SetListener(nullptr);
  ASSERT_TRUE(e->Sync().ok());
  lb.reset();
  lg.reset();
  e.reset();
  auto again = LocalEngine::Open(Opts(dir.path()));
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_FALSE(HasRecord(**again, 10));
  EXPECT_TRUE(HasRecord(**again, 11));
}

TEST(EngineCorruptionTest, VerifyFindsCorruptionAndPassesIntactChunks) {
  TempDir dir;
  EngineOptions o = Opts(dir.path());
  o.compression = Compression::kLz4;
  auto opened = LocalEngine::Open(o);
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  auto& e = *opened;
  RecordingListener listener;
  e->SetListener(&listener);
  std::vector<uint8_t> zeros(3 * kMiB, 0);
  auto rnd = Random(3 * kMiB + 100, 3);
  LayoutRef lz = WriteChunk(*e, zeros), lr = WriteChunk(*e, rnd);
  ASSERT_TRUE(Publish(*e, 20, "zeros", lz).ok());
  ASSERT_TRUE(Publish(*e, 21, "random", lr).ok());
  EXPECT_TRUE(e->Verify(lz).ok());
  EXPECT_TRUE(e->Verify(lr).ok());
  EXPECT_TRUE(e->Verify(nullptr).ok());  // an empty file has nothing to check

  // Compressed zeros store far less than they hold.
  StoreStats s = e->Stats();
  EXPECT_LT(s.stored_bytes, s.logical_bytes);
  EXPECT_GT(s.stored_bytes, rnd.size() - 1);

  // Corrupt the last (partial) segment of the compressed file.
  const Segment& last = lz->segments.back();
  EXPECT_EQ(last.codec, Codec::kLz4);
  FlipByte(dir.path() + "/device0.kvfs", last.offset + last.stored_len / 2);
  Status st = e->Verify(lz);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.err(), EIO);
  EXPECT_FALSE(HasRecord(*e, 20));
  EXPECT_TRUE(e->Verify(lr).ok());
  std::lock_guard lock(listener.mu);
  EXPECT_EQ(listener.dropped, std::vector<ObjectId>{20});
  EXPECT_EQ(e->Stats().corrupt_dropped, 1u);
}

}  // namespace
}  // namespace kvfs
