// Group commit and journal failures of the local engine: concurrent publishes share journal
// writes + fdatasyncs (counted by StoreStats::journal_commits, no timing), and a failed journal
// write leaves the index exactly as the disk has it (the undone changes are reported to the
// listener) with the store read-only (EROFS) until it is reopened.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "io_fault_injector.h"
#include "kvfs/local_engine.h"
#include "root_records.h"
#include "temp_dir.h"

namespace kvfs {
namespace {

using testing::Names;
using testing::RootRecord;
using testing::SmallChunk;
using testing::TempDir;

EngineOptions Opts(const std::string& dir, std::shared_ptr<IoFaultInjector> faults = nullptr) {
  EngineOptions o = testing::SmallEngineOptions(dir);
  o.no_space_retry_ms = 1;  // a failure other than ENOSPC must not resume however often tried
  o.fault_injector = std::move(faults);
  return o;
}

// Holds the first journal append until `release` is set, so every publisher has queued its
// record behind it: the second append must then carry all of them.
class HoldFirstAppend : public IoFaultInjector {
 public:
  Status BeforeIo(IoRequest& req) override {
    if (!req.journal) return Status::Ok();
    std::unique_lock lock(mu);
    if (appends++ == 0) cv.wait(lock, [&] { return release; });
    return Status::Ok();
  }
  void Release() {
    std::lock_guard lock(mu);
    release = true;
    cv.notify_all();
  }
  std::mutex mu;
  std::condition_variable cv;
  int appends = 0;
  bool release = false;
};

TEST(GroupCommit, ConcurrentPublishesShareOneJournalWrite) {
  TempDir dir;
  auto faults = std::make_shared<HoldFirstAppend>();
  constexpr int kThreads = 8;
  {
    auto engine = LocalEngine::Open(Opts(dir.path(), faults));
    ASSERT_TRUE(engine.ok()) << engine.status().ToString();
    ChunkStore& store = **engine;
    const uint64_t commits_before = store.Stats().journal_commits;
    // The first journal append (whichever record comes first) is held until every thread
    // has queued its publish: those then share the next append.
    std::mutex mu;
    std::condition_variable cv;
    int submitted = 0;
    std::vector<std::thread> threads;
    std::vector<Status> results(kThreads);
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        MetaBatch b;
        b.puts.push_back(RootRecord(store.NewId(), "f" + std::to_string(t),
                                    SmallChunk(store, static_cast<char>('a' + t))));
        auto token = store.Submit(b);
        ASSERT_TRUE(token.ok()) << token.status().ToString();
        {
          std::lock_guard lock(mu);
          ++submitted;
        }
        cv.notify_all();
        results[t] = store.AwaitDurable(*token);  // returns only once the record is durable
      });
    }
    {
      std::unique_lock lock(mu);
      cv.wait(lock, [&] { return submitted == kThreads; });
    }
    faults->Release();
    for (auto& th : threads) th.join();
    for (const Status& st : results) EXPECT_TRUE(st.ok()) << st.ToString();
    // 8 publishes (plus an id watermark) in at most 2 journal write + fdatasync rounds.
    const uint64_t commits = store.Stats().journal_commits - commits_before;
    EXPECT_LE(commits, 2u);
    EXPECT_LT(commits, static_cast<uint64_t>(kThreads));
  }
  // Every acknowledged publish is on disk.
  auto reopened = LocalEngine::Open(Opts(dir.path()));
  ASSERT_TRUE(reopened.ok()) << reopened.status().ToString();
  auto names = Names(**reopened);
  EXPECT_EQ(names.size(), static_cast<size_t>(kThreads));
  for (const auto& r : (*reopened)->Records()) {
    ASSERT_TRUE(r.layout);
    std::vector<char> buf(r.layout->size);
    auto n = (*reopened)->Read(r.layout, 0, buf.data(), buf.size());
    ASSERT_TRUE(n.ok()) << n.status().ToString();
    const char want = static_cast<char>('a' + (r.name[1] - '0'));
    EXPECT_EQ(std::count(buf.begin(), buf.end(), want), static_cast<long>(buf.size())) << r.name;
  }
}

// Fails (or tears) every journal append once armed.
class FailJournal : public IoFaultInjector {
 public:
  Status BeforeIo(IoRequest& req) override {
    if (!req.journal || !armed) return Status::Ok();
    if (tear) {
      req.len /= 2;
      return Status::Ok();
    }
    return Status::IoError("injected journal write failure");
  }
  std::atomic<bool> armed{false};
  bool tear = false;
};

struct Undone : StoreListener {
  void OnRolledBack(ObjectId id, const ObjectRecord* rec, ResetOrigin) override {
    std::lock_guard lock(mu);
    last[id] = rec ? rec->name : std::string("<none>");
  }
  std::mutex mu;
  std::map<ObjectId, std::string> last;  // the final state reported per id
};

void FailedJournalWriteUndoesAndGoesReadOnly(bool tear) {
  TempDir dir;
  auto faults = std::make_shared<FailJournal>();
  faults->tear = tear;
  Undone listener;
  ObjectId a = 0, b = 0, c = 0;
  {
    auto engine = LocalEngine::Open(Opts(dir.path(), faults));
    ASSERT_TRUE(engine.ok()) << engine.status().ToString();
    ChunkStore& store = **engine;
    store.SetListener(&listener);
    a = store.NewId();
    c = store.NewId();
    MetaBatch first;
    first.puts.push_back(RootRecord(a, "a", SmallChunk(store, 'a')));
    first.puts.push_back(RootRecord(c, "c"));
    ASSERT_TRUE(store.Apply(first).ok());

    faults->armed = true;
    // A new file, a rename of `a` and a remove of `c`, all in one failing commit.
    b = store.NewId();
    MetaBatch publish;
    publish.puts.push_back(RootRecord(b, "b", SmallChunk(store, 'b')));
    LayoutRef a_layout;
    for (const auto& r : store.Records())
      if (r.id == a) a_layout = r.layout;
    auto renamed = RootRecord(a, "a-renamed", a_layout);
    MetaBatch rename;
    rename.puts.push_back(renamed);
    rename.removes.push_back(c);
    auto t1 = store.Submit(publish);
    ASSERT_TRUE(t1.ok()) << t1.status().ToString();
    // The first commit may fail before the second is submitted: the store, read-only by then,
    // refuses it at once with the same error.
    auto t2 = store.Submit(rename);
    Status s1 = store.AwaitDurable(*t1);
    Status s2 = t2.ok() ? store.AwaitDurable(*t2) : t2.status();
    EXPECT_EQ(s1.err(), EROFS) << s1.ToString();
    EXPECT_EQ(s2.err(), EROFS) << s2.ToString();
    EXPECT_NE(s1.message().find("journal write failed"), std::string::npos) << s1.ToString();

    // The index says what the disk says: a under its old name, c back, no b.
    EXPECT_EQ(Names(store), (std::map<ObjectId, std::string>{{a, "a"}, {c, "c"}}));
    EXPECT_EQ(store.Stats().files, 1u);
    {
      std::lock_guard lock(listener.mu);
      // The rename and remove were undone too, unless the store refused them outright.
      std::map<ObjectId, std::string> undone{{b, "<none>"}};
      if (t2.ok()) undone.insert({{a, "a"}, {c, "c"}});
      EXPECT_EQ(listener.last, undone);
    }
    // Read-only from now on, with a clear error; reads of durable data still work. An EIO is
    // not a full file system: nothing resumes the store, however long it waits.
    faults->armed = false;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    MetaBatch later;
    later.puts.push_back(RootRecord(store.NewId(), "later"));
    Status st = store.Apply(later);
    EXPECT_EQ(st.err(), EROFS) << st.ToString();
    EXPECT_NE(st.message().find("read-only"), std::string::npos) << st.ToString();
    EXPECT_NE(st.message().find("restart to recover"), std::string::npos) << st.ToString();
    EXPECT_NE(store.Stats().read_only.find("injected"), std::string::npos);
    for (const auto& r : store.Records()) {
      if (r.id != a) continue;
      std::vector<char> buf(r.layout->size);
      auto n = store.Read(r.layout, 0, buf.data(), buf.size());
      ASSERT_TRUE(n.ok()) << n.status().ToString();
      EXPECT_EQ(buf[0], 'a');
    }
    store.SetListener(nullptr);
  }
  // Reopened without faults: exactly the durable state, and writable again.
  auto reopened = LocalEngine::Open(Opts(dir.path()));
  ASSERT_TRUE(reopened.ok()) << reopened.status().ToString();
  EXPECT_EQ(Names(**reopened), (std::map<ObjectId, std::string>{{a, "a"}, {c, "c"}}));
  MetaBatch again;
  again.puts.push_back(RootRecord((*reopened)->NewId(), "again"));
  EXPECT_TRUE((*reopened)->Apply(again).ok());
}

TEST(JournalFailure, FailedWriteUndoesChangesAndGoesReadOnly) {
  FailedJournalWriteUndoesAndGoesReadOnly(false);
}

TEST(JournalFailure, TornWriteUndoesChangesAndGoesReadOnly) {
  FailedJournalWriteUndoesAndGoesReadOnly(true);
}

}  // namespace
}  // namespace kvfs
