// A store whose file system filled up: a journal write fails with ENOSPC, the store undoes the
// changes that never became durable and refuses more (EROFS), keeps trying in the background,
// and takes changes again by itself once a checkpoint fits. Nothing of the undone changes comes
// back, neither to a caller still waiting for one nor after a reopen. (A failure that is not
// ENOSPC stays until a restart: group_commit_test.cc.)
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "fillable_fs.h"
#include "kvfs/local_engine.h"
#include "root_records.h"
#include "temp_dir.h"

namespace kvfs {
namespace {

using testing::FillableFileSystem;
using testing::Names;
using testing::RootRecord;
using testing::SmallChunk;
using testing::TempDir;

EngineOptions Opts(const std::string& dir, std::shared_ptr<FileSystem> fs = nullptr) {
  EngineOptions o = testing::SmallEngineOptions(dir);
  o.no_space_retry_ms = 5;
  o.file_system = std::move(fs);
  return o;
}

template <typename Pred>
bool WaitFor(Pred pred) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (!pred()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return true;
}

std::vector<std::string> Files(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    names.push_back(e.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

TEST(NoSpace, TheStoreTakesChangesAgainOnceTheFileSystemHasRoom) {
  TempDir dir;
  auto fs = std::make_shared<FillableFileSystem>();
  ObjectId a = 0, b = 0, c = 0;
  {
    auto engine = LocalEngine::Open(Opts(dir.path(), fs));
    ASSERT_TRUE(engine.ok()) << engine.status().ToString();
    ChunkStore& store = **engine;
    a = store.NewId();
    MetaBatch first;
    first.puts.push_back(RootRecord(a, "a", SmallChunk(store, 'a')));
    ASSERT_TRUE(store.Apply(first).ok());
    const std::vector<std::string> files = Files(dir.path());

    fs->full = true;
    b = store.NewId();
    MetaBatch lost;
    lost.puts.push_back(RootRecord(b, "b", SmallChunk(store, 'b')));
    auto token = store.Submit(lost);
    ASSERT_TRUE(token.ok()) << token.status().ToString();
    // Its caller waits only later, after the store has resumed (below).
    ASSERT_TRUE(WaitFor([&] { return !store.Stats().read_only.empty(); }));
    MetaBatch refused;
    refused.puts.push_back(RootRecord(store.NewId(), "refused"));
    Status st = store.Apply(refused);
    EXPECT_EQ(st.err(), EROFS) << st.ToString();
    EXPECT_NE(st.message().find("once the file system"), std::string::npos) << st.ToString();
    EXPECT_NE(store.Stats().read_only.find("no space"), std::string::npos)
        << store.Stats().read_only;
    // It keeps trying while the disk is full. Where the file system cannot say how much is
    // free, a try writes until it fails and leaves no file behind (room for one new journal's
    // header, none for the checkpoint after it).
    fs->report_free = false;
    fs->room = 16;
    const int refused_before = fs->refused.load();
    ASSERT_TRUE(WaitFor([&] { return fs->refused.load() >= refused_before + 3; }));
    EXPECT_EQ(Files(dir.path()), files);
    // Where it can, a try without room for the checkpoint writes nothing at all: it would
    // fill the file system to the last block for every other program on it.
    fs->report_free = true;
    const int asked = fs->free_asked.load();
    ASSERT_TRUE(WaitFor([&] { return fs->free_asked.load() >= asked + 1; }));
    const int refused_now = fs->refused.load();
    ASSERT_TRUE(WaitFor([&] { return fs->free_asked.load() >= asked + 3; }));
    EXPECT_EQ(fs->refused.load(), refused_now);
    EXPECT_EQ(Files(dir.path()), files);

    fs->full = false;
    c = store.NewId();
    MetaBatch after;
    after.puts.push_back(RootRecord(c, "c", SmallChunk(store, 'c')));
    ASSERT_TRUE(WaitFor([&] { return store.Apply(after).err() != EROFS; }));
    EXPECT_EQ(store.Stats().read_only, "");
    // The undone change stays undone for its caller, though newer changes are durable now.
    Status late = store.AwaitDurable(*token);
    EXPECT_EQ(late.err(), EROFS) << late.ToString();
    EXPECT_EQ(Names(store), (std::map<ObjectId, std::string>{{a, "a"}, {c, "c"}}));
  }
  auto reopened = LocalEngine::Open(Opts(dir.path()));
  ASSERT_TRUE(reopened.ok()) << reopened.status().ToString();
  EXPECT_EQ(Names(**reopened), (std::map<ObjectId, std::string>{{a, "a"}, {c, "c"}}));
  for (const auto& r : (*reopened)->Records()) {
    std::vector<char> buf(r.layout->size);
    auto n = (*reopened)->Read(r.layout, 0, buf.data(), buf.size());
    ASSERT_TRUE(n.ok()) << n.status().ToString();
    EXPECT_EQ(buf[0], r.name[0]);
    EXPECT_EQ(buf.back(), r.name[0]);
  }
}

}  // namespace
}  // namespace kvfs
