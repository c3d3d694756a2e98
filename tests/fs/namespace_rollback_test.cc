// Namespace::RestoreStoreRecord over MemoryStore: after the store undid changes that never
// became durable, the namespace shows exactly the durable records again (names, versions).
#include <fcntl.h>
#include <gtest/gtest.h>

#include "memory_store.h"
#include "namespace.h"

namespace kvfs::fs {
namespace {

class NamespaceRollbackTest : public ::testing::Test {
 protected:
  NamespaceRollbackTest() : ns_(&store_, nullptr) { EXPECT_TRUE(ns_.Load().ok()); }

  uint64_t Publish(uint64_t parent, const std::string& name, const std::string& data) {
    auto r = ns_.Create(parent, name, 0644, O_WRONLY | O_CREAT, 0, 0);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    auto [entry, fh] = *r;
    EXPECT_TRUE(ns_.Write(fh, 0, data.data(), data.size()).ok());
    EXPECT_TRUE(ns_.Release(fh).ok());
    ns_.Forget(entry.attr.st_ino, 1);
    return entry.attr.st_ino;
  }

  ObjectRecord Durable(uint64_t id) {
    for (const auto& r : store_.Records())
      if (r.id == id) return r;
    ADD_FAILURE() << "no record " << id;
    return {};
  }

  uint64_t SizeOf(uint64_t parent, const std::string& name) {
    auto e = ns_.Lookup(parent, name);
    if (!e.ok()) return ~0ull;
    ns_.Forget(e->attr.st_ino, 1);
    return static_cast<uint64_t>(e->attr.st_size);
  }

  MemoryStore store_;
  Namespace ns_;
};

TEST_F(NamespaceRollbackTest, UndoneChangesLeaveTheTree) {
  const uint64_t a = Publish(kRootId, "a", "version-1");
  const ObjectRecord a_durable = Durable(a);
  // Changes the store will report as undone: a new version of a, a rename of a, a new file.
  Publish(kRootId, "a.tmp", "v2");
  ASSERT_TRUE(ns_.Rename(kRootId, "a.tmp", kRootId, "a", 0).ok());  // a's inode is replaced
  const uint64_t b = Publish(kRootId, "b", "new");
  auto tmp_ino = ns_.Lookup(kRootId, "a");
  ASSERT_TRUE(tmp_ino.ok());
  const uint64_t a2 = tmp_ino->attr.st_ino;
  ns_.Forget(a2, 1);

  // As the engine reports them: newest first, each id's durable state last.
  ns_.RestoreStoreRecord(b, nullptr);
  ns_.RestoreStoreRecord(a2, nullptr);
  ns_.RestoreStoreRecord(a, &a_durable);

  EXPECT_EQ(ns_.Lookup(kRootId, "b").status().err(), ENOENT);
  auto back = ns_.Lookup(kRootId, "a");
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->attr.st_ino, a);
  EXPECT_EQ(back->attr.st_size, 9);
  ns_.Forget(a, 1);
  auto fh = ns_.Open(a, O_RDONLY);
  ASSERT_TRUE(fh.ok());
  std::string data(16, '\0');
  auto n = ns_.Read(*fh, 0, data.data(), data.size());
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(data.substr(0, *n), "version-1");
  EXPECT_TRUE(ns_.Release(*fh).ok());
}

TEST_F(NamespaceRollbackTest, UndoneRenameMovesTheNameBack) {
  ASSERT_TRUE(ns_.Mkdir(kRootId, "d", 0755, 0, 0).ok());
  auto d = ns_.Lookup(kRootId, "d");
  ASSERT_TRUE(d.ok());
  const uint64_t x = Publish(kRootId, "x", "xx");
  const ObjectRecord x_durable = Durable(x);
  ASSERT_TRUE(ns_.Rename(kRootId, "x", d->attr.st_ino, "y", 0).ok());
  ns_.RestoreStoreRecord(x, &x_durable);
  EXPECT_EQ(SizeOf(kRootId, "x"), 2u);
  EXPECT_EQ(SizeOf(d->attr.st_ino, "y"), ~0ull);
}

TEST_F(NamespaceRollbackTest, UndoneLinkAndUnlinkRestoreTheNames) {
  const uint64_t x = Publish(kRootId, "x", "xx");
  ASSERT_TRUE(ns_.Link(x, kRootId, "x2").ok());
  const ObjectRecord linked = Durable(x);
  ASSERT_EQ(linked.nlink(), 2u);
  // An unlink of the first name that never became durable: both names come back.
  ASSERT_TRUE(ns_.Unlink(kRootId, "x").ok());
  EXPECT_EQ(SizeOf(kRootId, "x"), ~0ull);
  ns_.RestoreStoreRecord(x, &linked);
  EXPECT_EQ(SizeOf(kRootId, "x"), 2u);
  EXPECT_EQ(SizeOf(kRootId, "x2"), 2u);
  EXPECT_EQ(ns_.GetAttr(x)->attr.st_nlink, 2u);
  // A link that never became durable goes again.
  ObjectRecord one = linked;
  one.extra_links.clear();
  ns_.RestoreStoreRecord(x, &one);
  EXPECT_EQ(SizeOf(kRootId, "x2"), ~0ull);
  EXPECT_EQ(ns_.GetAttr(x)->attr.st_nlink, 1u);
}

}  // namespace
}  // namespace kvfs::fs
