// LocalEngine tests of faults: injected device write errors, silent or torn writes and a byte
// flipped on the device are all caught (EIO) and leave the engine usable.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <vector>

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
  EngineOptions o = Opts(dir.path());
  auto faults = std::make_shared<FailWrites>();
  o.fault_injector = faults;
  auto e = OpenOk(o);
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

TEST(LocalEngineTest, SilentWriteCorruptionIsCaughtOnRead) {
  TempDir dir;
  EngineOptions o = Opts(dir.path());
  o.fault_injector = std::make_shared<CorruptWrites>();
  auto e = OpenOk(o);
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
  EngineOptions o = Opts(dir.path());
  o.fault_injector = std::make_shared<TearWrites>();
  auto e = OpenOk(o);
  LayoutRef l = WriteChunk(*e, Pattern(2 * kMiB, 1));
  std::vector<uint8_t> out(kMiB);
  EXPECT_EQ(e->Read(l, kMiB, out.data(), out.size()).status().err(), EIO);
  EXPECT_EQ(e->Read(l, 0, out.data(), 100).status().err(), EIO);
}

}  // namespace
}  // namespace kvfs
