// The local engine as a bounded cache: watermark eviction in policy order, pins, writers that
// make room on ENOSPC, explicit eviction, and the policy state across a restart.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <mutex>
#include <random>
#include <vector>

#include "kvfs/local_engine.h"
#include "temp_dir.h"

namespace kvfs {
namespace {

using testing::TempDir;
constexpr uint64_t kMiB = 1 << 20;
constexpr size_t kFile = 4 * kMiB;

class Recorder : public StoreListener {
 public:
  void OnEvicted(ObjectId id) override {
    std::lock_guard lock(mu_);
    evicted_.push_back(id);
  }
  std::vector<ObjectId> evicted() {
    std::lock_guard lock(mu_);
    return evicted_;
  }

 private:
  std::mutex mu_;
  std::vector<ObjectId> evicted_;
};

EngineOptions Opts(const std::string& dir, const std::string& policy = "lru") {
  EngineOptions o;
  o.data_dir = dir;
  o.capacity = 40 * kMiB;
  o.queue_depth = 8;
  o.eviction = policy;
  o.high_watermark = 0.9;
  o.low_watermark = 0.6;
  return o;
}

std::unique_ptr<LocalEngine> OpenOk(const EngineOptions& o) {
  auto e = LocalEngine::Open(o);
  EXPECT_TRUE(e.ok()) << e.status().ToString();
  return e.ok() ? std::move(e).value() : nullptr;
}

std::vector<uint8_t> Pattern(size_t n, uint32_t seed) {
  std::vector<uint8_t> v(n);
  std::mt19937 rng(seed);
  for (size_t i = 0; i + 4 <= n; i += 4) {
    const uint32_t x = rng();
    std::memcpy(v.data() + i, &x, 4);
  }
  return v;
}

Result<LayoutRef> Write(ChunkStore& store, uint32_t seed) {
  auto w = store.NewWriter(nullptr);
  if (!w.ok()) return w.status();
  const std::vector<uint8_t> data = Pattern(kFile, seed);
  for (size_t off = 0; off < data.size(); off += kMiB) {
    KVFS_RETURN_IF_ERROR((*w)->Write(off, data.data() + off, kMiB));
  }
  return (*w)->Finish();
}

ObjectRecord Record(ObjectId id, LayoutRef layout, uint32_t flags = 0) {
  ObjectRecord r;
  r.id = id;
  r.parent = kRootId;
  r.name = "f" + std::to_string(id);
  r.type = ObjectType::kFile;
  r.mode = 0644;
  r.mtime = {1700000000, static_cast<int64_t>(id)};
  r.flags = flags;
  r.layout = std::move(layout);
  return r;
}

// Writes and publishes file `id` (4 MiB), keeping no reference to its layout.
Status Publish(ChunkStore& store, ObjectId id, uint32_t flags = 0) {
  KVFS_ASSIGN_OR_RETURN(LayoutRef layout, Write(store, static_cast<uint32_t>(id)));
  MetaBatch b;
  b.puts.push_back(Record(id, std::move(layout), flags));
  return store.Apply(b);
}

std::vector<ObjectId> Ids(ChunkStore& store) {
  std::vector<ObjectId> ids;
  for (const ObjectRecord& r : store.Records()) ids.push_back(r.id);
  std::sort(ids.begin(), ids.end());
  return ids;
}

bool Has(ChunkStore& store, ObjectId id) {
  const auto ids = Ids(store);
  return std::find(ids.begin(), ids.end(), id) != ids.end();
}

TEST(BoundedCache, RejectsBadOptions) {
  TempDir dir;
  EngineOptions o = Opts(dir.path());
  o.eviction = "random";
  EXPECT_EQ(LocalEngine::Open(o).status().err(), EINVAL);
  o = Opts(dir.path());
  o.low_watermark = 0.95;
  EXPECT_EQ(LocalEngine::Open(o).status().err(), EINVAL);
  o = Opts(dir.path());
  o.high_watermark = 1.5;
  EXPECT_EQ(LocalEngine::Open(o).status().err(), EINVAL);
}

TEST(BoundedCache, PassingHighWatermarkEvictsOldestToLowWatermark) {
  TempDir dir;
  auto e = OpenOk(Opts(dir.path()));
  ASSERT_TRUE(e);
  Recorder rec;
  e->SetListener(&rec);
  const uint64_t cap = e->Stats().capacity_bytes;
  ObjectId id = 10;
  while (e->Stats().evictions == 0) {
    ASSERT_TRUE(Publish(*e, id++).ok());
    ASSERT_LT(id, 40u) << "no eviction happened";
  }
  const StoreStats s = e->Stats();
  EXPECT_EQ(s.eviction_policy, "lru");
  EXPECT_LE(s.used_bytes, static_cast<uint64_t>(0.6 * static_cast<double>(cap)));
  EXPECT_GT(s.used_bytes, 0u);
  // Never read: the oldest published go first, and the listener hears exactly those.
  const std::vector<ObjectId> evicted = rec.evicted();
  ASSERT_EQ(evicted.size(), s.evictions);
  for (size_t i = 0; i < evicted.size(); ++i) EXPECT_EQ(evicted[i], 10 + i);
  EXPECT_FALSE(Has(*e, 10));
  EXPECT_TRUE(Has(*e, id - 1));
  e->SetListener(nullptr);
}

// Publishes start, start + 1, ... until the first eviction, touching `touched` after it is
// published.
std::vector<ObjectId> FillAndTouch(LocalEngine& e, ObjectId touched, int touches,
                                   ObjectId start = 10) {
  Recorder rec;
  e.SetListener(&rec);
  for (ObjectId id = start; e.Stats().evictions == 0 && id < start + 30; ++id) {
    EXPECT_TRUE(Publish(e, id).ok());
    if (id >= touched) {
      for (int i = 0; i < touches; ++i) e.Touch(touched, 42);
    }
  }
  e.SetListener(nullptr);
  return rec.evicted();
}

TEST(BoundedCache, LruKeepsTheFileThatWasRead) {
  TempDir dir;
  auto e = OpenOk(Opts(dir.path(), "lru"));
  ASSERT_TRUE(e);
  const auto evicted = FillAndTouch(*e, 10, 1);
  ASSERT_FALSE(evicted.empty());
  EXPECT_EQ(evicted.front(), 11u);
  EXPECT_TRUE(Has(*e, 10));
}

TEST(BoundedCache, FifoEvictsTheOldestEvenWhenRead) {
  TempDir dir;
  auto e = OpenOk(Opts(dir.path(), "fifo"));
  ASSERT_TRUE(e);
  const auto evicted = FillAndTouch(*e, 10, 3);
  ASSERT_FALSE(evicted.empty());
  EXPECT_EQ(evicted.front(), 10u);
}

TEST(BoundedCache, LfuKeepsTheFrequentlyReadFile) {
  TempDir dir;
  auto e = OpenOk(Opts(dir.path(), "lfu"));
  ASSERT_TRUE(e);
  const auto evicted = FillAndTouch(*e, 10, 5);
  ASSERT_FALSE(evicted.empty());
  EXPECT_NE(evicted.front(), 10u);
  EXPECT_TRUE(Has(*e, 10));
}

TEST(BoundedCache, PinnedFilesAreNeverEvicted) {
  TempDir dir;
  auto e = OpenOk(Opts(dir.path()));
  ASSERT_TRUE(e);
  ASSERT_TRUE(Publish(*e, 10, kFlagPinned).ok());
  ASSERT_TRUE(Publish(*e, 11).ok());
  // Pin 11 by a flag update that keeps its layout (what setxattr user.kvfs.pin does).
  {
    ObjectRecord r11;
    for (const ObjectRecord& r : e->Records()) {
      if (r.id == 11) r11 = r;
    }
    r11.flags |= kFlagPinned;
    MetaBatch b;
    b.puts.push_back(r11);
    ASSERT_TRUE(e->Apply(b).ok());
  }
  for (ObjectId id = 12; id < 24; ++id) ASSERT_TRUE(Publish(*e, id).ok());
  EXPECT_GT(e->Stats().evictions, 0u);
  EXPECT_TRUE(Has(*e, 10));
  EXPECT_TRUE(Has(*e, 11));
  EXPECT_EQ(e->Evict(10).err(), EPERM);
}

TEST(BoundedCache, FilesBeingWrittenAreNeverVictimsUntilTheirSessionEnds) {
  TempDir dir;
  auto e = OpenOk(Opts(dir.path(), "fifo"));
  ASSERT_TRUE(e);
  Recorder rec;
  e->SetListener(&rec);
  e->SetWriting(10, true);  // before its first publish: remembered for when it is tracked
  ASSERT_TRUE(Publish(*e, 10).ok());
  ASSERT_TRUE(Publish(*e, 11, kFlagPinned).ok());
  e->SetWriting(11, true);  // pinned and written: unpinning alone must not free it
  {
    ObjectRecord r11;
    for (const ObjectRecord& r : e->Records())
      if (r.id == 11) r11 = r;
    r11.flags &= ~kFlagPinned;
    MetaBatch b;
    b.puts.push_back(r11);
    ASSERT_TRUE(e->Apply(b).ok());
  }
  EXPECT_EQ(e->Evict(10).err(), EBUSY);
  for (ObjectId id = 12; id < 24; ++id) ASSERT_TRUE(Publish(*e, id).ok()) << id;
  EXPECT_GT(e->Stats().evictions, 0u);
  EXPECT_TRUE(Has(*e, 10));  // the oldest, but being written
  EXPECT_TRUE(Has(*e, 11));
  const auto evicted = rec.evicted();
  EXPECT_TRUE(std::find(evicted.begin(), evicted.end(), 10) == evicted.end());
  // The sessions end: both are ordinary files again, the oldest first out.
  e->SetWriting(10, false);
  e->SetWriting(11, false);
  ASSERT_TRUE(e->Evict(11).ok());
  for (ObjectId id = 24; Has(*e, 10) && id < 40; ++id) ASSERT_TRUE(Publish(*e, id).ok()) << id;
  EXPECT_FALSE(Has(*e, 10));
  e->SetListener(nullptr);
}

TEST(BoundedCache, WriterEvictsOnEnospcAndFailsOnlyWhenAllArePinned) {
  TempDir dir;
  EngineOptions o = Opts(dir.path());
  o.high_watermark = 1.0;  // never reached: only a writer's ENOSPC makes room
  o.low_watermark = 0.5;
  auto e = OpenOk(o);
  ASSERT_TRUE(e);
  Recorder rec;
  e->SetListener(&rec);
  // Far more than fits: each writer evicts the oldest unpinned file when the devices are full.
  for (ObjectId id = 10; id < 30; ++id) ASSERT_TRUE(Publish(*e, id).ok()) << id;
  EXPECT_GT(e->Stats().evictions, 0u);
  ASSERT_FALSE(rec.evicted().empty());
  EXPECT_EQ(rec.evicted().front(), 10u);
  EXPECT_TRUE(Has(*e, 29));
  // Pin everything that is left: a new file cannot fit and fails with ENOSPC.
  MetaBatch pins;
  for (ObjectRecord r : e->Records()) {
    r.flags |= kFlagPinned;
    pins.puts.push_back(r);
  }
  ASSERT_TRUE(e->Apply(pins).ok());
  const uint64_t before = e->Stats().evictions;
  auto l = Write(*e, 99);
  ASSERT_FALSE(l.ok());
  EXPECT_EQ(l.status().err(), ENOSPC);
  EXPECT_EQ(e->Stats().evictions, before);
  e->SetListener(nullptr);
}

TEST(BoundedCache, ExplicitEvictIsCountedAndJournaled) {
  TempDir dir;
  {
    auto e = OpenOk(Opts(dir.path()));
    ASSERT_TRUE(e);
    Recorder rec;
    e->SetListener(&rec);
    ASSERT_TRUE(Publish(*e, 10).ok());
    ASSERT_TRUE(Publish(*e, 11).ok());
    ASSERT_TRUE(e->Evict(10).ok());
    EXPECT_EQ(e->Evict(10).err(), EINVAL);  // already gone
    EXPECT_EQ(e->Stats().evictions, 1u);
    EXPECT_EQ(rec.evicted(), std::vector<ObjectId>{10});
    e->SetListener(nullptr);
  }
  auto e = OpenOk(Opts(dir.path()));
  ASSERT_TRUE(e);
  EXPECT_EQ(Ids(*e), std::vector<ObjectId>{11});
}

TEST(BoundedCache, LruOrderSurvivesRestart) {
  TempDir dir;
  {
    auto e = OpenOk(Opts(dir.path()));
    ASSERT_TRUE(e);
    for (ObjectId id = 10; id < 14; ++id) ASSERT_TRUE(Publish(*e, id).ok());
    e->Touch(10, 1);  // 10 is now the most recent; 11 the least
    ASSERT_TRUE(e->Sync().ok());
  }
  ASSERT_TRUE(std::ifstream(dir.path() + "/eviction.state").good());
  auto e = OpenOk(Opts(dir.path()));
  ASSERT_TRUE(e);
  const auto evicted = FillAndTouch(*e, 1000, 0, 100);
  // The recovered order is 11, 12, 13, 10, then the new files.
  ASSERT_GE(evicted.size(), 3u);
  EXPECT_EQ(evicted[0], 11u);
  EXPECT_EQ(evicted[1], 12u);
  EXPECT_EQ(evicted[2], 13u);
  if (evicted.size() > 3) {
    EXPECT_EQ(evicted[3], 10u);
  }
}

TEST(BoundedCache, CorruptPolicyStateRebuildsFromTheIndex) {
  TempDir dir;
  {
    auto e = OpenOk(Opts(dir.path()));
    ASSERT_TRUE(e);
    for (ObjectId id = 10; id < 14; ++id) ASSERT_TRUE(Publish(*e, id).ok());
    ASSERT_TRUE(e->Sync().ok());
  }
  {
    std::fstream f(dir.path() + "/eviction.state", std::ios::in | std::ios::out);
    ASSERT_TRUE(f.good());
    f.seekp(20);
    f.write("garbage", 7);
  }
  auto e = OpenOk(Opts(dir.path()));
  ASSERT_TRUE(e);
  // Rebuilt oldest-mtime first: 10 goes first, and eviction still works.
  const auto evicted = FillAndTouch(*e, 1000, 0, 100);
  ASSERT_FALSE(evicted.empty());
  EXPECT_EQ(evicted.front(), 10u);
}

TEST(BoundedCache, StateOfAnotherPolicyIsIgnored) {
  TempDir dir;
  {
    auto e = OpenOk(Opts(dir.path(), "lfu"));
    ASSERT_TRUE(e);
    for (ObjectId id = 10; id < 12; ++id) ASSERT_TRUE(Publish(*e, id).ok());
    ASSERT_TRUE(e->Sync().ok());
  }
  auto e = OpenOk(Opts(dir.path(), "fifo"));
  ASSERT_TRUE(e);
  EXPECT_EQ(e->Stats().eviction_policy, "fifo");
  const auto evicted = FillAndTouch(*e, 1000, 0, 100);
  ASSERT_FALSE(evicted.empty());
  EXPECT_EQ(evicted.front(), 10u);
}

}  // namespace
}  // namespace kvfs
