#include "kvfs/local_engine.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <random>
#include <thread>
#include <vector>

#include "io_fault_injector.h"
#include "temp_dir.h"

namespace kvfs {
namespace {

using testing::TempDir;
constexpr uint64_t kMiB = 1 << 20;

EngineOptions Opts(const std::string& dir, uint64_t capacity = 96 * kMiB) {
  EngineOptions o;
  o.data_dir = dir;
  o.capacity = capacity;
  o.queue_depth = 8;
  return o;
}

std::vector<uint8_t> Pattern(size_t n, uint32_t seed) {
  std::vector<uint8_t> v(n);
  std::mt19937 rng(seed);
  for (size_t i = 0; i < n; i += 4) {
    uint32_t x = rng();
    std::memcpy(v.data() + i, &x, std::min<size_t>(4, n - i));
  }
  return v;
}

std::unique_ptr<LocalEngine> OpenOk(const EngineOptions& o) {
  auto e = LocalEngine::Open(o);
  EXPECT_TRUE(e.ok()) << e.status().ToString();
  return e.ok() ? std::move(e).value() : nullptr;
}

LayoutRef WriteChunk(ChunkStore& store, const std::vector<uint8_t>& data, size_t piece = kMiB,
                     LayoutRef base = nullptr) {
  auto w = store.NewWriter(base);
  EXPECT_TRUE(w.ok());
  for (size_t off = 0; off < data.size(); off += piece) {
    const size_t n = std::min(piece, data.size() - off);
    Status st = (*w)->Write(off, data.data() + off, n);
    EXPECT_TRUE(st.ok()) << st.ToString();
  }
  auto l = (*w)->Finish();
  EXPECT_TRUE(l.ok()) << l.status().ToString();
  return l.ok() ? *l : nullptr;
}

ObjectRecord FileRecord(ObjectId id, const std::string& name, LayoutRef layout) {
  ObjectRecord r;
  r.id = id;
  r.parent = kRootId;
  r.name = name;
  r.type = ObjectType::kFile;
  r.mode = 0644;
  r.mtime = {1700000000, 5};
  r.layout = std::move(layout);
  return r;
}

Status Publish(ChunkStore& store, ObjectId id, const std::string& name, LayoutRef layout) {
  MetaBatch b;
  b.puts.push_back(FileRecord(id, name, std::move(layout)));
  return store.Apply(b);
}

std::vector<uint8_t> ReadAll(ChunkStore& store, const LayoutRef& layout) {
  std::vector<uint8_t> out(layout ? layout->size : 0);
  auto n = store.Read(layout, 0, out.data(), out.size());
  EXPECT_TRUE(n.ok()) << n.status().ToString();
  if (n.ok()) {
    EXPECT_EQ(*n, out.size());
  }
  return out;
}

LayoutRef FindLayout(const std::vector<ObjectRecord>& recs, ObjectId id) {
  for (const auto& r : recs) {
    if (r.id == id) return r.layout;
  }
  return nullptr;
}

TEST(LocalEngineTest, RoundTripOfEdgeSizes) {
  TempDir dir;
  auto e = OpenOk(Opts(dir.path()));
  ASSERT_TRUE(e);
  const std::vector<size_t> sizes = {
      0, 1, 4095, 4096, kMiB - 1, kMiB, kMiB + 1, 5 * kMiB + kMiB / 2, 33 * kMiB};
  ObjectId id = 100;
  for (size_t size : sizes) {
    SCOPED_TRACE(size);
    auto data = Pattern(size, static_cast<uint32_t>(size));
    LayoutRef l = WriteChunk(*e, data, size > 4 * kMiB ? kMiB : 3000);
    ASSERT_TRUE(l);
    EXPECT_EQ(l->size, size);
    ASSERT_TRUE(Publish(*e, id++, "f" + std::to_string(size), l).ok());
    EXPECT_EQ(ReadAll(*e, l), data);
    if (size > 4096) {  // a read at offset 4096, and the tail
      std::vector<uint8_t> part(std::min<size_t>(size - 4096, 10000));
      ASSERT_EQ(*e->Read(l, 4096, part.data(), part.size()), part.size());
      EXPECT_TRUE(std::equal(part.begin(), part.end(), data.begin() + 4096));
      std::vector<uint8_t> tail(100);
      auto n = e->Read(l, size - 10, tail.data(), tail.size());
      ASSERT_EQ(*n, 10u);
      EXPECT_TRUE(std::equal(tail.begin(), tail.begin() + 10, data.end() - 10));
    }
    std::vector<uint8_t> past(10);
    EXPECT_EQ(*e->Read(l, size, past.data(), past.size()), 0u);
  }
}

TEST(LocalEngineTest, RandomOffsetWritesWithHoles) {
  TempDir dir;
  auto e = OpenOk(Opts(dir.path()));
  auto w = std::move(e->NewWriter(nullptr)).value();
  std::vector<uint8_t> model(7 * kMiB + 123, 0);
  std::mt19937 rng(7);
  for (int i = 0; i < 60; ++i) {
    const size_t off = rng() % (model.size() - 1);
    const size_t len = std::min<size_t>(1 + rng() % 300000, model.size() - off);
    auto data = Pattern(len, i);
    ASSERT_TRUE(w->Write(off, data.data(), len).ok());
    std::memcpy(model.data() + off, data.data(), len);
  }
  // Grow to the model's size (the end may be a hole).
  if (w->size() < model.size()) {
    ASSERT_TRUE(w->Truncate(model.size()).ok());
  }
  std::vector<uint8_t> view(model.size());
  ASSERT_EQ(*w->Read(0, view.data(), view.size()), model.size());
  EXPECT_EQ(view, model);
  auto l = w->Finish();
  ASSERT_TRUE(l.ok());
  EXPECT_EQ(ReadAll(*e, *l), model);
}

TEST(LocalEngineTest, OverwriteFromBaseIsCopyOnWrite) {
  TempDir dir;
  auto e = OpenOk(Opts(dir.path()));
  auto data = Pattern(3 * kMiB, 1);
  LayoutRef a = WriteChunk(*e, data);
  ASSERT_TRUE(Publish(*e, 10, "a", a).ok());
  const uint64_t used_a = e->Stats().used_bytes;

  auto w = std::move(e->NewWriter(a)).value();
  EXPECT_FALSE(w->dirty());
  EXPECT_EQ(w->size(), 3 * kMiB);
  const char patch[] = "patched bytes";
  ASSERT_TRUE(w->Write(kMiB + kMiB / 2, patch, sizeof patch).ok());
  EXPECT_TRUE(w->dirty());
  auto expected = data;
  std::memcpy(expected.data() + kMiB + kMiB / 2, patch, sizeof patch);
  std::vector<uint8_t> view(expected.size());
  ASSERT_EQ(*w->Read(0, view.data(), view.size()), view.size());
  EXPECT_EQ(view, expected);
  LayoutRef b = *w->Finish();
  ASSERT_TRUE(Publish(*e, 10, "a", b).ok());
  EXPECT_EQ(ReadAll(*e, b), expected);
  EXPECT_EQ(ReadAll(*e, a), data);  // the old version, still held here, is unchanged
  // Only the touched segment was rewritten; the others are shared.
  EXPECT_EQ(b->segments[0].offset, a->segments[0].offset);
  EXPECT_EQ(b->segments[2].offset, a->segments[2].offset);
  EXPECT_NE(b->segments[1].offset, a->segments[1].offset);
  EXPECT_EQ(e->Stats().used_bytes, used_a + kMiB);
  a.reset();
  ASSERT_TRUE(e->Sync().ok());  // the replace is durable; the old middle segment is freed
  EXPECT_EQ(e->Stats().used_bytes, used_a);
}

TEST(LocalEngineTest, TruncateDownAndUp) {
  TempDir dir;
  auto e = OpenOk(Opts(dir.path()));
  auto data = Pattern(3 * kMiB + 500, 3);
  LayoutRef a = WriteChunk(*e, data);
  auto w = std::move(e->NewWriter(a)).value();
  ASSERT_TRUE(w->Truncate(kMiB + 10).ok());
  ASSERT_TRUE(w->Truncate(2 * kMiB + 7).ok());  // the re-grown part reads as zeros
  auto l = *w->Finish();
  ASSERT_EQ(l->size, 2 * kMiB + 7);
  auto got = ReadAll(*e, l);
  EXPECT_TRUE(std::equal(got.begin(), got.begin() + kMiB + 10, data.begin()));
  EXPECT_TRUE(std::all_of(got.begin() + kMiB + 10, got.end(), [](uint8_t c) { return c == 0; }));
  // Down to zero and a fresh write.
  ASSERT_TRUE(w->Truncate(0).ok());
  ASSERT_TRUE(w->Write(0, "xyz", 3).ok());
  l = *w->Finish();
  EXPECT_EQ(ReadAll(*e, l), std::vector<uint8_t>({'x', 'y', 'z'}));
}

TEST(LocalEngineTest, WriterStaysUsableAfterFinish) {
  TempDir dir;
  auto e = OpenOk(Opts(dir.path()));
  auto w = std::move(e->NewWriter(nullptr)).value();
  auto d1 = Pattern(kMiB + 10, 1);
  ASSERT_TRUE(w->Write(0, d1.data(), d1.size()).ok());
  LayoutRef v1 = *w->Finish();
  EXPECT_FALSE(w->dirty());
  ASSERT_TRUE(w->Write(d1.size(), "tail", 4).ok());
  LayoutRef v2 = *w->Finish();
  auto expected = d1;
  expected.insert(expected.end(), {'t', 'a', 'i', 'l'});
  EXPECT_EQ(ReadAll(*e, v1), d1);
  EXPECT_EQ(ReadAll(*e, v2), expected);
}

TEST(LocalEngineTest, ReopenKeepsEverything) {
  TempDir dir;
  auto data1 = Pattern(2 * kMiB + 3, 1), data2 = Pattern(4096, 2);
  ObjectId max_id = 0;
  {
    auto e = OpenOk(Opts(dir.path()));
    ObjectId d = e->NewId(), f1 = e->NewId(), f2 = e->NewId();
    max_id = f2;
    MetaBatch b;
    ObjectRecord dr;
    dr.id = d;
    dr.parent = kRootId;
    dr.name = "dir";
    dr.type = ObjectType::kDirectory;
    dr.mode = 0755;
    b.puts.push_back(dr);
    b.puts.push_back(FileRecord(f1, "one", WriteChunk(*e, data1)));
    ObjectRecord r2 = FileRecord(f2, "two", WriteChunk(*e, data2));
    r2.parent = d;
    r2.flags = kFlagPinned;
    r2.prefix_parent = f1;
    b.puts.push_back(r2);
    ASSERT_TRUE(e->Apply(b).ok());
    for (int i = 0; i < 5; ++i) (void)e->NewId();
  }
  auto e = OpenOk(Opts(dir.path()));
  auto recs = e->Records();
  ASSERT_EQ(recs.size(), 3u);
  for (const auto& r : recs) {
    if (r.name == "two") {
      EXPECT_EQ(r.flags, static_cast<uint32_t>(kFlagPinned));
      EXPECT_EQ(r.mtime.sec, 1700000000);
      EXPECT_EQ(ReadAll(*e, r.layout), data2);
    } else if (r.name == "one") {
      EXPECT_EQ(ReadAll(*e, r.layout), data1);
    } else {
      EXPECT_EQ(r.type, ObjectType::kDirectory);
    }
  }
  EXPECT_GT(e->NewId(), max_id + 5);
  StoreStats s = e->Stats();
  EXPECT_EQ(s.files, 2u);
  EXPECT_EQ(s.objects, 3u);
  EXPECT_EQ(s.logical_bytes, data1.size() + data2.size());
  EXPECT_EQ(s.used_bytes, 2 * kMiB + 2 * 4096);  // two full segments, two 4 KiB tails
}

TEST(LocalEngineTest, FlippedByteOnDeviceGivesEio) {
  TempDir dir;
  auto e = OpenOk(Opts(dir.path()));
  auto data = Pattern(2 * kMiB, 9), other = Pattern(kMiB, 10);
  LayoutRef l = WriteChunk(*e, data), ok = WriteChunk(*e, other);
  ASSERT_TRUE(Publish(*e, 10, "bad", l).ok());
  ASSERT_TRUE(Publish(*e, 11, "good", ok).ok());
  {
    const Segment& s = l->segments[1];
    int fd = ::open((dir.path() + "/device0.kvfs").c_str(), O_RDWR);
    ASSERT_GE(fd, 0);
    uint8_t c;
    ASSERT_EQ(::pread(fd, &c, 1, s.offset + 777), 1);
    c ^= 0x01;
    ASSERT_EQ(::pwrite(fd, &c, 1, s.offset + 777), 1);
    ::fsync(fd);
    ::close(fd);
  }
  std::vector<uint8_t> out(data.size());
  auto n = e->Read(l, 0, out.data(), out.size());
  ASSERT_FALSE(n.ok());
  EXPECT_EQ(n.status().err(), EIO);
  EXPECT_NE(n.status().message().find("checksum mismatch"), std::string::npos);
  EXPECT_EQ(e->Stats().checksum_failures, 1u);
  // The intact first segment still reads, and other chunks are unaffected.
  ASSERT_EQ(*e->Read(l, 0, out.data(), kMiB), kMiB);
  EXPECT_TRUE(std::equal(out.begin(), out.begin() + kMiB, data.begin()));
  EXPECT_EQ(ReadAll(*e, ok), other);
}

TEST(LocalEngineTest, RemovedLayoutHeldByReaderStaysReadable) {
  TempDir dir;
  auto e = OpenOk(Opts(dir.path(), 8 * kMiB));
  auto data = Pattern(3 * kMiB, 4);
  LayoutRef held = WriteChunk(*e, data);
  ASSERT_TRUE(Publish(*e, 10, "x", held).ok());
  MetaBatch rm;
  rm.removes.push_back(10);
  ASSERT_TRUE(e->Apply(rm).ok());
  ASSERT_TRUE(e->Sync().ok());
  // Fill the rest of the device: the held extents must not be handed out.
  std::vector<LayoutRef> fill;
  for (int i = 0; i < 5; ++i) {
    auto w = std::move(e->NewWriter(nullptr)).value();
    auto d = Pattern(kMiB, 100 + i);
    ASSERT_TRUE(w->Write(0, d.data(), d.size()).ok());
    auto l = w->Finish();
    if (!l.ok()) {
      EXPECT_EQ(l.status().err(), ENOSPC);
      break;
    }
    fill.push_back(*l);
  }
  EXPECT_EQ(fill.size(), 5u);
  EXPECT_EQ(ReadAll(*e, held), data);
  EXPECT_EQ(e->Stats().used_bytes, 8 * kMiB);
  held.reset();  // the last reader closes: its extents come back
  EXPECT_EQ(e->Stats().used_bytes, 5 * kMiB);
}

TEST(LocalEngineTest, ExtentsAreReusedAfterFree) {
  TempDir dir;
  // Room for two 6 MiB versions (the new one is written before the old one is replaced), not
  // for three: every round after the second reuses freed extents.
  auto e = OpenOk(Opts(dir.path(), 13 * kMiB));
  for (int round = 0; round < 5; ++round) {
    auto data = Pattern(6 * kMiB, round);
    LayoutRef l = WriteChunk(*e, data);
    ASSERT_TRUE(l) << "round " << round;
    ASSERT_TRUE(Publish(*e, 10, "same", l).ok());  // replaces the previous version
    EXPECT_EQ(ReadAll(*e, l), data);
  }
  EXPECT_EQ(e->Stats().used_bytes, 6 * kMiB);
}

TEST(LocalEngineTest, EnospcWhenFullAndEngineStillWorks) {
  TempDir dir;
  auto e = OpenOk(Opts(dir.path(), 4 * kMiB));
  auto w = std::move(e->NewWriter(nullptr)).value();
  auto data = Pattern(6 * kMiB, 1);
  Status st = w->Write(0, data.data(), data.size());
  Result<LayoutRef> l = st.ok() ? w->Finish() : Result<LayoutRef>(st);
  ASSERT_FALSE(l.ok());
  EXPECT_EQ(l.status().err(), ENOSPC);
  w.reset();  // frees what it had sealed
  EXPECT_EQ(e->Stats().used_bytes, 0u);
  auto small = Pattern(100000, 2);
  LayoutRef s = WriteChunk(*e, small);
  ASSERT_TRUE(Publish(*e, 10, "small", s).ok());
  EXPECT_EQ(ReadAll(*e, s), small);
}

TEST(LocalEngineTest, ConcurrentWritersAndReaders) {
  TempDir dir;
  auto e = OpenOk(Opts(dir.path(), 128 * kMiB));
  auto shared = Pattern(3 * kMiB, 77);
  LayoutRef shared_l = WriteChunk(*e, shared);
  ASSERT_TRUE(Publish(*e, e->NewId(), "shared", shared_l).ok());
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 8; ++i) {
        auto data = Pattern(kMiB + kMiB / 2 + t * 1000 + i, t * 100 + i);
        auto w = e->NewWriter(nullptr);
        if (!w.ok() || !(*w)->Write(0, data.data(), data.size()).ok()) {
          ++failures;
          continue;
        }
        auto l = (*w)->Finish();
        if (!l.ok() || !Publish(*e, e->NewId(), "t" + std::to_string(t), *l).ok()) {
          ++failures;
          continue;
        }
        std::vector<uint8_t> out(data.size()), out2(shared.size());
        if (!e->Read(*l, 0, out.data(), out.size()).ok() || out != data) ++failures;
        if (!e->Read(shared_l, 0, out2.data(), out2.size()).ok() || out2 != shared) ++failures;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(e->Stats().files, 33u);
}

TEST(LocalEngineTest, AsyncDurabilityLosesNothingOnCleanClose) {
  TempDir dir;
  EngineOptions o = Opts(dir.path());
  o.durability = Durability::kAsync;
  o.async_commit_ms = 60000;  // nothing is committed before close
  {
    auto e = OpenOk(o);
    for (int i = 0; i < 20; ++i) {
      ASSERT_TRUE(
          Publish(*e, 10 + i, "f" + std::to_string(i), WriteChunk(*e, Pattern(5000, i))).ok());
    }
  }
  auto e = OpenOk(o);
  auto recs = e->Records();
  ASSERT_EQ(recs.size(), 20u);
  for (int i = 0; i < 20; ++i) EXPECT_EQ(ReadAll(*e, FindLayout(recs, 10 + i)), Pattern(5000, i));
}

TEST(LocalEngineTest, SmallCheckpointThresholdRotatesJournal) {
  TempDir dir;
  EngineOptions o = Opts(dir.path());
  o.journal_checkpoint_bytes = 4096;
  {
    auto e = OpenOk(o);
    for (int i = 0; i < 60; ++i) {
      ASSERT_TRUE(Publish(*e, 10 + i, std::string(100, 'n') + std::to_string(i),
                          WriteChunk(*e, Pattern(100, i)))
                      .ok());
    }
    EXPECT_LT(e->Stats().journal_bytes, 8192u);
    MetaBatch rm;
    rm.removes.push_back(10);
    ASSERT_TRUE(e->Apply(rm).ok());
  }
  auto e = OpenOk(o);
  auto recs = e->Records();
  EXPECT_EQ(recs.size(), 59u);
  EXPECT_EQ(ReadAll(*e, FindLayout(recs, 69)), Pattern(100, 59));
}

TEST(LocalEngineTest, TwoDevicesStripe) {
  TempDir dir;
  EngineOptions o = Opts(dir.path(), 0);
  o.devices = {{dir.path() + "/a.dev", 20 * kMiB}, {dir.path() + "/b.dev", 20 * kMiB}};
  auto data = Pattern(6 * kMiB + 5, 3);
  {
    auto e = OpenOk(o);
    LayoutRef l = WriteChunk(*e, data);
    for (size_t k = 1; k < l->segments.size(); ++k) {
      EXPECT_NE(l->segments[k].device, l->segments[k - 1].device);
    }
    ASSERT_TRUE(Publish(*e, 10, "striped", l).ok());
    EXPECT_EQ(e->Stats().devices.size(), 2u);
  }
  auto e = OpenOk(o);
  EXPECT_EQ(ReadAll(*e, FindLayout(e->Records(), 10)), data);
  // The devices cannot be swapped.
  e.reset();
  std::swap(o.devices[0], o.devices[1]);
  auto bad = LocalEngine::Open(o);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().err(), EINVAL);
}

TEST(LocalEngineTest, Lz4RoundTrip) {
  TempDir dir;
  EngineOptions o = Opts(dir.path());
  o.compression = Compression::kLz4;
  std::vector<uint8_t> data(3 * kMiB + 700);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<uint8_t>((i / 100) % 13);
  {
    auto e = OpenOk(o);
    LayoutRef l = WriteChunk(*e, data, 70000);
    for (const auto& s : l->segments) EXPECT_EQ(s.codec, Codec::kLz4);
    ASSERT_TRUE(Publish(*e, 10, "z", l).ok());
    EXPECT_LT(e->Stats().used_bytes, data.size() / 4);
    std::vector<uint8_t> part(5000);
    ASSERT_EQ(*e->Read(l, kMiB - 100, part.data(), part.size()), part.size());
    EXPECT_TRUE(std::equal(part.begin(), part.end(), data.begin() + kMiB - 100));
  }
  auto e = OpenOk(o);
  EXPECT_EQ(ReadAll(*e, FindLayout(e->Records(), 10)), data);
}

TEST(LocalEngineTest, SecondOpenIsBusy) {
  TempDir dir;
  auto e = OpenOk(Opts(dir.path()));
  auto second = LocalEngine::Open(Opts(dir.path()));
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().err(), EBUSY);
  EXPECT_NE(second.status().message().find("in use"), std::string::npos);
}

TEST(LocalEngineTest, ApplyRejectsForeignLayoutsAndBadInput) {
  TempDir dir, dir2;
  auto e = OpenOk(Opts(dir.path()));
  auto other = OpenOk(Opts(dir2.path()));
  auto plain = std::make_shared<Layout>();
  plain->size = 10;
  plain->segments.resize(1);
  EXPECT_EQ(Publish(*e, 10, "plain", plain).err(), EINVAL);
  EXPECT_EQ(Publish(*e, 11, "foreign", WriteChunk(*other, Pattern(10, 1))).err(), EINVAL);
  EXPECT_EQ(Publish(*e, kRootId, "root", nullptr).err(), EINVAL);
  EXPECT_EQ(e->NewWriter(plain).status().err(), EINVAL);
  std::vector<uint8_t> out(10);
  EXPECT_EQ(e->Read(plain, 0, out.data(), out.size()).status().err(), EINVAL);
  EXPECT_EQ(e->Stats().objects, 0u);
}

TEST(LocalEngineTest, BadOptionsAreEinval) {
  TempDir dir;
  EngineOptions o = Opts(dir.path());
  o.segment_size = 1000;
  EXPECT_EQ(LocalEngine::Open(o).status().err(), EINVAL);
  o = Opts(dir.path(), 0);
  EXPECT_EQ(LocalEngine::Open(o).status().err(), EINVAL);
  o = Opts("");
  EXPECT_EQ(LocalEngine::Open(o).status().err(), EINVAL);
}

class FailWrites : public IoFaultInjector {
 public:
  std::atomic<bool> fail{false};
  std::atomic<int> seen{0};
  Status BeforeIo(IoRequest& r) override {
    ++seen;
    if (r.write && fail) return Status::IoError("injected write error");
    return Status::Ok();
  }
};

TEST(LocalEngineTest, InjectedDeviceWriteErrorIsEioAndNothingLeaks) {
  TempDir dir;
  EngineOptions o = Opts(dir.path());
  auto faults = std::make_shared<FailWrites>();
  o.fault_injector = faults;
  auto e = OpenOk(o);
  faults->fail = true;
  auto w = std::move(e->NewWriter(nullptr)).value();
  auto data = Pattern(2 * kMiB, 5);
  Status st = w->Write(0, data.data(), data.size());
  EXPECT_EQ(st.err(), EIO);
  w.reset();
  EXPECT_EQ(e->Stats().used_bytes, 0u);
  faults->fail = false;
  LayoutRef l = WriteChunk(*e, data);
  ASSERT_TRUE(Publish(*e, 10, "ok", l).ok());
  EXPECT_EQ(ReadAll(*e, l), data);
  EXPECT_GT(faults->seen.load(), 0);
}

class CorruptWrites : public IoFaultInjector {
 public:
  Status BeforeIo(IoRequest& r) override {
    if (r.write) r.data[0] ^= 0xff;  // silent corruption on the way to the disk
    return Status::Ok();
  }
};

TEST(LocalEngineTest, SilentWriteCorruptionIsCaughtOnRead) {
  TempDir dir;
  EngineOptions o = Opts(dir.path());
  o.fault_injector = std::make_shared<CorruptWrites>();
  auto e = OpenOk(o);
  LayoutRef l = WriteChunk(*e, Pattern(kMiB, 1));
  std::vector<uint8_t> out(kMiB);
  EXPECT_EQ(e->Read(l, 0, out.data(), out.size()).status().err(), EIO);
}

TEST(LocalEngineTest, StatsAreFilled) {
  TempDir dir;
  auto e = OpenOk(Opts(dir.path(), 16 * kMiB));
  LayoutRef l = WriteChunk(*e, Pattern(kMiB + 1, 1));
  ASSERT_TRUE(Publish(*e, 10, "f", l).ok());
  (void)ReadAll(*e, l);
  StoreStats s = e->Stats();
  EXPECT_EQ(s.capacity_bytes, 16 * kMiB);
  EXPECT_EQ(s.used_bytes, kMiB + 4096);
  EXPECT_EQ(s.logical_bytes, kMiB + 1);
  EXPECT_EQ(s.objects, 1u);
  EXPECT_EQ(s.files, 1u);
  EXPECT_EQ(s.reads, 1u);
  EXPECT_EQ(s.writes, 1u);
  EXPECT_EQ(s.bytes_read, kMiB + 1);
  EXPECT_EQ(s.bytes_written, kMiB + 4096);
  EXPECT_GT(s.journal_bytes, 0u);
  EXPECT_EQ(s.segment_size, kMiB);
  ASSERT_EQ(s.devices.size(), 1u);
  EXPECT_EQ(s.devices[0], dir.path() + "/device0.kvfs");
}

TEST(LocalEngineTest, LayoutOutlivingEngineIsSafe) {
  TempDir dir;
  LayoutRef l;
  std::unique_ptr<ChunkWriter> w;
  {
    auto e = OpenOk(Opts(dir.path()));
    l = WriteChunk(*e, Pattern(10, 1));
    ASSERT_TRUE(Publish(*e, 10, "f", l).ok());
    w = std::move(e->NewWriter(l)).value();
  }
  EXPECT_EQ(w->Write(0, "x", 1).err(), ESHUTDOWN);  // the base cannot be read any more
  w.reset();
  l.reset();  // a late deleter: must not touch the closed engine
  auto e = OpenOk(Opts(dir.path()));
  EXPECT_EQ(e->Records().size(), 1u);
}

}  // namespace
}  // namespace kvfs

namespace kvfs {
namespace {

TEST(LocalEngineTest, RewriteOfAStreamedSegmentReadsItBackAndFreesItsExtent) {
  TempDir dir;
  auto e = OpenOk(Opts(dir.path()));
  auto w = std::move(e->NewWriter(nullptr)).value();
  auto data = Pattern(5 * kMiB, 8);
  ASSERT_TRUE(w->Write(0, data.data(), data.size()).ok());  // five segments sealed, in flight
  EXPECT_GE(e->Stats().used_bytes, 5 * kMiB);
  const char patch[] = "rewritten";
  ASSERT_TRUE(w->Write(kMiB + 10, patch, sizeof patch).ok());
  std::memcpy(data.data() + kMiB + 10, patch, sizeof patch);
  EXPECT_EQ(e->Stats().used_bytes, 4 * kMiB);  // segment 1's unpublished extent was freed
  LayoutRef l = *w->Finish();
  EXPECT_EQ(e->Stats().used_bytes, 5 * kMiB);
  EXPECT_EQ(ReadAll(*e, l), data);
}

}  // namespace
}  // namespace kvfs

namespace kvfs {
namespace {

TEST(LocalEngineTest, NewDataDirRefusesADeviceOfAnotherEngine) {
  TempDir dir, dir2;
  EngineOptions o = Opts(dir.path(), 0);
  o.devices = {{dir.path() + "/a.dev", 8 * kMiB}};
  { ASSERT_TRUE(OpenOk(o)); }
  o.data_dir = dir2.path();  // same device, a data directory without its journal
  auto r = LocalEngine::Open(o);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().err(), EEXIST);
}

}  // namespace
}  // namespace kvfs

#include <sys/wait.h>

namespace kvfs {
namespace {

// A child process publishes with durability=close and dies without closing the engine (no
// checkpoint, no clean shutdown): every Apply that returned must survive, readable.
TEST(LocalEngineTest, CrashAfterDurableApplyKeepsIt) {
  TempDir dir;
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    auto e = LocalEngine::Open(Opts(dir.path()));
    if (!e.ok()) ::_exit(2);
    for (int i = 0; i < 5; ++i) {
      auto w = std::move((*e)->NewWriter(nullptr)).value();
      auto d = Pattern(kMiB + 1000 * i, i);
      if (!w->Write(0, d.data(), d.size()).ok()) ::_exit(3);
      auto l = w->Finish();
      if (!l.ok() || !Publish(**e, 10 + i, "c", *l).ok()) ::_exit(4);
    }
    ::_exit(0);  // a crash: destructors, checkpoint and flock release never run normally
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  ASSERT_EQ(WEXITSTATUS(status), 0);
  auto e = OpenOk(Opts(dir.path()));
  ASSERT_TRUE(e);
  auto recs = e->Records();
  ASSERT_EQ(recs.size(), 5u);
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(ReadAll(*e, FindLayout(recs, 10 + i)), Pattern(kMiB + 1000 * i, i));
  }
  EXPECT_EQ(e->Stats().used_bytes, 5 * kMiB + 4 * 4096);  // chunk 0 has no tail segment
}

// A crash in the middle of a journal append leaves a torn record at the end of the journal:
// reopening cuts it off and keeps every record before it.
TEST(LocalEngineTest, TornJournalTailAfterCrashIsCutAtOpen) {
  TempDir dir;
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    auto e = LocalEngine::Open(Opts(dir.path()));
    if (!e.ok()) ::_exit(2);
    for (int i = 0; i < 3; ++i) {
      auto w = std::move((*e)->NewWriter(nullptr)).value();
      if (!w->Write(0, "abc", 3).ok()) ::_exit(3);
      auto l = w->Finish();
      if (!l.ok() || !Publish(**e, 10 + i, "x", *l).ok()) ::_exit(4);
    }
    ::_exit(0);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  std::string journal;
  for (const auto& ent : std::filesystem::directory_iterator(dir.path())) {
    if (ent.path().filename().string().rfind("journal-", 0) == 0) journal = ent.path();
  }
  ASSERT_FALSE(journal.empty());
  const auto valid = std::filesystem::file_size(journal);
  {
    int fd = ::open(journal.c_str(), O_WRONLY | O_APPEND);
    ASSERT_GE(fd, 0);
    // A record header promising 32 bytes, followed by fewer: a torn append.
    ASSERT_EQ(::write(fd, "\x20\x00\x00\x00\x01\x00\x00\x00torn", 12), 12);
    ::close(fd);
  }
  auto e = OpenOk(Opts(dir.path()));
  ASSERT_TRUE(e);
  EXPECT_EQ(e->Records().size(), 3u);
  EXPECT_EQ(std::filesystem::file_size(journal), valid);
  ASSERT_TRUE(Publish(*e, 20, "after", WriteChunk(*e, Pattern(10, 1))).ok());
  e.reset();
  e = OpenOk(Opts(dir.path()));
  EXPECT_EQ(e->Records().size(), 4u);
}

class TearWrites : public IoFaultInjector {
 public:
  Status BeforeIo(IoRequest& r) override {
    if (r.write && r.len > 4096) r.len = 4096;  // only the first 4 KiB reach the disk
    return Status::Ok();
  }
};

TEST(LocalEngineTest, TornSegmentWriteIsCaughtOnRead) {
  TempDir dir;
  EngineOptions o = Opts(dir.path());
  o.fault_injector = std::make_shared<TearWrites>();
  auto e = OpenOk(o);
  LayoutRef l = WriteChunk(*e, Pattern(2 * kMiB, 1));
  std::vector<uint8_t> out(kMiB);
  EXPECT_EQ(e->Read(l, kMiB, out.data(), out.size()).status().err(), EIO);
  EXPECT_EQ(e->Read(l, 0, out.data(), 100).status().err(), EIO);
}

}  // namespace
}  // namespace kvfs
