// LocalEngine tests of faults: injected device write errors, silent or torn writes and a byte
// flipped on the device are all caught (EIO) and leave the engine usable.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <vector>

#include "hang_watch.h"
#include "io_fault_injector.h"
#include "kvfs/local_engine.h"
#include "local_engine_test_util.h"
#include "temp_dir.h"

namespace kvfs {
namespace {

using testing::TempDir;
using namespace local_engine_test;

TEST(LocalEngineTest, FlippedByteOnDeviceGivesEio) {
  TempDir dir;
  auto e = OpenOk(Opts(dir.path()));
  auto data = Pattern(2 * kMiB, 9), other = Pattern(kMiB, 10);
  LayoutRef l = WriteChunk(*e, data), ok = WriteChunk(*e, other);
  ASSERT_TRUE(Publish(*e, 10, "bad", l).ok());
  ASSERT_TRUE(Publish(*e, 11, "good", ok).ok());
  ASSERT_NO_FATAL_FAILURE(FlipDeviceByte(dir.path(), l->segments[1].offset + 777, 0x01));
  std::vector<uint8_t> out(data.size());
  auto n = e->Read(l, 0, out.data(), out.size());
  ASSERT_FALSE(n.ok());
  EXPECT_EQ(n.status().err(), EIO);
  EXPECT_NE(n.status().message().find("checksum mismatch"), std::string::npos);
  EXPECT_EQ(e->Stats().checksum_failures, 1u);
  // The intact first segment still reads, and other chunks are unaffected.
  ASSERT_EQ(*e->Read(l, 0, out.data(), kMiB), kMiB);
  EXPECT_TRUE(std::equal(out.begin(), out.begin() + kMiB, data.begin()));
  EXPECT_EQ(ReadAll(*e, ok), other);
}

class FailWrites : public IoFaultInjector {
 public:
  std::atomic<bool> fail{false};
  std::atomic<int> seen{0};
  Status BeforeIo(IoRequest& r) override {
    ++seen;
    if (r.write && fail) return Status::IoError("injected write error");
    return Status::Ok();
  }
};

TEST(LocalEngineTest, InjectedDeviceWriteErrorIsEioAndNothingLeaks) {
  TempDir dir;
  auto faults = std::make_shared<FailWrites>();
  auto e = OpenWithFaults(dir.path(), faults);
  faults->fail = true;
  auto w = std::move(e->NewWriter(nullptr)).value();
  auto data = Pattern(2 * kMiB, 5);
  Status st = w->Write(0, data.data(), data.size());
  EXPECT_EQ(st.err(), EIO);
  w.reset();
  EXPECT_EQ(e->Stats().used_bytes, 0u);
  faults->fail = false;
  LayoutRef l = WriteChunk(*e, data);
  ASSERT_TRUE(Publish(*e, 10, "ok", l).ok());
  EXPECT_EQ(ReadAll(*e, l), data);
  EXPECT_GT(faults->seen.load(), 0);
}

class CorruptWrites : public IoFaultInjector {
 public:
  Status BeforeIo(IoRequest& r) override {
    if (r.write) r.data[0] ^= 0xff;  // silent corruption on the way to the disk
    return Status::Ok();
  }
};

// Stands for io_uring_enter refusing the queued requests (-EAGAIN: no memory for a request),
// `refusals` times (negative: for good). The kernel leaves refused requests queued.
class RefuseSubmits : public IoFaultInjector {
 public:
  std::atomic<int> refusals{0};
  std::atomic<int> refused{0};
  Status BeforeIo(IoRequest&) override { return Status::Ok(); }
  int BeforeSubmit() override {
    int left = refusals.load();
    while (left > 0 && !refusals.compare_exchange_weak(left, left - 1)) {
    }
    if (left == 0) return 0;
    ++refused;
    return -EAGAIN;
  }
};

TEST(LocalEngineTest, ASubmitTheKernelRefusesAFewTimesIsTriedAgain) {
  TempDir dir;
  auto faults = std::make_shared<RefuseSubmits>();
  auto e = OpenWithFaults(dir.path(), faults);
  // Streamed writes (the writer's own ring) and the closing seal (the thread's ring).
  for (uint32_t seed : {1u, 2u}) {
    faults->refusals = 3;
    const auto data = Pattern(6 * kMiB + 12345, seed);
    LayoutRef l = WriteChunk(*e, data);
    ASSERT_TRUE(l);
    ASSERT_TRUE(Publish(*e, 10 + seed, "f" + std::to_string(seed), l).ok());
    EXPECT_EQ(ReadAll(*e, l), data);
    EXPECT_EQ(faults->refusals.load(), 0);
  }
  EXPECT_EQ(faults->refused.load(), 6);
}

TEST(LocalEngineTest, ASubmitRefusedForGoodFailsItsWriteAndNoLaterIoSeesItsRequests) {
  TempDir dir;
  auto faults = std::make_shared<RefuseSubmits>();
  auto e = OpenWithFaults(dir.path(), faults);
  const auto before = Pattern(3 * kMiB, 7);
  LayoutRef kept = WriteChunk(*e, before);
  ASSERT_TRUE(Publish(*e, 10, "kept", kept).ok());
  for (int round = 0; round < 3; ++round) {
    // Refused for good: the write fails (EIO) instead of waiting for requests the kernel
    // never took; none of them goes out later with another ring's submit.
    faults->refusals = -1;
    {
      auto w = std::move(e->NewWriter(nullptr)).value();
      const auto doomed = Pattern(5 * kMiB, 100 + round);
      Status st = w->Write(0, doomed.data(), doomed.size());
      auto l = st.ok() ? w->Finish() : Result<LayoutRef>(st);
      ASSERT_FALSE(l.ok());
      EXPECT_EQ(l.status().err(), EIO) << l.status().ToString();
    }
    std::vector<uint8_t> out(kMiB);
    EXPECT_FALSE(e->Read(kept, 0, out.data(), out.size()).ok());  // reads are refused too
    faults->refusals = 0;
    // Fresh rings: later chunks (likely in the failed one's extents) read back exactly.
    const auto after = Pattern(5 * kMiB + 777, 200 + round);
    LayoutRef l = WriteChunk(*e, after);
    ASSERT_TRUE(l);
    ASSERT_TRUE(Publish(*e, 20 + round, "after" + std::to_string(round), l).ok());
    EXPECT_EQ(ReadAll(*e, l), after);
    EXPECT_EQ(ReadAll(*e, kept), before);
  }
}

// Strands the next `writes` device writes and `reads` device reads: the ring parks each where
// only a cancel ends it, as the kernel has been seen to leave an O_DIRECT write it took.
class StrandIo : public IoFaultInjector {
 public:
  std::atomic<int> writes{0}, reads{0}, stranded{0};
  Status BeforeIo(IoRequest& r) override {
    std::atomic<int>& left = r.write ? writes : reads;
    if (left.load() > 0) {
      --left;
      r.strand = true;
      ++stranded;
    }
    return Status::Ok();
  }
};

TEST(LocalEngineTest, ADeviceIoTheKernelStrandsIsAskedBackAndDoneSynchronously) {
  testing::HangWatch watch(std::chrono::seconds(60));  // without the ask-back it waits forever
  TempDir dir;
  const auto big = Pattern(6 * kMiB + 12345, 1), small = Pattern(100 * 1024 + 7, 2);
  {
    auto faults = std::make_shared<StrandIo>();
    auto e = OpenWithFaults(dir.path(), faults);
    watch.Step("stranded streamed write");
    faults->writes = 1;  // a streamed segment: the writer's own ring
    LayoutRef l1 = WriteChunk(*e, big);
    ASSERT_TRUE(l1);
    ASSERT_TRUE(Publish(*e, 10, "big", l1).ok());
    watch.Step("stranded seal");
    faults->writes = 1;  // the seal of a chunk smaller than a segment: the thread's ring
    LayoutRef l2 = WriteChunk(*e, small);
    ASSERT_TRUE(l2);
    ASSERT_TRUE(Publish(*e, 11, "small", l2).ok());
    EXPECT_EQ(faults->stranded.load(), 2);
    watch.Step("stranded read");
    faults->reads = 1;
    EXPECT_EQ(ReadAll(*e, l2), small);
    EXPECT_EQ(faults->stranded.load(), 3);
    EXPECT_EQ(ReadAll(*e, l1), big);
  }
  // What was written synchronously in the stranded requests' place is durable like the rest.
  auto e = OpenOk(Opts(dir.path()));
  auto recs = e->Records();
  EXPECT_EQ(ReadAll(*e, FindLayout(recs, 10)), big);
  EXPECT_EQ(ReadAll(*e, FindLayout(recs, 11)), small);
}

TEST(LocalEngineTest, SilentWriteCorruptionIsCaughtOnRead) {
  TempDir dir;
  auto e = OpenWithFaults(dir.path(), std::make_shared<CorruptWrites>());
  LayoutRef l = WriteChunk(*e, Pattern(kMiB, 1));
  std::vector<uint8_t> out(kMiB);
  EXPECT_EQ(e->Read(l, 0, out.data(), out.size()).status().err(), EIO);
}

class TearWrites : public IoFaultInjector {
 public:
  Status BeforeIo(IoRequest& r) override {
    if (r.write && r.len > 4096) r.len = 4096;  // only the first 4 KiB reach the disk
    return Status::Ok();
  }
};

TEST(LocalEngineTest, TornSegmentWriteIsCaughtOnRead) {
  TempDir dir;
  auto e = OpenWithFaults(dir.path(), std::make_shared<TearWrites>());
  LayoutRef l = WriteChunk(*e, Pattern(2 * kMiB, 1));
  std::vector<uint8_t> out(kMiB);
  EXPECT_EQ(e->Read(l, kMiB, out.data(), out.size()).status().err(), EIO);
  EXPECT_EQ(e->Read(l, 0, out.data(), 100).status().err(), EIO);
}

}  // namespace
}  // namespace kvfs
