// Sparse layouts (issue 11 item 5): a layout lists only stored segments, each with its index;
// the encoding keeps the dense form for files written start to end and a sparse form otherwise;
// a sparse engine file costs the segments written, whatever its size, and survives a restart.
#include <gtest/gtest.h>

#include "local_engine_test_util.h"
#include "record_codec.h"
#include "segment_codec.h"
#include "temp_dir.h"

namespace kvfs {
namespace {

using local_engine_test::kMiB;
using local_engine_test::OpenOk;
using local_engine_test::Opts;
using local_engine_test::Publish;
using testing::TempDir;

constexpr uint64_t kTiB = 1ull << 40;

Segment Seg(uint32_t index, uint32_t raw_len) {
  Segment s;
  s.index = index;
  s.device = 0;
  s.offset = (uint64_t{index} + 1) * kMiB;
  s.stored_len = raw_len;
  s.raw_len = raw_len;
  s.checksum = 0x1234 + index;
  return s;
}

ObjectRecord WithLayout(Layout layout) {
  ObjectRecord r;
  r.id = 7;
  r.parent = kRootId;
  r.name = "f";
  r.layout = std::make_shared<Layout>(std::move(layout));
  return r;
}

std::string Encode(const ObjectRecord& rec) {
  std::string out;
  ByteWriter w(&out);
  RecordCodec::EncodeRecord(rec, w);
  return out;
}

TEST(SparseLayoutTest, EncodingRoundTripsIndexes) {
  Layout sparse;
  sparse.size = 8 * kTiB;
  sparse.segments = {Seg(3, kMiB), Seg(1000, kMiB), Seg(8 * 1024 * 1024 - 1, kMiB)};
  const std::string bytes = Encode(WithLayout(sparse));
  ByteReader r(bytes.data(), bytes.size());
  DecodedRecord d;
  ASSERT_TRUE(RecordCodec::DecodeRecord(r, &d));
  ASSERT_EQ(d.layout->segments.size(), 3u);
  EXPECT_EQ(d.layout->size, 8 * kTiB);
  EXPECT_EQ(d.layout->segments[1].index, 1000u);
  EXPECT_EQ(d.layout->segments[2].index, 8u * 1024 * 1024 - 1);
  EXPECT_EQ(d.layout->Find(1000)->checksum, 0x1234u + 1000);
  EXPECT_EQ(d.layout->Find(999), nullptr);
  EXPECT_TRUE(CheckLayoutShape(*d.layout, kMiB).ok());

  // A file written start to end keeps the dense form: no index on disk.
  Layout dense;
  dense.size = 2 * kMiB + 5;
  dense.segments = {Seg(0, kMiB), Seg(1, kMiB), Seg(2, 5)};
  Layout with_hole = dense;
  with_hole.size = 3 * kMiB + 5;
  with_hole.segments = {Seg(0, kMiB), Seg(1, kMiB), Seg(3, 5)};  // segment 2 is a hole
  // The sparse form spends a 4-byte index per segment; the dense one none.
  EXPECT_EQ(Encode(WithLayout(with_hole)).size(), Encode(WithLayout(dense)).size() + 3 * 4);
  const std::string dense_bytes = Encode(WithLayout(dense));
  ByteReader dr(dense_bytes.data(), dense_bytes.size());
  DecodedRecord dd;
  ASSERT_TRUE(RecordCodec::DecodeRecord(dr, &dd));
  EXPECT_EQ(dd.layout->segments[2].index, 2u);
}

TEST(SparseLayoutTest, DecodeRejectsIndexesOutOfOrder) {
  Layout bad;
  bad.size = 10 * kMiB;
  bad.segments = {Seg(5, kMiB), Seg(4, kMiB)};
  const std::string bytes = Encode(WithLayout(bad));
  ByteReader r(bytes.data(), bytes.size());
  DecodedRecord d;
  EXPECT_FALSE(RecordCodec::DecodeRecord(r, &d));
}

TEST(SparseLayoutTest, ShapeCheck) {
  Layout l;
  l.size = 3 * kMiB + 10;
  l.segments = {Seg(1, kMiB), Seg(3, 10)};
  EXPECT_TRUE(CheckLayoutShape(l, kMiB).ok());
  l.segments = {Seg(1, kMiB), Seg(4, 10)};  // past the end
  EXPECT_FALSE(CheckLayoutShape(l, kMiB).ok());
  l.segments = {Seg(1, kMiB), Seg(1, kMiB)};  // repeated
  EXPECT_FALSE(CheckLayoutShape(l, kMiB).ok());
  l.segments = {Seg(1, kMiB), Seg(3, 11)};  // wrong share
  EXPECT_FALSE(CheckLayoutShape(l, kMiB).ok());
}

TEST(SparseLayoutTest, EngineFileCostsWhatWasWrittenAndSurvivesRestart) {
  TempDir dir;
  LayoutRef layout;
  {
    auto e = OpenOk(Opts(dir.path()));
    ASSERT_NE(e, nullptr);
    auto w = e->NewWriter(nullptr);
    ASSERT_TRUE(w.ok());
    ASSERT_TRUE((*w)->Truncate(8 * kTiB).ok());
    ASSERT_TRUE((*w)->Write(8 * kTiB - 1, "E", 1).ok());
    ASSERT_TRUE((*w)->Write(3 * kTiB, "mid", 3).ok());
    auto l = (*w)->Finish();
    ASSERT_TRUE(l.ok()) << l.status().ToString();
    layout = *l;
    ASSERT_EQ(layout->segments.size(), 2u);
    ASSERT_TRUE(Publish(*e, 100, "sparse", layout).ok());
    EXPECT_LE(e->Stats().used_bytes, 2 * kMiB);
    EXPECT_LT(e->Stats().journal_bytes, 4096u);
    EXPECT_TRUE(e->Verify(layout).ok());
    layout.reset();
  }
  auto e = OpenOk(Opts(dir.path()));
  ASSERT_NE(e, nullptr);
  auto records = e->Records();
  ASSERT_EQ(records.size(), 1u);
  const LayoutRef& back = records[0].layout;
  ASSERT_EQ(back->size, 8 * kTiB);
  char buf[8] = {1, 1, 1, 1, 1, 1, 1, 1};
  auto n = e->Read(back, 8 * kTiB - 4, buf, sizeof buf);
  ASSERT_TRUE(n.ok());
  ASSERT_EQ(*n, 4u);
  EXPECT_EQ(std::string(buf, 4), std::string("\0\0\0E", 4));
  n = e->Read(back, 3 * kTiB - 2, buf, sizeof buf);
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(std::string(buf, 8), std::string("\0\0mid\0\0\0", 8));
  n = e->Read(back, 5 * kTiB, buf, sizeof buf);  // deep inside a hole
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(std::string(buf, 8), std::string(8, '\0'));
  // The read-ahead reader serves holes as zeros too.
  auto reader = e->NewReader(back);
  ASSERT_TRUE(reader.ok()) << reader.status().ToString();
  auto view = (*reader)->Read(8 * kTiB - 2 * kMiB, 2 * kMiB);
  ASSERT_TRUE(view.ok()) << view.status().ToString();
  ASSERT_EQ(view->size, 2 * kMiB);
  std::string joined;
  for (const iovec& span : view->spans) {
    joined.append(static_cast<const char*>(span.iov_base), span.iov_len);
  }
  EXPECT_EQ(joined, std::string(2 * kMiB - 1, '\0') + "E");
}

}  // namespace
}  // namespace kvfs
