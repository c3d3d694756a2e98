// RareFields and RareVector: value semantics, and an empty one holds no allocation whatever
// was done to it (a record decoder copying a 0-byte symlink target into a rare string allocated
// one per record: 48 bytes of every name a cluster node keeps).
#include "kvfs/rare_fields.h"

#include <gtest/gtest.h>

#include "kvfs/object.h"

namespace kvfs {
namespace {

TEST(RareFieldsTest, FieldsAreAValueAndEmptyMeansNoAllocation) {
  RareFields f;
  EXPECT_FALSE(f.allocated());
  f.set_symlink_target("");  // a decoder setting what it read: nothing
  f.set_rdev(0);
  f.set_prefix_parent(0);
  EXPECT_FALSE(f.allocated());
  f.set_symlink_target("target");
  f.set_rdev(0x801);
  RareFields copy = f;
  f.set_symlink_target("Target");
  EXPECT_EQ(f.symlink_target(), "Target");
  EXPECT_EQ(copy.symlink_target(), "target");
  EXPECT_EQ(copy.rdev(), 0x801u);
  EXPECT_FALSE(copy == f);
  // The box goes when its last field is empty again, whichever that is.
  f.set_symlink_target("");
  EXPECT_TRUE(f.allocated());
  f.set_prefix_parent(7);
  f.set_rdev(0);
  EXPECT_EQ(f.prefix_parent(), 7u);
  f.set_prefix_parent(0);
  EXPECT_FALSE(f.allocated());
  EXPECT_EQ(f, RareFields());
  ObjectRecord rec;
  rec.type = ObjectType::kSymlink;
  rec.set_symlink_target("abc");
  EXPECT_EQ(rec.size(), 3u);
}

TEST(RareFieldsTest, VectorIsAValueAndEmptyMeansNoAllocation) {
  RareVector<Link> v;
  EXPECT_EQ(v.begin(), v.end());
  v.resize(0);
  EXPECT_FALSE(v.allocated());
  v.push_back({1, "a"});
  v.push_back({2, "b"});
  v.push_back({1, "a"});
  RareVector<Link> copy = v;
  EXPECT_EQ(v.erase_value({1, "a"}), 2u);
  EXPECT_EQ(v, (std::vector<Link>{{2, "b"}}));
  EXPECT_EQ(copy.size(), 3u);
  v.erase(v.begin());
  EXPECT_TRUE(v.empty());
  EXPECT_FALSE(v.allocated());
  std::vector<Link> src{{3, "c"}, {4, "d"}};
  copy.assign(src.begin(), src.end());
  EXPECT_EQ(copy.to_vector(), src);
  ObjectRecord rec;
  EXPECT_FALSE(rec.rare.allocated());
  EXPECT_FALSE(rec.extra_links.allocated());
  EXPECT_EQ(rec.nlink(), 1u);
}

}  // namespace
}  // namespace kvfs
