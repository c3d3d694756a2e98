// EngineChunkWriter against a byte-vector model: random writes with gaps, truncates down and up,
// reads through the writer, publishes and reads back, one writer after another on one engine.
// Segment buffers are reused between writers (the engine's pool) and hold the last file's bytes,
// so every byte the model says is zero must have been cleared by the writer: a gap written
// around, a shrunk tail grown again, the padding of a raw segment.
#include <gtest/gtest.h>

#include <random>

#include "local_engine_test_util.h"
#include "temp_dir.h"

namespace kvfs {
namespace {

using local_engine_test::OpenOk;
using local_engine_test::Opts;
using local_engine_test::Pattern;
using local_engine_test::ReadAll;
using testing::TempDir;

constexpr uint32_t kSeg = 64 << 10;

void RunModel(Compression compression, uint32_t seed) {
  TempDir dir;
  EngineOptions o = Opts(dir.path(), 64ull << 20);
  o.segment_size = kSeg;
  o.compression = compression;
  auto e = OpenOk(o);
  ASSERT_TRUE(e);
  std::mt19937 rng(seed);
  std::vector<LayoutRef> keep;  // a few published versions stay referenced, the rest are freed
  for (int round = 0; round < 40; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    // Dirty every pooled buffer first: a full-segment file of non-zero bytes.
    {
      auto w = std::move(e->NewWriter(nullptr)).value();
      const auto junk = Pattern(6 * kSeg, 1000 + round);
      ASSERT_TRUE(w->Write(0, junk.data(), junk.size()).ok());
      ASSERT_TRUE(w->Finish().ok());
    }
    auto w = std::move(e->NewWriter(nullptr)).value();
    std::vector<uint8_t> model;
    for (int op = 0; op < 12; ++op) {
      const uint32_t pick = rng() % 10;
      if (pick < 7) {  // a write, often past the end (a gap) or inside a segment
        const size_t off = rng() % (5 * kSeg);
        const size_t len = 1 + rng() % (kSeg + kSeg / 2);
        const auto data = Pattern(len, rng());
        ASSERT_TRUE(w->Write(off, data.data(), len).ok());
        if (model.size() < off + len) model.resize(off + len, 0);
        std::copy(data.begin(), data.end(), model.begin() + static_cast<ptrdiff_t>(off));
      } else {  // a truncate, down or up
        const size_t size = rng() % (6 * kSeg);
        ASSERT_TRUE(w->Truncate(size).ok());
        model.resize(size, 0);
      }
      ASSERT_EQ(w->size(), model.size());
      std::vector<uint8_t> view(model.size() + 100, 0xAB);
      auto n = w->Read(0, view.data(), view.size());
      ASSERT_TRUE(n.ok());
      ASSERT_EQ(*n, model.size());
      view.resize(*n);
      ASSERT_TRUE(view == model) << "writer view differs after op " << op;
    }
    auto l = w->Finish();
    ASSERT_TRUE(l.ok()) << l.status().ToString();
    ASSERT_TRUE(ReadAll(*e, *l) == model) << "published version differs";
    ASSERT_TRUE(e->Verify(*l).ok());
    if (round % 8 == 0) keep.push_back(*l);
  }
}

TEST(ChunkWriterModelTest, RawSegments) { RunModel(Compression::kOff, 1); }
TEST(ChunkWriterModelTest, Lz4Segments) { RunModel(Compression::kLz4, 2); }

}  // namespace
}  // namespace kvfs
