// LocalEngine tests of the data path: writing, overwriting and truncating chunks, reading them
// back, space reuse and ENOSPC, concurrency, devices and compression, Apply's input checks and
// stats. Opening and recovery are in local_engine_recovery_test.cc, injected faults and bad
// stored bytes in local_engine_fault_test.cc.
#include "kvfs/local_engine.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <thread>
#include <vector>

#include "local_engine_test_util.h"
#include "temp_dir.h"

namespace kvfs {
namespace {

using testing::TempDir;
using namespace local_engine_test;

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
