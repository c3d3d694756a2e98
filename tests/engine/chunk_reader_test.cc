// ChunkReader of every local store, the one way the fs reads published data: byte-exact views
// at any offset, views that stay valid after their reader is gone, its pooled buffers are reused
// by later readers and the engine is closed; concurrent reads of one reader; corruption met
// mid-read drops the record once and never hands out a wrong byte; layouts of another store
// are refused.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <thread>

#include "local_engine_test_util.h"
#include "memory_store.h"
#include "temp_dir.h"

namespace kvfs {
namespace {

using local_engine_test::FlipDeviceByte;
using local_engine_test::kMiB;
using local_engine_test::OpenOk;
using local_engine_test::Opts;
using local_engine_test::Pattern;
using local_engine_test::Publish;
using local_engine_test::WriteChunk;
using testing::TempDir;

std::vector<uint8_t> Join(const ReadView& view) {
  std::vector<uint8_t> out;
  for (const iovec& span : view.spans) {
    const auto* p = static_cast<const uint8_t*>(span.iov_base);
    out.insert(out.end(), p, p + span.iov_len);
  }
  EXPECT_EQ(out.size(), view.size);
  return out;
}

std::vector<uint8_t> Slice(const std::vector<uint8_t>& v, uint64_t off, uint64_t len) {
  if (off >= v.size()) return {};
  return {v.begin() + off, v.begin() + std::min<uint64_t>(v.size(), off + len)};
}

// Reads [off, off + len) through `reader` and compares with `want`.
void ExpectRange(ChunkReader& reader, const std::vector<uint8_t>& want, uint64_t off,
                 uint64_t len) {
  auto view = reader.Read(off, len);
  ASSERT_TRUE(view.ok()) << view.status().ToString();
  EXPECT_TRUE(Join(*view) == Slice(want, off, len)) << "at " << off << " len " << len;
}

TEST(ChunkReaderTest, EngineViewsOutliveTheirReaderLaterReadersAndTheEngine) {
  TempDir dir;
  auto e = OpenOk(Opts(dir.path()));
  ASSERT_NE(e, nullptr);
  const auto a = Pattern(3 * kMiB + 123, 1), b = Pattern(5 * kMiB, 2);
  LayoutRef la = WriteChunk(*e, a), lb = WriteChunk(*e, b);
  ASSERT_TRUE(Publish(*e, e->NewId(), "a", la).ok());
  ASSERT_TRUE(Publish(*e, e->NewId(), "b", lb).ok());

  ReadView kept;
  {
    auto r = e->NewReader(la);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    auto view = (*r)->Read(0, a.size() + 4096);  // clipped at the end
    ASSERT_TRUE(view.ok()) << view.status().ToString();
    kept = std::move(*view);
  }
  // Later readers take the buffers earlier readers gave back; the kept view's stay its own.
  for (int round = 0; round < 4; ++round) {
    auto r = e->NewReader(lb);
    ASSERT_TRUE(r.ok());
    for (uint64_t off = 0; off < b.size(); off += kMiB) ExpectRange(**r, b, off, kMiB);
    ExpectRange(**r, b, 100, 3 * kMiB);  // a jump back, across segments
  }
  EXPECT_TRUE(Join(kept) == a);
  la.reset();
  lb.reset();
  e.reset();  // the engine closes; the view's buffers are freed with the view
  EXPECT_TRUE(Join(kept) == a);
}

TEST(ChunkReaderTest, EngineReaderIsByteExactAtEdgesAndUnderConcurrentReads) {
  TempDir dir;
  auto e = OpenOk(Opts(dir.path()));
  ASSERT_NE(e, nullptr);
  const auto data = Pattern(12 * kMiB + 4097, 3);
  LayoutRef l = WriteChunk(*e, data);
  ASSERT_TRUE(Publish(*e, e->NewId(), "f", l).ok());
  auto r = e->NewReader(l);
  ASSERT_TRUE(r.ok());
  ChunkReader& reader = **r;
  ExpectRange(reader, data, 0, 1);
  ExpectRange(reader, data, kMiB - 1, 2);  // straddles a segment boundary
  ExpectRange(reader, data, data.size() - 10, 4096);
  auto past = reader.Read(data.size(), 4096);
  ASSERT_TRUE(past.ok());
  EXPECT_EQ(past->size, 0u);
  ExpectRange(reader, data, 0, data.size());  // one READ larger than the read-ahead window

  // FUSE serves several READs of one handle at once: each thread reads its own stripes.
  std::vector<std::thread> threads;
  std::atomic<int> wrong{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < 3; ++round) {
        for (uint64_t off = t * 128 * 1024; off < data.size(); off += 4 * 128 * 1024) {
          auto view = reader.Read(off, 128 * 1024);
          if (!view.ok() || Join(*view) != Slice(data, off, 128 * 1024)) ++wrong;
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(wrong.load(), 0);
}

// The kernel's readahead sends a window of READs at once (1008 KiB each) and FUSE threads take
// them in any order. The window must survive that: a READ served after a later one still finds
// its segment read ahead, nothing read ahead is dropped unused, and the device is asked for each
// segment once. (Before: a later READ reused an earlier one's ready slots as "behind the
// reader" and moved the sequential mark back: 20 misses, 11 segments wasted, 51 MiB read.)
TEST(ChunkReaderTest, ReadsTakenOutOfOrderKeepTheReadAheadWindow) {
  TempDir dir;
  auto e = OpenOk(Opts(dir.path()));
  ASSERT_NE(e, nullptr);
  const auto data = Pattern(32 * kMiB, 7);
  LayoutRef l = WriteChunk(*e, data);
  ASSERT_TRUE(Publish(*e, e->NewId(), "f", l).ok());
  auto r = e->NewReader(l);
  ASSERT_TRUE(r.ok());
  const StoreStats before = e->Stats();
  constexpr uint64_t kRead = 1008 * 1024;
  const int order[8] = {5, 0, 7, 2, 1, 6, 3, 4};
  for (uint64_t window = 0; window * 8 * kRead < data.size(); ++window) {
    for (int k : order) {
      const uint64_t off = (window * 8 + static_cast<uint64_t>(k)) * kRead;
      if (off < data.size()) ExpectRange(**r, data, off, kRead);
    }
  }
  const StoreStats after = e->Stats();
  // Only the first window's first READ (segments 4 and 5) and the READ at offset 0 after it
  // find nothing read ahead; every later segment was in flight or ready when asked for.
  EXPECT_LE(after.readahead_misses - before.readahead_misses, 3u);
  EXPECT_EQ(after.readahead_wasted - before.readahead_wasted, 0u);
  EXPECT_LE(after.bytes_read - before.bytes_read, data.size());  // no segment read twice
}

// The fs asks a reader to prefetch at open: the first READ then finds its segments in flight
// or read (a hit), where without the hint it is a miss that waits on a fresh device read. A
// prefetch nobody reads is counted as wasted; one past the end or of nothing reads nothing.
TEST(ChunkReaderTest, PrefetchStartsTheFirstSegmentsBeforeTheFirstRead) {
  TempDir dir;
  auto e = OpenOk(Opts(dir.path()));
  ASSERT_NE(e, nullptr);
  const auto data = Pattern(12 * kMiB + 5, 9);
  LayoutRef l = WriteChunk(*e, data);
  ASSERT_TRUE(Publish(*e, e->NewId(), "f", l).ok());
  {
    auto r = e->NewReader(l);
    ASSERT_TRUE(r.ok());
    const StoreStats before = e->Stats();
    (*r)->Prefetch(0, 2 * kMiB);
    ExpectRange(**r, data, 0, 1008 * 1024);
    ExpectRange(**r, data, 1008 * 1024, 1008 * 1024);
    const StoreStats after = e->Stats();
    EXPECT_EQ(after.readahead_misses - before.readahead_misses, 0u);
    EXPECT_GE(after.readahead_hits - before.readahead_hits, 3u);
    ExpectRange(**r, data, 0, data.size());
  }
  {
    auto r = e->NewReader(l);  // no hint: the first READ waits for its segment
    ASSERT_TRUE(r.ok());
    const StoreStats before = e->Stats();
    ExpectRange(**r, data, 0, 1008 * 1024);
    EXPECT_EQ(e->Stats().readahead_misses - before.readahead_misses, 1u);
  }
  {
    const StoreStats before = e->Stats();
    {
      auto r = e->NewReader(l);
      ASSERT_TRUE(r.ok());
      (*r)->Prefetch(data.size(), kMiB);
      (*r)->Prefetch(kMiB, 0);
      (*r)->Prefetch(3 * kMiB, 64 * kMiB);  // at most the read-ahead depth (8) of segments
    }
    const StoreStats after = e->Stats();
    EXPECT_EQ(after.readahead_wasted - before.readahead_wasted, 8u);  // segments 3..10
    EXPECT_EQ(after.readahead_misses - before.readahead_misses, 0u);
  }
}

TEST(ChunkReaderTest, CorruptionMidReadFailsThatSegmentOnlyAndDropsTheRecordOnce) {
  TempDir dir;
  auto e = OpenOk(Opts(dir.path()));
  ASSERT_NE(e, nullptr);
  const auto data = Pattern(4 * kMiB, 4);
  LayoutRef l = WriteChunk(*e, data);
  ASSERT_TRUE(Publish(*e, e->NewId(), "bad", l).ok());
  ASSERT_NO_FATAL_FAILURE(FlipDeviceByte(dir.path(), l->segments[2].offset + 777, 0x20));
  auto r = e->NewReader(l);
  ASSERT_TRUE(r.ok());
  // Sequential 1 MiB reads: the intact segments before the bad one are served byte-exact
  // (the bad one was read ahead meanwhile), the bad one fails as corruption.
  ExpectRange(**r, data, 0, kMiB);
  ExpectRange(**r, data, kMiB, kMiB);
  auto bad = (*r)->Read(2 * kMiB, kMiB);
  ASSERT_FALSE(bad.ok());
  EXPECT_TRUE(bad.status().IsCorruption()) << bad.status().ToString();
  EXPECT_EQ(bad.status().err(), EIO);
  auto again = (*r)->Read(2 * kMiB + 5, 100);  // read again: still refused, dropped once
  EXPECT_FALSE(again.ok());
  ExpectRange(**r, data, 3 * kMiB, kMiB);  // the segment after it is fine
  const StoreStats s = e->Stats();
  EXPECT_EQ(s.corrupt_dropped, 1u);
  EXPECT_GE(s.checksum_failures, 2u);
  EXPECT_EQ(s.files, 0u);
}

TEST(ChunkReaderTest, MemoryStoreReaderServesItsBytesInPlace) {
  MemoryStore store;
  const auto data = Pattern(3 * kMiB + 7, 5);
  LayoutRef l = WriteChunk(store, data);
  auto r = store.NewReader(l);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ExpectRange(**r, data, 0, data.size() + 100);
  ExpectRange(**r, data, kMiB + 3, 5000);
  auto past = (*r)->Read(data.size() + 1, 10);
  ASSERT_TRUE(past.ok());
  EXPECT_EQ(past->size, 0u);
  auto view = (*r)->Read(0, 64);
  ASSERT_TRUE(view.ok());
  r->reset();
  l.reset();
  EXPECT_TRUE(Join(*view) == Slice(data, 0, 64));  // the view holds the version's bytes
}

TEST(ChunkReaderTest, LayoutsOfAnotherStoreAreRefused) {
  TempDir dir;
  auto e = OpenOk(Opts(dir.path()));
  ASSERT_NE(e, nullptr);
  MemoryStore mem;
  LayoutRef from_engine = WriteChunk(*e, Pattern(5000, 6));
  LayoutRef from_memory = WriteChunk(mem, Pattern(5000, 7));
  auto r1 = e->NewReader(from_memory);
  ASSERT_FALSE(r1.ok());
  EXPECT_EQ(r1.status().err(), EINVAL);
  auto r2 = mem.NewReader(from_engine);
  ASSERT_FALSE(r2.ok());
  EXPECT_EQ(r2.status().err(), EINVAL);
  auto w = mem.NewWriter(from_engine);
  ASSERT_FALSE(w.ok());
  EXPECT_EQ(w.status().err(), EINVAL);
  uint8_t buf[16];
  EXPECT_EQ(mem.Read(from_engine, 0, buf, sizeof buf).status().err(), EINVAL);
}

}  // namespace
}  // namespace kvfs
