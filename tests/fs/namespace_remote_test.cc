// Namespace changes that arrive from the shared store (other nodes' commits, re-reads and
// rollbacks): kernel notifications, names held once by their directories, and revisions that
// never take the tree back.
#include <fcntl.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "memory_store.h"
#include "namespace.h"

namespace kvfs::fs {
namespace {

// Remote changes notify the kernel only about what it may have cached: every node applies every
// change of the cluster, mostly in directories it never looked at.
class RecordingSink : public InvalidationSink {
 public:
  void InvalidateInode(uint64_t ino, bool data) override { inodes.emplace_back(ino, data); }
  void InvalidateEntry(uint64_t parent, const std::string& name) override {
    entries.emplace_back(parent, name);
  }
  void Clear() {
    inodes.clear();
    entries.clear();
  }
  std::vector<std::pair<uint64_t, bool>> inodes;
  std::vector<std::pair<uint64_t, std::string>> entries;
};

ObjectRecord RemoteRecord(ObjectId id, ObjectId parent, const std::string& name, ObjectType type,
                          uint64_t revision) {
  ObjectRecord r;
  r.id = id;
  r.parent = parent;
  r.name = name;
  r.type = type;
  r.mode = type == ObjectType::kDirectory ? 0755 : 0644;
  r.revision = revision;
  return r;
}

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

}  // namespace
}  // namespace kvfs::fs
