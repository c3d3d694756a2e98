// RemoteBaseWriter: a writer over a base only other nodes hold copies the base when a write
// first needs it, never for a rewrite (truncate to 0), and a failed copy is tried again.
#include "remote_base_writer.h"

#include <gtest/gtest.h>

#include <string>

#include "memory_store.h"

namespace kvfs::cluster {
namespace {

class RemoteBaseWriterTest : public ::testing::Test {
 protected:
  // The "remote" base: a published MemoryStore version of `base_`.
  void SetUp() override {
    auto w = store_.NewWriter(nullptr);
    ASSERT_TRUE(w.ok());
    ASSERT_TRUE((*w)->Write(0, base_.data(), base_.size()).ok());
    auto layout = (*w)->Finish();
    ASSERT_TRUE(layout.ok());
    base_layout_ = *layout;
  }

  RemoteBaseWriter Make() {
    return RemoteBaseWriter(
        base_.size(),
        [this]() -> Result<std::unique_ptr<ChunkWriter>> {
          ++copies_;
          if (fail_copies_ > 0) {
            --fail_copies_;
            return Status::IoError("no holder answered");
          }
          return store_.NewWriter(base_layout_);
        },
        [this] { return store_.NewWriter(nullptr); });
  }

  std::string Content(ChunkWriter& w) {
    std::string out(w.size(), '\0');
    auto n = w.Read(0, out.data(), out.size());
    EXPECT_TRUE(n.ok());
    out.resize(n.ok() ? *n : 0);
    return out;
  }

  MemoryStore store_;
  std::string base_ = std::string(3000, 'b') + "tail";
  LayoutRef base_layout_;
  int copies_ = 0;
  int fail_copies_ = 0;
};

TEST_F(RemoteBaseWriterTest, MakingOneFetchesNothing) {
  RemoteBaseWriter w = Make();
  EXPECT_EQ(w.size(), base_.size());
  EXPECT_FALSE(w.dirty());
  EXPECT_FALSE(w.materialized());
  EXPECT_EQ(copies_, 0);
}

TEST_F(RemoteBaseWriterTest, ARewriteNeverFetchesTheBase) {
  RemoteBaseWriter w = Make();
  ASSERT_TRUE(w.Truncate(0).ok());  // O_TRUNC arrives as this, right after the open
  EXPECT_EQ(w.size(), 0u);
  EXPECT_TRUE(w.dirty());  // an empty file is not the base
  ASSERT_TRUE(w.Write(0, "new", 3).ok());
  EXPECT_EQ(Content(w), "new");
  auto layout = w.Finish();
  ASSERT_TRUE(layout.ok());
  EXPECT_EQ((*layout)->size, 3u);
  EXPECT_EQ(copies_, 0);
}

TEST_F(RemoteBaseWriterTest, AWriteInPlaceCopiesTheBaseOnceFirst) {
  RemoteBaseWriter w = Make();
  ASSERT_TRUE(w.Write(1, "XY", 2).ok());
  ASSERT_TRUE(w.Write(10, "Z", 1).ok());
  EXPECT_EQ(copies_, 1);
  std::string want = base_;
  want.replace(1, 2, "XY");
  want[10] = 'Z';
  EXPECT_EQ(Content(w), want);
  EXPECT_TRUE(w.dirty());
}

TEST_F(RemoteBaseWriterTest, ShrinkingOrReadingNeedsTheBase) {
  RemoteBaseWriter shrink = Make();
  ASSERT_TRUE(shrink.Truncate(5).ok());
  EXPECT_EQ(Content(shrink), base_.substr(0, 5));
  RemoteBaseWriter read = Make();
  EXPECT_EQ(Content(read), base_);
  EXPECT_FALSE(read.dirty());  // a copy of the base is the base
  EXPECT_EQ(copies_, 2);
}

TEST_F(RemoteBaseWriterTest, AFailedCopyIsTriedAgainAndLosesNothing) {
  fail_copies_ = 1;
  RemoteBaseWriter w = Make();
  Status st = w.Write(0, "A", 1);
  EXPECT_FALSE(st.ok());
  EXPECT_FALSE(w.materialized());
  EXPECT_EQ(w.size(), base_.size());
  ASSERT_TRUE(w.Write(0, "A", 1).ok());
  EXPECT_EQ(copies_, 2);
  EXPECT_EQ(Content(w), "A" + base_.substr(1));
}

}  // namespace
}  // namespace kvfs::cluster
