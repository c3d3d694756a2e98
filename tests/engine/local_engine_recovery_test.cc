// LocalEngine tests of opening and recovery: reopening keeps everything, durability modes,
// journal rotation by checkpoint, the data directory lock, option checks, and crashes (a child
// process that dies mid-way) recovered at the next open.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <vector>

#include "kvfs/local_engine.h"
#include "local_engine_test_util.h"
#include "temp_dir.h"

namespace kvfs {
namespace {

using testing::TempDir;
using namespace local_engine_test;

TEST(LocalEngineTest, ReopenKeepsEverything) {
  TempDir dir;
  auto data1 = Pattern(2 * kMiB + 3, 1), data2 = Pattern(4096, 2);
  ObjectId max_id = 0;
  {
    auto e = OpenOk(Opts(dir.path()));
    ObjectId d = e->NewId(), f1 = e->NewId(), f2 = e->NewId();
    max_id = f2;
    MetaBatch b;
    ObjectRecord dr;
    dr.id = d;
    dr.parent = kRootId;
    dr.name = "dir";
    dr.type = ObjectType::kDirectory;
    dr.mode = 0755;
    b.puts.push_back(dr);
    b.puts.push_back(FileRecord(f1, "one", WriteChunk(*e, data1)));
    ObjectRecord r2 = FileRecord(f2, "two", WriteChunk(*e, data2));
    r2.parent = d;
    r2.flags = kFlagPinned;
    r2.set_prefix_parent(f1);
    b.puts.push_back(r2);
    ASSERT_TRUE(e->Apply(b).ok());
    for (int i = 0; i < 5; ++i) (void)e->NewId();
  }
  auto e = OpenOk(Opts(dir.path()));
  auto recs = e->Records();
  ASSERT_EQ(recs.size(), 3u);
  for (const auto& r : recs) {
    if (r.name == "two") {
      EXPECT_EQ(r.flags, static_cast<uint32_t>(kFlagPinned));
      EXPECT_EQ(r.mtime.sec, 1700000000);
      EXPECT_EQ(ReadAll(*e, r.layout), data2);
    } else if (r.name == "one") {
      EXPECT_EQ(ReadAll(*e, r.layout), data1);
    } else {
      EXPECT_EQ(r.type, ObjectType::kDirectory);
    }
  }
  EXPECT_GT(e->NewId(), max_id + 5);
  StoreStats s = e->Stats();
  EXPECT_EQ(s.files, 2u);
  EXPECT_EQ(s.objects, 3u);
  EXPECT_EQ(s.logical_bytes, data1.size() + data2.size());
  EXPECT_EQ(s.used_bytes, 2 * kMiB + 2 * 4096);  // two full segments, two 4 KiB tails
}

TEST(LocalEngineTest, AsyncDurabilityLosesNothingOnCleanClose) {
  TempDir dir;
  EngineOptions o = Opts(dir.path());
  o.durability = Durability::kAsync;
  o.async_commit_ms = 60000;  // nothing is committed before close
  {
    auto e = OpenOk(o);
    for (int i = 0; i < 20; ++i) {
      ASSERT_TRUE(
          Publish(*e, 10 + i, "f" + std::to_string(i), WriteChunk(*e, Pattern(5000, i))).ok());
    }
  }
  auto e = OpenOk(o);
  auto recs = e->Records();
  ASSERT_EQ(recs.size(), 20u);
  for (int i = 0; i < 20; ++i) EXPECT_EQ(ReadAll(*e, FindLayout(recs, 10 + i)), Pattern(5000, i));
}

TEST(LocalEngineTest, SmallCheckpointThresholdRotatesJournal) {
  TempDir dir;
  EngineOptions o = Opts(dir.path());
  o.journal_checkpoint_bytes = 4096;
  {
    auto e = OpenOk(o);
    for (int i = 0; i < 60; ++i) {
      ASSERT_TRUE(Publish(*e, 10 + i, std::string(100, 'n') + std::to_string(i),
                          WriteChunk(*e, Pattern(100, i)))
                      .ok());
    }
    EXPECT_LT(e->Stats().journal_bytes, 8192u);
    MetaBatch rm;
    rm.removes.push_back(10);
    ASSERT_TRUE(e->Apply(rm).ok());
  }
  auto e = OpenOk(o);
  auto recs = e->Records();
  EXPECT_EQ(recs.size(), 59u);
  EXPECT_EQ(ReadAll(*e, FindLayout(recs, 69)), Pattern(100, 59));
}

TEST(LocalEngineTest, SecondOpenIsBusy) {
  TempDir dir;
  auto e = OpenOk(Opts(dir.path()));
  auto second = LocalEngine::Open(Opts(dir.path()));
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().err(), EBUSY);
  EXPECT_NE(second.status().message().find("in use"), std::string::npos);
}

TEST(LocalEngineTest, BadOptionsAreEinval) {
  TempDir dir;
  EngineOptions o = Opts(dir.path());
  o.segment_size = 1000;
  EXPECT_EQ(LocalEngine::Open(o).status().err(), EINVAL);
  o = Opts(dir.path(), 0);
  EXPECT_EQ(LocalEngine::Open(o).status().err(), EINVAL);
  o = Opts("");
  EXPECT_EQ(LocalEngine::Open(o).status().err(), EINVAL);
}

TEST(LocalEngineTest, NewDataDirRefusesADeviceOfAnotherEngine) {
  TempDir dir, dir2;
  EngineOptions o = Opts(dir.path(), 0);
  o.devices = {{dir.path() + "/a.dev", 8 * kMiB}};
  { ASSERT_TRUE(OpenOk(o)); }
  o.data_dir = dir2.path();  // same device, a data directory without its journal
  auto r = LocalEngine::Open(o);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().err(), EEXIST);
}

// A child process publishes with durability=close and dies without closing the engine (no
// checkpoint, no clean shutdown): every Apply that returned must survive, readable.
TEST(LocalEngineTest, CrashAfterDurableApplyKeepsIt) {
  TempDir dir;
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    auto e = LocalEngine::Open(Opts(dir.path()));
    if (!e.ok()) ::_exit(2);
    for (int i = 0; i < 5; ++i) {
      auto w = std::move((*e)->NewWriter(nullptr)).value();
      auto d = Pattern(kMiB + 1000 * i, i);
      if (!w->Write(0, d.data(), d.size()).ok()) ::_exit(3);
      auto l = w->Finish();
      if (!l.ok() || !Publish(**e, 10 + i, "c", *l).ok()) ::_exit(4);
    }
    ::_exit(0);  // a crash: destructors, checkpoint and flock release never run normally
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  ASSERT_EQ(WEXITSTATUS(status), 0);
  auto e = OpenOk(Opts(dir.path()));
  ASSERT_TRUE(e);
  auto recs = e->Records();
  ASSERT_EQ(recs.size(), 5u);
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(ReadAll(*e, FindLayout(recs, 10 + i)), Pattern(kMiB + 1000 * i, i));
  }
  EXPECT_EQ(e->Stats().used_bytes, 5 * kMiB + 4 * 4096);  // chunk 0 has no tail segment
}

// A crash in the middle of a journal append leaves a torn record at the end of the journal:
// reopening cuts it off and keeps every record before it.
TEST(LocalEngineTest, TornJournalTailAfterCrashIsCutAtOpen) {
  TempDir dir;
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    auto e = LocalEngine::Open(Opts(dir.path()));
    if (!e.ok()) ::_exit(2);
    for (int i = 0; i < 3; ++i) {
      auto w = std::move((*e)->NewWriter(nullptr)).value();
      if (!w->Write(0, "abc", 3).ok()) ::_exit(3);
      auto l = w->Finish();
      if (!l.ok() || !Publish(**e, 10 + i, "x", *l).ok()) ::_exit(4);
    }
    ::_exit(0);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  std::string journal;
  for (const auto& ent : std::filesystem::directory_iterator(dir.path())) {
    if (ent.path().filename().string().rfind("journal-", 0) == 0) journal = ent.path();
  }
  ASSERT_FALSE(journal.empty());
  const auto valid = std::filesystem::file_size(journal);
  {
    int fd = ::open(journal.c_str(), O_WRONLY | O_APPEND);
    ASSERT_GE(fd, 0);
    // A record header promising 32 bytes, followed by fewer: a torn append.
    ASSERT_EQ(::write(fd, "\x20\x00\x00\x00\x01\x00\x00\x00torn", 12), 12);
    ::close(fd);
  }
  auto e = OpenOk(Opts(dir.path()));
  ASSERT_TRUE(e);
  EXPECT_EQ(e->Records().size(), 3u);
  EXPECT_EQ(std::filesystem::file_size(journal), valid);
  ASSERT_TRUE(Publish(*e, 20, "after", WriteChunk(*e, Pattern(10, 1))).ok());
  e.reset();
  e = OpenOk(Opts(dir.path()));
  EXPECT_EQ(e->Records().size(), 4u);
}

}  // namespace
}  // namespace kvfs
