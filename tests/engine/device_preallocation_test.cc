// Preallocating device files at an engine's first start: a capacity the file system cannot hold
// is refused before it takes any room, a start that fails all the same leaves neither the space
// it took nor device files that would make the next start refuse, and a file that holds other
// data is never taken for a device.
#include <gtest/gtest.h>

#include <cerrno>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>

#include "fault_injection_fs.h"
#include "fillable_fs.h"
#include "kvfs/local_engine.h"
#include "root_records.h"
#include "temp_dir.h"

namespace kvfs {
namespace {

using testing::FaultInjectionFileSystem;
using testing::FillableFileSystem;
using testing::TempDir;

EngineOptions Opts(const std::string& dir, std::shared_ptr<FileSystem> fs) {
  EngineOptions o = testing::SmallEngineOptions(dir);
  o.file_system = std::move(fs);
  return o;
}

TEST(DevicePreallocation, ACapacityLargerThanTheFreeSpaceIsRefusedBeforeItTakesAny) {
  TempDir dir;
  auto fs = std::make_shared<FillableFileSystem>();
  fs->full = true;
  fs->room = 16 << 20;  // FreeBytes says 16 MiB; the capacity asks for 64
  auto engine = LocalEngine::Open(Opts(dir.path(), fs));
  ASSERT_FALSE(engine.ok());
  EXPECT_EQ(engine.status().err(), ENOSPC);
  EXPECT_NE(engine.status().message().find("16.0 MiB free"), std::string::npos)
      << engine.status().ToString();
  EXPECT_EQ(fs->refused.load(), 0) << "a fallocate was tried";
  EXPECT_FALSE(std::filesystem::exists(dir.path() + "/device0.kvfs"));

  fs->full = false;
  auto again = LocalEngine::Open(Opts(dir.path(), fs));
  ASSERT_TRUE(again.ok()) << again.status().ToString();
}

TEST(DevicePreallocation, AFailedPreallocationGivesBackWhatItTook) {
  TempDir dir;
  auto fs = std::make_shared<FillableFileSystem>();
  fs->report_free = false;   // the check cannot tell: only fallocate finds out
  fs->allocations_left = 0;  // and it fails after taking the room, as on ext4
  auto engine = LocalEngine::Open(Opts(dir.path(), fs));
  ASSERT_FALSE(engine.ok());
  EXPECT_EQ(engine.status().err(), ENOSPC) << engine.status().ToString();
  EXPECT_EQ(fs->refused.load(), 1);
  EXPECT_FALSE(std::filesystem::exists(dir.path() + "/device0.kvfs"));

  fs->allocations_left = -1;
  auto again = LocalEngine::Open(Opts(dir.path(), fs));
  ASSERT_TRUE(again.ok()) << again.status().ToString();
}

TEST(DevicePreallocation, AFailedSecondDeviceLeavesNoFirstOneToRefuseTheNextStart) {
  TempDir dir;
  auto fs = std::make_shared<FillableFileSystem>();
  EngineOptions o = Opts(dir.path(), fs);
  o.devices = {{dir.path() + "/a.kvfs", 32 << 20}, {dir.path() + "/b.kvfs", 32 << 20}};
  // A leftover file the operator made (no superblock): kept, at its own size.
  {
    std::FILE* f = std::fopen((dir.path() + "/b.kvfs").c_str(), "w");
    std::fclose(f);
  }
  std::filesystem::resize_file(dir.path() + "/b.kvfs", 4096);
  fs->allocations_left = 1;  // a.kvfs gets its room, b.kvfs does not
  auto engine = LocalEngine::Open(o);
  ASSERT_FALSE(engine.ok());
  EXPECT_EQ(engine.status().err(), ENOSPC) << engine.status().ToString();
  EXPECT_FALSE(std::filesystem::exists(dir.path() + "/a.kvfs"));
  ASSERT_TRUE(std::filesystem::exists(dir.path() + "/b.kvfs"));
  EXPECT_EQ(std::filesystem::file_size(dir.path() + "/b.kvfs"), 4096u);

  fs->allocations_left = -1;
  auto again = LocalEngine::Open(o);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(std::filesystem::file_size(dir.path() + "/a.kvfs"), 32u << 20);
}

TEST(DevicePreallocation, AFirstStartThatDiedAtAnyStepStartsAgain) {
  // A first start killed after a device's superblock and before the journal left a device the
  // next start refused as another engine's ("already holds a kvfs engine's data"): the data
  // directory had no journal to say it was this one's. Every call of a first start fails here
  // in turn, as if the daemon died there (what was written stays), and a start follows.
  for (uint64_t n = 1;; ++n) {
    ASSERT_LT(n, 500u) << "a first start makes fewer calls than this";
    TempDir dir;
    auto fs = std::make_shared<FaultInjectionFileSystem>();
    fs->CrashAtCall(n);
    const bool whole = LocalEngine::Open(Opts(dir.path(), fs)).ok() && !fs->crashed();
    auto again = LocalEngine::Open(Opts(dir.path(), FileSystem::Posix()));
    ASSERT_TRUE(again.ok()) << "died at call " << n << ": " << again.status().ToString();
    ASSERT_TRUE((*again)->Apply(MetaBatch{}).ok());
    EXPECT_FALSE(std::filesystem::exists(dir.path() + "/FIRST-START")) << "call " << n;
    if (whole) break;  // past the last call of a first start
  }
}

TEST(DevicePreallocation, AFileThatHoldsOtherDataIsNotTakenForADevice) {
  TempDir dir;
  EngineOptions o = Opts(dir.path(), FileSystem::Posix());
  const std::string path = dir.path() + "/notes.txt";
  o.devices = {{path, 32 << 20}};
  {
    std::ofstream f(path);
    f << "someone's data";
  }
  auto engine = LocalEngine::Open(o);
  ASSERT_FALSE(engine.ok());
  EXPECT_EQ(engine.status().err(), EEXIST) << engine.status().ToString();
  EXPECT_NE(engine.status().message().find("not a kvfs device"), std::string::npos);
  std::ifstream f(path);
  std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  EXPECT_EQ(text, "someone's data");
}

}  // namespace
}  // namespace kvfs
