// InodeTable against a std::map model: random adds, replacements and erases of inode numbers
// shaped like kvfs's (a node id in the high 16 bits, a counter below), through many growths
// and backward-shift deletions; every inode findable until erased, ForEach sees each once.
#include "inode_table.h"

#include <gtest/gtest.h>

#include <map>
#include <random>

#include "namespace.h"

namespace kvfs::fs {
namespace {

std::unique_ptr<Inode> NewInode(uint64_t id, uint32_t tag) {
  auto in = std::make_unique<Inode>();
  in->rec.id = id;
  in->rec.mode = tag;  // tells a replacement from the inode it replaced
  return in;
}

TEST(InodeTableTest, EmptyTable) {
  InodeTable t;
  EXPECT_EQ(t.Find(1), nullptr);
  t.Erase(1);  // nothing there: no-op
  EXPECT_EQ(t.size(), 0u);
  int n = 0;
  t.ForEach([&](Inode*) { ++n; });
  EXPECT_EQ(n, 0);
}

TEST(InodeTableTest, PutReplacesTheInodeOfTheSameNumber) {
  InodeTable t;
  Inode* a = t.Put(NewInode(7, 1));
  EXPECT_EQ(t.Find(7), a);
  Inode* b = t.Put(NewInode(7, 2));
  EXPECT_EQ(t.size(), 1u);
  EXPECT_EQ(t.Find(7), b);
  EXPECT_EQ(t.Find(7)->rec.mode, 2u);
}

TEST(InodeTableTest, MatchesAModel) {
  std::mt19937_64 rng(7);
  InodeTable t;
  std::map<uint64_t, uint32_t> model;  // id -> tag
  uint32_t tag = 0;
  auto check = [&] {
    ASSERT_EQ(t.size(), model.size());
    for (auto& [id, want] : model) {
      Inode* in = t.Find(id);
      ASSERT_NE(in, nullptr) << id;
      ASSERT_EQ(in->rec.mode, want);
    }
    std::map<uint64_t, int> seen;
    t.ForEach([&](Inode* in) { ++seen[in->rec.id]; });
    ASSERT_EQ(seen.size(), model.size());
    for (auto& [id, n] : seen) ASSERT_EQ(n, 1) << id;
  };
  for (int step = 0; step < 60000; ++step) {
    // Ids of three nodes, dense counters: the shape that clusters in a weak hash.
    const uint64_t id = (uint64_t{1 + rng() % 3} << 48) | (rng() % 4000);
    const bool drain = (step / 10000) % 2 == 1;
    if (rng() % 100 < (drain ? 70u : 30u)) {
      t.Erase(id);
      model.erase(id);
      ASSERT_EQ(t.Find(id), nullptr);
    } else {
      t.Put(NewInode(id, ++tag));
      model[id] = tag;
    }
    if (step % 1999 == 0) check();
  }
  check();
}

}  // namespace
}  // namespace kvfs::fs
