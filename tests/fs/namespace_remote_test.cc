// Namespace changes that arrive from the shared store (other nodes' commits, re-reads and
// rollbacks): kernel notifications, names held once by their directories, and revisions that
// never take the tree back.
#include <fcntl.h>
#include <gtest/gtest.h>

#include <condition_variable>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "memory_store.h"
#include "namespace.h"
#include "namespace_remote_helpers.h"

namespace kvfs::fs {
namespace {

TEST(NamespaceRemoteTest, NotifiesOnlyWhatTheKernelKnows) {
  MemoryStore store;
  RecordingSink sink;
  Namespace ns(&store, &sink);
  ASSERT_TRUE(ns.Load().ok());
  const ObjectId kDir = (7ull << 48) | 1, kF = (7ull << 48) | 2, kG = (7ull << 48) | 3,
                 kH = (7ull << 48) | 4;
  using Entry = std::pair<uint64_t, std::string>;
  // A name in the root (always known): its negative dentry, if any, must go.
  ns.ApplyRemoteChanges({RemoteRecord(kDir, kRootId, "d", ObjectType::kDirectory, 10)}, {});
  EXPECT_EQ(sink.entries, (std::vector<Entry>{{kRootId, "d"}}));
  sink.Clear();
  // d was never looked up here: the kernel has no dentries under it, nothing to notify.
  ns.ApplyRemoteChanges({RemoteRecord(kF, kDir, "f", ObjectType::kFile, 11)}, {});
  EXPECT_TRUE(sink.entries.empty());
  EXPECT_TRUE(sink.inodes.empty());
  // Once the kernel knows d, a new name there is notified (a negative dentry may hide it).
  ASSERT_TRUE(ns.Lookup(kRootId, "d").ok());
  ns.ApplyRemoteChanges({RemoteRecord(kG, kDir, "g", ObjectType::kFile, 12)}, {});
  EXPECT_EQ(sink.entries, (std::vector<Entry>{{kDir, "g"}}));
  sink.Clear();
  // f's attributes change: not known to the kernel, nothing; once looked up, its inode.
  ObjectRecord f2 = RemoteRecord(kF, kDir, "f", ObjectType::kFile, 13);
  f2.mode = 0600;
  ns.ApplyRemoteChanges({f2}, {});
  EXPECT_TRUE(sink.inodes.empty());
  ASSERT_TRUE(ns.Lookup(kDir, "f").ok());
  ObjectRecord f3 = RemoteRecord(kF, kDir, "f", ObjectType::kFile, 14);
  f3.mode = 0640;
  ns.ApplyRemoteChanges({f3}, {});
  EXPECT_EQ(sink.inodes, (std::vector<std::pair<uint64_t, bool>>{{kF, false}}));
  sink.Clear();
  // A removal of a known name is notified; after the kernel forgets d, names there are not.
  ns.ApplyRemoteChanges({}, {kG});
  EXPECT_EQ(sink.entries, (std::vector<Entry>{{kDir, "g"}}));
  sink.Clear();
  ns.Forget(kF, 1);
  ns.Forget(kDir, 1);
  ns.ApplyRemoteChanges({RemoteRecord(kH, kDir, "h", ObjectType::kFile, 15)}, {kF});
  EXPECT_TRUE(sink.entries.empty());
  EXPECT_TRUE(sink.inodes.empty());
}

// A name lives once, in its directory: an inode fed by remote records, reloads and rollbacks
// keeps no copy aside (at a million names that copy was ~80 bytes each), and a name kept for
// an unlinked inode goes with the inode.
TEST(NamespaceRemoteTest, InodesKeepNoCopyOfTheirNames) {
  MemoryStore store;
  Namespace ns(&store, nullptr);
  ASSERT_TRUE(ns.Load().ok());
  const std::string tail(60, 'n');
  std::vector<ObjectRecord> puts;
  for (uint64_t i = 1; i <= 100; ++i)
    puts.push_back(RemoteRecord((5ull << 48) | i, kRootId, std::to_string(i) + tail,
                                ObjectType::kFile, 10 + i));
  ns.ApplyRemoteChanges(puts, {});
  EXPECT_EQ(ns.KeptNameCount(), 0u);
  for (auto& r : puts) {
    r.revision += 1000;  // a newer version of each, same name
    r.mode = 0600;
  }
  ns.ApplyRemoteChanges(puts, {});
  EXPECT_EQ(ns.KeptNameCount(), 0u);
  ns.RestoreStoreRecord(puts[0].id, &puts[0]);
  EXPECT_EQ(ns.KeptNameCount(), 0u);
  ASSERT_EQ(ns.Record(puts[7].id)->name, "8" + tail);
  // A name that goes with its inode still open keeps it in the record, for logs.
  auto e = ns.Lookup(kRootId, "9" + tail);
  ASSERT_TRUE(e.ok());
  ns.ApplyRemoteChanges({}, {puts[8].id});
  EXPECT_EQ(ns.KeptNameCount(), 1u);
  EXPECT_EQ(ns.Record(puts[8].id)->name, "9" + tail);
  ns.Forget(puts[8].id, 1);  // the kernel lets go: the inode and its kept name leave memory
  EXPECT_EQ(ns.KeptNameCount(), 0u);
  EXPECT_FALSE(ns.Record(puts[8].id).ok());
}

// A peer removes a directory that holds a file this node is still writing (its name is not in
// the shared namespace yet, so the removal was allowed): the directory goes from memory, and
// the file must still publish under its own name rather than one that went with the directory.
TEST(NamespaceRemoteTest, AFileOutlivingItsDirectoryKeepsItsName) {
  MemoryStore store;
  Namespace ns(&store, nullptr);
  ASSERT_TRUE(ns.Load().ok());
  const ObjectId kDir = (6ull << 48) | 1;
  ns.ApplyRemoteChanges({RemoteRecord(kDir, kRootId, "d", ObjectType::kDirectory, 10)}, {});
  auto created = ns.Create(kDir, "local-file", 0644, O_WRONLY | O_CREAT, 0, 0);
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  auto [entry, fh] = *created;
  ns.ApplyRemoteChanges({}, {kDir});
  EXPECT_FALSE(ns.Lookup(kRootId, "d").ok());
  ASSERT_TRUE(ns.Write(fh, 0, "x", 1).ok());
  ASSERT_TRUE(ns.Flush(fh).ok());
  ASSERT_TRUE(ns.Release(fh).ok());
  auto rec = ns.Record(entry.attr.st_ino);
  ASSERT_TRUE(rec.ok());
  EXPECT_EQ(rec->name, "local-file");
  EXPECT_EQ(rec->parent, kDir);
  for (const ObjectRecord& r : store.Records()) {
    if (r.id != entry.attr.st_ino) continue;
    EXPECT_EQ(r.name, "local-file");
  }
}

// A rolled-back batch makes the store report its objects' records; one read before the watch
// delivered a newer version of the same object must not take the tree back to the older one
// (a node then showed an O_EXCL winner's empty file forever).
TEST(NamespaceRemoteTest, AResetToAnOlderRevisionKeepsTheNewerRecord) {
  MemoryStore store;
  RecordingSink sink;
  Namespace ns(&store, &sink);
  ASSERT_TRUE(ns.Load().ok());
  const ObjectId kF = (9ull << 48) | 1;
  ObjectRecord empty = RemoteRecord(kF, kRootId, "lock", ObjectType::kFile, 10);
  ObjectRecord written = RemoteRecord(kF, kRootId, "lock", ObjectType::kFile, 12);
  written.mode = 0600;  // stands for the published content
  ns.ApplyRemoteChanges({empty}, {});
  ns.ApplyRemoteChanges({written}, {});
  ns.RestoreStoreRecord(kF, &empty);  // read at revision 10, delivered late
  auto e = ns.Lookup(kRootId, "lock");
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->attr.st_mode & 07777, 0600u);
  // A newer state from the store still wins.
  ObjectRecord newer = RemoteRecord(kF, kRootId, "lock", ObjectType::kFile, 14);
  newer.mode = 0640;
  ns.RestoreStoreRecord(kF, &newer);
  auto e2 = ns.Lookup(kRootId, "lock");
  ASSERT_TRUE(e2.ok());
  EXPECT_EQ(e2->attr.st_mode & 07777, 0640u);
}

// A cluster node resets the objects of a refused change from a read of etcd, on its watch
// thread, some time after the refusal. A change the node made meanwhile is newer than that
// read: the reset must not move a name off it (the node showed no file where every other node
// showed the one this node had renamed there, for good: the watch skips a node's own commits).
TEST(NamespaceRemoteTest, AResetGivesWayToLaterLocalChangesAndNewerCommits) {
  SharedMemoryStore store;
  RecordingSink sink;
  Namespace ns(&store, &sink);
  ASSERT_TRUE(ns.Load().ok());
  const ObjectId kX = (9ull << 48) | 7, kA = (9ull << 48) | 8;
  const ObjectRecord x_at_f7 = RemoteRecord(kX, kRootId, "f7", ObjectType::kFile, 10);
  ns.ApplyRemoteChanges({x_at_f7}, {});
  ns.ApplyRemoteChanges({RemoteRecord(kA, kRootId, ".tmp", ObjectType::kFile, 11)}, {});
  auto x = ns.Lookup(kRootId, "f7");
  ASSERT_TRUE(x.ok());
  // The change the reset will answer (seq 1): say etcd did not take it.
  SetAttrRequest chmod;
  chmod.mode = 0600;
  ASSERT_TRUE(ns.SetAttr(x->attr.st_ino, chmod, nullptr).ok());
  // Then this node renames A over f7 (seq 2), which etcd takes.
  ASSERT_TRUE(ns.Rename(kRootId, ".tmp", kRootId, "f7", 0).ok());
  auto is_a = [&](const char* name) {
    auto e = ns.Lookup(kRootId, name);
    return e.ok() && e->attr.st_ino == kA;
  };
  ASSERT_TRUE(is_a("f7"));
  // The reset of X for the first change, read before the rename committed: f7 stays A's.
  ns.RestoreStoreRecord(kX, &x_at_f7, {/*as_of=*/11, /*seq=*/1});
  EXPECT_TRUE(is_a("f7"));
  // A reset that answers the rename itself is forced: the rename was refused after all.
  ns.RestoreStoreRecord(kA, nullptr, {12, 2});
  ns.RestoreStoreRecord(kX, &x_at_f7, {12, 2});
  auto back = ns.Lookup(kRootId, "f7");
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->attr.st_ino, kX);
  // A holder that reached this node in a commit after the read keeps its name.
  const ObjectId kB = (9ull << 48) | 9;
  ns.ApplyRemoteChanges({RemoteRecord(kB, kRootId, "f9", ObjectType::kFile, 20)}, {});
  const ObjectRecord x_at_f9 = RemoteRecord(kX, kRootId, "f9", ObjectType::kFile, 15);
  ns.RestoreStoreRecord(kX, &x_at_f9, {/*as_of=*/18, /*seq=*/2});
  auto b = ns.Lookup(kRootId, "f9");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->attr.st_ino, kB);
}

// This node's own commit reaches its tree before the watch delivers the commits before it
// (NoteCommitted), so an older commit of another node can name a file that a newer commit of
// this one holds: the name stays with the newer holder. (A node lost its own file that way for
// good: the older record took the name, then the commit that displaced it removed it, and the
// watch skips the node's own commit.)
TEST(NamespaceRemoteTest, AnOlderRecordDoesNotTakeANameANewerCommitHolds) {
  SharedMemoryStore store;
  RecordingSink sink;
  Namespace ns(&store, &sink);
  ASSERT_TRUE(ns.Load().ok());
  const ObjectId kA = (9ull << 48) | 21, kC = (9ull << 48) | 22;
  ns.ApplyRemoteChanges({RemoteRecord(kA, kRootId, "f4", ObjectType::kFile, 20)}, {});
  ns.ApplyRemoteChanges({RemoteRecord(kC, kRootId, "f4", ObjectType::kFile, 15)}, {});
  auto e = ns.Lookup(kRootId, "f4");
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->attr.st_ino, kA);
  // A newer record takes it, as before.
  ns.ApplyRemoteChanges({RemoteRecord(kC, kRootId, "f4", ObjectType::kFile, 25)}, {});
  auto e2 = ns.Lookup(kRootId, "f4");
  ASSERT_TRUE(e2.ok());
  EXPECT_EQ(e2->attr.st_ino, kC);
}

// A shared store whose commits wait until the test lets them go, answering with a revision (or
// a refusal): the fs's change is on its way meanwhile.
class GatedSharedStore : public SharedMemoryStore {
 public:
  Result<Committed> AwaitCommitted(uint64_t token) override {
    std::unique_lock lock(mu_);
    waiting_ = true;
    cv_.notify_all();
    cv_.wait(lock, [&] { return answer_.has_value(); });
    Result<Committed> r = *answer_;
    answer_.reset();
    waiting_ = false;
    lock.unlock();
    KVFS_RETURN_IF_ERROR(MemoryStore::AwaitCommitted(token).status());
    return r;
  }
  void WaitUntilWaiting() {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return waiting_; });
  }
  void Answer(Result<Committed> r) {
    std::lock_guard lock(mu_);
    answer_ = std::move(r);
    cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool waiting_ = false;
  std::optional<Result<Committed>> answer_;
};

// Another node's record that names a file this node is renaming onto, delivered while the
// rename is on its way to etcd, waits for the rename's answer: a commit keeps the name here
// (it took the name from that record), a refusal gives it to the record. (Taking it at once
// left the node without the file once the rename committed: the record that took the name was
// then removed as displaced.)
TEST(NamespaceRemoteTest, ARecordWaitsForTheAnswerOfAChangeOnItsWayToItsName) {
  for (bool commits : {true, false}) {
    SCOPED_TRACE(commits ? "the rename commits" : "the rename is refused");
    GatedSharedStore store;
    RecordingSink sink;
    Namespace ns(&store, &sink);
    ASSERT_TRUE(ns.Load().ok());
    const ObjectId kA = (9ull << 48) | 31, kC = (9ull << 48) | 32;
    ns.ApplyRemoteChanges({RemoteRecord(kA, kRootId, ".tmp", ObjectType::kFile, 10)}, {});
    std::thread renamer([&] { (void)ns.Rename(kRootId, ".tmp", kRootId, "f6", 0); });
    store.WaitUntilWaiting();
    ns.ApplyRemoteChanges({RemoteRecord(kC, kRootId, "f6", ObjectType::kFile, 12)}, {});
    auto during = ns.Lookup(kRootId, "f6");
    ASSERT_TRUE(during.ok());
    EXPECT_EQ(during->attr.st_ino, kA);
    Committed c;
    c.revision = 15;
    if (commits) {
      store.Answer(c);
    } else {
      store.Answer(Status::Error(EROFS, "etcd is unreachable"));
    }
    renamer.join();
    auto after = ns.Lookup(kRootId, "f6");
    ASSERT_TRUE(after.ok());
    EXPECT_EQ(after->attr.st_ino, commits ? kA : kC);
  }
}

// Another node moves directory D onto c, free in etcd, while this node's new file c is on its
// way there (its first publish). D's record waits for the publish's answer, having left its
// old name; the publish is refused, and the file goes once its writer closes (the reset waits
// for that). D must then take c. Before, the record applied again was skipped as already
// applied, and would have waited again for the unpublished file without anything applying it
// once more: D and its subtree were gone from this node for good (the stress run, seed 920).
TEST(NamespaceRemoteTest, ADirectoryWaitingForANewFilesNameTakesItWhenTheFileGoes) {
  GatedSharedStore store;
  RecordingSink sink;
  Namespace ns(&store, &sink);
  ASSERT_TRUE(ns.Load().ok());
  const ObjectId kD = (9ull << 48) | 41, kInner = (9ull << 48) | 42;
  ns.ApplyRemoteChanges({RemoteRecord(kD, kRootId, "b", ObjectType::kDirectory, 10),
                         RemoteRecord(kInner, kD, "inner", ObjectType::kFile, 11)},
                        {});
  auto [entry, fh] = NewFileInWriting(ns, "c", "new");
  ASSERT_NE(fh, nullptr);
  const ObjectId kX = entry.attr.st_ino;
  Status flushed;
  std::thread closer([&, fh = fh] { flushed = ns.Flush(fh); });
  store.WaitUntilWaiting();
  ns.ApplyRemoteChanges({RemoteRecord(kD, kRootId, "c", ObjectType::kDirectory, 12)}, {});
  EXPECT_EQ(ns.Lookup(kRootId, "c")->attr.st_ino, kX);  // the file keeps it meanwhile
  store.Answer(Status::Error(EROFS, "etcd is unreachable"));
  closer.join();
  EXPECT_EQ(flushed.err(), EROFS);
  ns.RestoreStoreRecord(kX, nullptr, {12, 0});  // etcd has no file: after its writer's close
  EXPECT_TRUE(ns.Release(fh).ok());
  auto c = ns.Lookup(kRootId, "c");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->attr.st_ino, kD);
  EXPECT_TRUE(S_ISDIR(c->attr.st_mode));
  EXPECT_TRUE(ns.Lookup(kD, "inner").ok());
  EXPECT_FALSE(ns.Lookup(kRootId, "b").ok());
}

// A write by another uid drops a file's set-id bits in this node's tree (Namespace::Write),
// and its publish carries the mode. Another node's change to the record (an xattr, say),
// applied before that publish, brings the old mode back: the publish must drop the bits again,
// or the new bytes go out set-user-ID under the record every node applies.
TEST(NamespaceRemoteTest, APublishDropsAgainTheSetIdBitsItsWritesDropped) {
  SharedMemoryStore store;
  RecordingSink sink;
  Namespace ns(&store, &sink);
  ASSERT_TRUE(ns.Load().ok());
  const ObjectId kF = (9ull << 48) | 1;
  ObjectRecord tool = RemoteRecord(kF, kRootId, "tool", ObjectType::kFile, 10);
  tool.mode = 06777;
  tool.uid = tool.gid = 1000;
  ns.ApplyRemoteChanges({tool}, {});
  auto e = ns.Lookup(kRootId, "tool");
  ASSERT_TRUE(e.ok());
  const uint64_t ino = e->attr.st_ino;
  auto fh = ns.Open(ino, O_WRONLY);
  ASSERT_TRUE(fh.ok());
  ASSERT_TRUE(ns.Write(*fh, 0, "payload", 7, Caller{65534, 65534, nullptr}).ok());
  EXPECT_EQ(ns.GetAttr(ino)->attr.st_mode & 07777, 0777u);
  ObjectRecord changed_elsewhere = tool;
  changed_elsewhere.revision = 11;
  ns.ApplyRemoteChanges({changed_elsewhere}, {});
  ASSERT_TRUE(ns.Flush(*fh).ok());
  ASSERT_TRUE(ns.Release(*fh).ok());
  EXPECT_EQ(ns.GetAttr(ino)->attr.st_mode & 07777, 0777u);
  bool published = false;
  for (const ObjectRecord& r : store.Records()) {
    if (r.id != kF) continue;
    published = true;
    EXPECT_EQ(r.mode & 07777, 0777u) << "the record other nodes apply";
  }
  EXPECT_TRUE(published);
  // The owner's chmod after such a write decides, as on a local file system.
  SetAttrRequest setid;
  setid.mode = 06777;
  ASSERT_TRUE(ns.SetAttr(ino, setid, nullptr).ok());
  auto again = ns.Open(ino, O_WRONLY);
  ASSERT_TRUE(again.ok());
  ASSERT_TRUE(ns.Write(*again, 0, "p", 1, Caller{65534, 65534, nullptr}).ok());
  EXPECT_EQ(ns.GetAttr(ino)->attr.st_mode & 07777, 0777u);
  SetAttrRequest chmod;
  chmod.mode = 04755;
  ASSERT_TRUE(ns.SetAttr(ino, chmod, nullptr).ok());
  ASSERT_TRUE(ns.Flush(*again).ok());
  ASSERT_TRUE(ns.Release(*again).ok());
  EXPECT_EQ(ns.GetAttr(ino)->attr.st_mode & 07777, 04755u);
}

}  // namespace
}  // namespace kvfs::fs
