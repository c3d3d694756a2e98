// IoBufferSlabs: O_DIRECT buffers carved out of 2 MiB huge-page slabs. Buffers are aligned,
// never overlap, never straddle a huge page when several share a slab, are reused before a
// new slab is mapped, and a slab goes back to the kernel with its last buffer. The slabs ask
// for transparent huge pages (VmFlags "hg"), which is what makes a whole-segment O_DIRECT
// request one physical segment. The engine's buffer pool hands out slab buffers that outlive it.
#include "io_buffer_slabs.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "kvfs/huge_pages.h"
#include "read_ahead_pool.h"

namespace kvfs {
namespace {

constexpr size_t kMiB = 1u << 20;

uintptr_t Addr(const uint8_t* p) { return reinterpret_cast<uintptr_t>(p); }

// The VmFlags line of the mapping in /proc/self/smaps that holds `p`.
std::string VmFlagsOf(const uint8_t* p) {
  std::ifstream smaps("/proc/self/smaps");
  std::string line;
  bool inside = false;
  while (std::getline(smaps, line)) {
    uintptr_t lo = 0, hi = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx ", &lo, &hi) == 2) {  // a mapping's first line
      inside = Addr(p) >= lo && Addr(p) < hi;
    } else if (inside && line.rfind("VmFlags:", 0) == 0) {
      return line;
    }
  }
  return "";
}

TEST(IoBufferSlabsTest, BuffersAreAlignedDisjointAndInsideOneHugePage) {
  for (size_t size : {kMiB, 768 * 1024ul, 512 * 1024ul}) {
    SCOPED_TRACE(size);
    IoBufferSlabs slabs(size);
    const size_t per_slab = kHugePageBytes / size;
    std::vector<uint8_t*> bufs;
    for (size_t i = 0; i < 2 * per_slab + 1; ++i) {
      uint8_t* b = slabs.Allocate();
      ASSERT_NE(b, nullptr);
      EXPECT_EQ(Addr(b) % 4096, 0u);
      // Inside one huge page: one physical segment for the block layer.
      EXPECT_EQ(Addr(b) / kHugePageBytes, (Addr(b) + size - 1) / kHugePageBytes);
      std::memset(b, static_cast<int>(i + 1), size);
      bufs.push_back(b);
    }
    EXPECT_EQ(slabs.mapped_slabs(), 3u);
    for (size_t i = 0; i < bufs.size(); ++i) {
      // Written one after another: an overlap would have overwritten an earlier buffer's ends.
      EXPECT_EQ(bufs[i][0], static_cast<uint8_t>(i + 1));
      EXPECT_EQ(bufs[i][size - 1], static_cast<uint8_t>(i + 1));
    }
    for (uint8_t* b : bufs) slabs.Free(b);
    EXPECT_EQ(slabs.mapped_slabs(), 0u);
  }
}

TEST(IoBufferSlabsTest, FreedBuffersAreReusedAndASlabLeavesWithItsLastBuffer) {
  IoBufferSlabs slabs(kMiB);
  uint8_t* a = slabs.Allocate();
  uint8_t* b = slabs.Allocate();
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(slabs.mapped_slabs(), 1u);  // two 1 MiB buffers share one 2 MiB slab
  slabs.Free(a);
  EXPECT_EQ(slabs.mapped_slabs(), 1u);  // b still lives there
  EXPECT_EQ(slabs.Allocate(), a);       // the free half is reused, no new slab
  EXPECT_EQ(slabs.mapped_slabs(), 1u);
  slabs.Free(a);
  slabs.Free(b);
  EXPECT_EQ(slabs.mapped_slabs(), 0u);
  slabs.Free(nullptr);  // harmless
  uint8_t stranger[16];
  slabs.Free(stranger);  // not one of ours: ignored, nothing corrupted
  EXPECT_EQ(slabs.mapped_slabs(), 0u);
  uint8_t* c = slabs.Allocate();
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(slabs.mapped_slabs(), 1u);
  slabs.Free(c);
}

TEST(IoBufferSlabsTest, BuffersLargerThanAHugePageGetASlabEach) {
  IoBufferSlabs slabs(3 * kMiB);
  EXPECT_EQ(slabs.slab_bytes(), 4 * kMiB);
  uint8_t* a = slabs.Allocate();
  uint8_t* b = slabs.Allocate();
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(Addr(a) % kHugePageBytes, 0u);
  EXPECT_EQ(Addr(b) % kHugePageBytes, 0u);
  EXPECT_EQ(slabs.mapped_slabs(), 2u);
  std::memset(a, 1, 3 * kMiB);
  std::memset(b, 2, 3 * kMiB);
  EXPECT_EQ(a[3 * kMiB - 1], 1);
  slabs.Free(a);
  EXPECT_EQ(slabs.mapped_slabs(), 1u);
  slabs.Free(b);
  EXPECT_EQ(slabs.mapped_slabs(), 0u);
}

TEST(IoBufferSlabsTest, SlabsAskForTransparentHugePages) {
  IoBufferSlabs slabs(kMiB);
  uint8_t* b = slabs.Allocate();
  ASSERT_NE(b, nullptr);
  const std::string flags = VmFlagsOf(b);
  ASSERT_FALSE(flags.empty()) << "no mapping in /proc/self/smaps holds the buffer";
  EXPECT_NE(flags.find(" hg"), std::string::npos) << flags;  // MADV_HUGEPAGE
  slabs.Free(b);
}

// The engine's readers and writers take their segment buffers from the pool: those must be
// slab buffers, and must stay valid (and go back to the slabs) when the pool is gone first.
TEST(IoBufferSlabsTest, ThePoolsBuffersAreSlabBuffersThatOutliveThePool) {
  auto pool = std::make_shared<ReadAheadPool>(kMiB);
  std::shared_ptr<uint8_t> a = pool->Buffer();
  std::shared_ptr<uint8_t> b = pool->Buffer();
  ASSERT_TRUE(a && b);
  EXPECT_NE(VmFlagsOf(a.get()).find(" hg"), std::string::npos);
  // Two 1 MiB buffers from one 2 MiB huge page.
  EXPECT_EQ(Addr(a.get()) / kHugePageBytes, Addr(b.get()) / kHugePageBytes);
  std::memset(a.get(), 0x5a, kMiB);
  pool.reset();
  EXPECT_EQ(a.get()[kMiB - 1], 0x5a);  // still mapped: the slabs live as long as a buffer
  a.reset();
  b.reset();
}

}  // namespace
}  // namespace kvfs
