// Peer changes applied to the fs namespace (namespace_remote.cc): names appear, move, get new
// versions and go, in any arrival order, and the kernel is told about each stale name or inode.
// Over MemoryStore with a sink that records what the kernel would be told.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "memory_store.h"
#include "namespace.h"

namespace kvfs::fs {
namespace {

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

ObjectRecord Dir(ObjectId id, ObjectId parent, const std::string& name) {
  ObjectRecord r;
  r.id = id;
  r.parent = parent;
  r.name = name;
  r.type = ObjectType::kDirectory;
  r.mode = 0755;
  return r;
}

ObjectRecord File(ObjectId id, ObjectId parent, const std::string& name, uint64_t size) {
  ObjectRecord r;
  r.id = id;
  r.parent = parent;
  r.name = name;
  r.type = ObjectType::kFile;
  r.mode = 0644;
  auto layout = std::make_shared<Layout>();
  layout->size = size;
  r.layout = layout;
  return r;
}

using Entry = std::pair<uint64_t, std::string>;

class NamespaceRemoteTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(ns_.Load().ok()); }
  bool Has(uint64_t parent, const std::string& name) { return ns_.Lookup(parent, name).ok(); }
  MemoryStore store_;
  RecordingSink sink_;
  Namespace ns_{&store_, &sink_};
};

TEST_F(NamespaceRemoteTest, ChildBeforeParentAppearsWithItsParent) {
  const ObjectId dir = (2ull << 48) | 7, file = (1ull << 48) | 3;  // file id < dir id
  ns_.ApplyRemotePut(File(file, dir, "chunk", 100));
  EXPECT_FALSE(Has(kRootId, "d"));
  EXPECT_TRUE(sink_.entries.empty());
  ns_.ApplyRemotePut(Dir(dir, kRootId, "d"));
  EXPECT_TRUE(Has(kRootId, "d"));
  ASSERT_TRUE(Has(dir, "chunk"));
  EXPECT_EQ(ns_.GetAttr(file)->attr.st_size, 100);
  // Both names announced, so cached negative dentries go.
  EXPECT_EQ(sink_.entries, (std::vector<Entry>{{kRootId, "d"}, {dir, "chunk"}}));
}

TEST_F(NamespaceRemoteTest, RenameNewVersionAttrsAndRemove) {
  const ObjectId id = (1ull << 48) | 9;
  ObjectRecord r = File(id, kRootId, "a", 10);
  ns_.ApplyRemotePut(r);
  ASSERT_TRUE(Has(kRootId, "a"));
  sink_.Clear();
  // The same record again changes nothing and tells the kernel nothing.
  ns_.ApplyRemotePut(r);
  EXPECT_TRUE(sink_.entries.empty());
  EXPECT_TRUE(sink_.inodes.empty());
  // Rename: the old and the new name are stale.
  r.name = "b";
  ns_.ApplyRemotePut(r);
  EXPECT_FALSE(Has(kRootId, "a"));
  EXPECT_TRUE(Has(kRootId, "b"));
  EXPECT_EQ(sink_.entries, (std::vector<Entry>{{kRootId, "a"}, {kRootId, "b"}}));
  EXPECT_TRUE(sink_.inodes.empty());
  sink_.Clear();
  // New version: pages and attributes.
  auto v2 = std::make_shared<Layout>();
  v2->size = 20;
  r.layout = v2;
  ns_.ApplyRemotePut(r);
  EXPECT_EQ(ns_.GetAttr(id)->attr.st_size, 20);
  EXPECT_EQ(sink_.inodes, (std::vector<std::pair<uint64_t, bool>>{{id, true}}));
  sink_.Clear();
  // Attributes only.
  r.mode = 0600;
  ns_.ApplyRemotePut(r);
  EXPECT_EQ(ns_.GetAttr(id)->attr.st_mode & 07777, 0600u);
  EXPECT_EQ(sink_.inodes, (std::vector<std::pair<uint64_t, bool>>{{id, false}}));
  sink_.Clear();
  // Remove: the name goes and is announced; a second remove is a no-op.
  ns_.ApplyRemoteRemove(id);
  EXPECT_FALSE(Has(kRootId, "b"));
  EXPECT_EQ(sink_.entries, (std::vector<Entry>{{kRootId, "b"}}));
  sink_.Clear();
  ns_.ApplyRemoteRemove(id);
  EXPECT_TRUE(sink_.entries.empty());
}

TEST_F(NamespaceRemoteTest, HigherIdKeepsAContestedName) {
  const ObjectId low = (1ull << 48) | 1, high = (2ull << 48) | 1;
  ns_.ApplyRemotePut(File(high, kRootId, "x", 1));
  ns_.ApplyRemotePut(File(low, kRootId, "x", 2));  // loses: the name stays with `high`
  auto e = ns_.Lookup(kRootId, "x");
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->attr.st_ino, high);
  ns_.ApplyRemoteRemove(high);
  ns_.ApplyRemotePut(File(low, kRootId, "x", 2));
  ns_.ApplyRemotePut(File(high, kRootId, "x", 1));  // wins over the lower id
  e = ns_.Lookup(kRootId, "x");
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->attr.st_ino, high);
}

TEST_F(NamespaceRemoteTest, ReplaceLayoutOnlySwapsTheNamedLayout) {
  const ObjectId id = (1ull << 48) | 4;
  ObjectRecord r = File(id, kRootId, "f", 5);
  ns_.ApplyRemotePut(r);
  auto other = std::make_shared<Layout>();
  other->size = 5;
  ns_.ReplaceLayout(id, other, nullptr);  // not the layout it holds: ignored
  EXPECT_EQ(ns_.Record(id)->layout, r.layout);
  ns_.ReplaceLayout(id, r.layout, other);
  EXPECT_EQ(ns_.Record(id)->layout.get(), other.get());
}

TEST_F(NamespaceRemoteTest, LinksComeAndGoWithTheRecord) {
  const ObjectId dir = (1ull << 48) | 2, id = (1ull << 48) | 5;
  ns_.ApplyRemotePut(Dir(dir, kRootId, "d"));
  ObjectRecord r = File(id, kRootId, "a", 10);
  ns_.ApplyRemotePut(r);
  sink_.Clear();
  // A link made on the peer: the new name appears and the inode's nlink is stale.
  r.extra_links = {{dir, "b"}};
  ns_.ApplyRemotePut(r);
  ASSERT_TRUE(Has(dir, "b"));
  EXPECT_EQ(ns_.GetAttr(id)->attr.st_nlink, 2u);
  EXPECT_EQ(sink_.entries, (std::vector<Entry>{{dir, "b"}}));
  EXPECT_EQ(sink_.inodes, (std::vector<std::pair<uint64_t, bool>>{{id, false}}));
  sink_.Clear();
  // The first name unlinked there: the second becomes the record's first name.
  r.parent = dir;
  r.name = "b";
  r.extra_links.clear();
  ns_.ApplyRemotePut(r);
  EXPECT_FALSE(Has(kRootId, "a"));
  EXPECT_TRUE(Has(dir, "b"));
  EXPECT_EQ(ns_.GetAttr(id)->attr.st_nlink, 1u);
  EXPECT_EQ(sink_.entries, (std::vector<Entry>{{kRootId, "a"}}));
  // Removed: every name goes.
  r.extra_links = {{kRootId, "c"}};
  ns_.ApplyRemotePut(r);
  ASSERT_TRUE(Has(kRootId, "c"));
  sink_.Clear();
  ns_.ApplyRemoteRemove(id);
  EXPECT_FALSE(Has(dir, "b"));
  EXPECT_FALSE(Has(kRootId, "c"));
  EXPECT_EQ(sink_.entries, (std::vector<Entry>{{dir, "b"}, {kRootId, "c"}}));
}

TEST_F(NamespaceRemoteTest, ALinkLosesAConflictedNameButKeepsItsOthers) {
  const ObjectId low = (1ull << 48) | 3, high = (2ull << 48) | 4;
  ns_.ApplyRemotePut(File(high, kRootId, "x", 1));
  ObjectRecord r = File(low, kRootId, "a", 2);
  r.extra_links = {{kRootId, "x"}};  // "x" belongs to the higher id
  ns_.ApplyRemotePut(r);
  EXPECT_EQ(ns_.Lookup(kRootId, "x")->attr.st_ino, high);
  EXPECT_EQ(ns_.Lookup(kRootId, "a")->attr.st_ino, low);
  EXPECT_EQ(ns_.GetAttr(low)->attr.st_nlink, 1u);
}

}  // namespace
}  // namespace kvfs::fs
