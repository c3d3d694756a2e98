#include "extent_allocator.h"

#include <gtest/gtest.h>

#include <vector>

namespace kvfs {
namespace {

constexpr uint64_t kU = ExtentAllocator::kUnit;

TEST(ExtentAllocatorTest, AllocatesFirstFitAndRoundsUp) {
  ExtentAllocator a(kU, 11 * kU);
  auto x = a.Allocate(1);
  ASSERT_TRUE(x.ok());
  EXPECT_EQ(*x, kU);
  auto y = a.Allocate(kU + 1);
  ASSERT_TRUE(y.ok());
  EXPECT_EQ(*y, 2 * kU);
  EXPECT_EQ(a.free_bytes(), 7 * kU);
}

TEST(ExtentAllocatorTest, FreeCoalescesNeighbours) {
  ExtentAllocator a(0, 10 * kU);
  std::vector<uint64_t> offs;
  for (int i = 0; i < 10; ++i) offs.push_back(*a.Allocate(kU));
  EXPECT_EQ(a.free_bytes(), 0u);
  ASSERT_TRUE(a.Free(offs[1], kU).ok());
  ASSERT_TRUE(a.Free(offs[3], kU).ok());
  EXPECT_EQ(a.free_extent_count(), 2u);
  ASSERT_TRUE(a.Free(offs[2], kU).ok());  // joins 1..3
  EXPECT_EQ(a.free_extent_count(), 1u);
  EXPECT_EQ(a.largest_free_extent(), 3 * kU);
  for (int i : {0, 4, 5, 6, 7, 8, 9}) ASSERT_TRUE(a.Free(offs[i], kU).ok());
  EXPECT_EQ(a.free_extent_count(), 1u);
  EXPECT_EQ(a.largest_free_extent(), 10 * kU);
}

TEST(ExtentAllocatorTest, FragmentationGivesEnospcForLargeButNotSmall) {
  ExtentAllocator a(0, 8 * kU);
  std::vector<uint64_t> offs;
  for (int i = 0; i < 8; ++i) offs.push_back(*a.Allocate(kU));
  for (int i = 0; i < 8; i += 2) ASSERT_TRUE(a.Free(offs[i], kU).ok());
  EXPECT_EQ(a.free_bytes(), 4 * kU);
  auto big = a.Allocate(2 * kU);
  ASSERT_FALSE(big.ok());
  EXPECT_EQ(big.status().err(), ENOSPC);
  EXPECT_TRUE(a.Allocate(kU).ok());
}

TEST(ExtentAllocatorTest, EnospcWhenFull) {
  ExtentAllocator a(0, 4 * kU);
  ASSERT_TRUE(a.Allocate(4 * kU).ok());
  auto r = a.Allocate(1);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().err(), ENOSPC);
}

TEST(ExtentAllocatorTest, DoubleFreeAndOutOfRangeAreRejected) {
  ExtentAllocator a(0, 4 * kU);
  auto x = a.Allocate(kU);
  ASSERT_TRUE(a.Free(*x, kU).ok());
  EXPECT_EQ(a.Free(*x, kU).err(), EINVAL);
  EXPECT_EQ(a.Free(8 * kU, kU).err(), EINVAL);
  EXPECT_EQ(a.free_bytes(), 4 * kU);
}

TEST(ExtentAllocatorTest, RebuildByReserveMatchesAllocations) {
  ExtentAllocator a(0, 16 * kU);
  ASSERT_TRUE(a.Reserve(2 * kU, 3 * kU).ok());
  ASSERT_TRUE(a.Reserve(8 * kU, kU).ok());
  EXPECT_EQ(a.Reserve(3 * kU, kU).err(), EINVAL);  // overlaps a reserved extent
  EXPECT_EQ(a.free_bytes(), 12 * kU);
  // First fit skips the reserved extents.
  EXPECT_EQ(*a.Allocate(2 * kU), 0u);
  EXPECT_EQ(*a.Allocate(3 * kU), 5 * kU);
  EXPECT_EQ(*a.Allocate(kU), 9 * kU);
}

}  // namespace
}  // namespace kvfs
