// RareString and RareVector: value semantics, and an empty one holds no allocation whatever
// was done to it (a record decoder copying a 0-byte symlink target into data() allocated one
// per record: 48 bytes of every name a cluster node keeps).
#include "kvfs/rare_fields.h"

#include <gtest/gtest.h>

#include "kvfs/object.h"

namespace kvfs {
namespace {

TEST(RareFieldsTest, StringIsAValueAndEmptyMeansNoAllocation) {
  RareString s;
  EXPECT_TRUE(s.empty());
  s.resize(0);
  (void)s.data();  // a decoder reading 0 bytes into it
  EXPECT_FALSE(s.allocated());
  s = std::string("target");
  RareString copy = s;
  s.data()[0] = 'T';
  EXPECT_EQ(s.str(), "Target");
  EXPECT_EQ(copy.str(), "target");
  EXPECT_FALSE(copy == s);
  s = std::string();
  EXPECT_FALSE(s.allocated());
  s.resize(3);
  EXPECT_EQ(s.size(), 3u);
  s.resize(0);
  EXPECT_FALSE(s.allocated());
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
  EXPECT_FALSE(rec.symlink_target.allocated());
  EXPECT_FALSE(rec.extra_links.allocated());
  EXPECT_EQ(rec.nlink(), 1u);
}

}  // namespace
}  // namespace kvfs
