// Namespace semantics over MemoryStore: publish at close, version isolation, journaling of
// every namespace change, readdir cookies, lookup counts.
#include "namespace.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <linux/fs.h>

#include <set>

#include "memory_store.h"

namespace kvfs::fs {
namespace {

class NamespaceTest : public ::testing::Test {
 protected:
  NamespaceTest() : ns_(&store_, nullptr) { EXPECT_TRUE(ns_.Load().ok()); }

  uint64_t CreateFile(uint64_t parent, const std::string& name, const std::string& data) {
    auto r = ns_.Create(parent, name, 0644, O_WRONLY | O_CREAT, 0, 0);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    auto [entry, fh] = *r;
    EXPECT_TRUE(ns_.Write(fh, 0, data.data(), data.size()).ok());
    EXPECT_TRUE(ns_.Flush(fh).ok());
    EXPECT_TRUE(ns_.Release(fh).ok());
    ns_.Forget(entry.attr.st_ino, 1);  // as the kernel would, eventually
    return entry.attr.st_ino;
  }

  std::string ReadAll(FileHandle* fh) {
    std::string out(1 << 16, '\0');
    auto n = ns_.Read(fh, 0, out.data(), out.size());
    EXPECT_TRUE(n.ok());
    out.resize(n.ok() ? *n : 0);
    return out;
  }

  std::string ReadFile(uint64_t ino) {
    auto fh = ns_.Open(ino, O_RDONLY);
    EXPECT_TRUE(fh.ok());
    std::string out = ReadAll(*fh);
    EXPECT_TRUE(ns_.Release(*fh).ok());
    return out;
  }

  const ObjectRecord* StoredRecord(uint64_t id) {
    records_ = store_.Records();
    for (const auto& r : records_)
      if (r.id == id) return &r;
    return nullptr;
  }

  MemoryStore store_;
  Namespace ns_;
  std::vector<ObjectRecord> records_;
};

TEST_F(NamespaceTest, NewFileIsPublishedAtFlushNotBefore) {
  auto r = ns_.Create(kRootId, "a", 0644, O_WRONLY | O_CREAT, 0, 0);
  ASSERT_TRUE(r.ok());
  auto [entry, fh] = *r;
  ASSERT_TRUE(ns_.Write(fh, 0, "hello", 5).ok());
  EXPECT_EQ(StoredRecord(entry.attr.st_ino), nullptr) << "journaled before its first publish";
  // A reader opened now sees the (empty) unpublished file, not the writer's bytes.
  auto reader = ns_.Open(entry.attr.st_ino, O_RDONLY);
  ASSERT_TRUE(reader.ok());
  EXPECT_EQ(ReadAll(*reader), "");
  ASSERT_TRUE(ns_.Flush(fh).ok());
  const ObjectRecord* rec = StoredRecord(entry.attr.st_ino);
  ASSERT_NE(rec, nullptr);
  EXPECT_EQ(rec->size(), 5u);
  EXPECT_EQ(rec->name, "a");
  EXPECT_EQ(ReadAll(*reader), "") << "an open reader keeps its version";
  EXPECT_EQ(ReadFile(entry.attr.st_ino), "hello");
  EXPECT_TRUE(ns_.Release(*reader).ok());
  EXPECT_TRUE(ns_.Release(fh).ok());
}

// A daemon keeps one Inode per name, millions of them: what only open files need is held
// apart and freed at the last close, but the page cache's view outlives the handles.
TEST_F(NamespaceTest, OpenStateLivesOnlyWhileHandlesAreOpen) {
  uint64_t a = CreateFile(kRootId, "a", "alpha");
  uint64_t b = CreateFile(kRootId, "b", "beta");
  EXPECT_EQ(ns_.CountInodesWithOpenState(), 0u);
  auto r1 = ns_.Open(a, O_RDONLY);
  auto r2 = ns_.Open(b, O_RDONLY);
  ASSERT_TRUE(r1.ok() && r2.ok());
  EXPECT_EQ(ns_.CountInodesWithOpenState(), 2u);
  ASSERT_TRUE(ns_.Release(*r1).ok());
  EXPECT_EQ(ns_.CountInodesWithOpenState(), 1u);
  // The next reader of the same version keeps the pages the last one left in the kernel.
  auto again = ns_.Open(a, O_RDONLY);
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE((*again)->keep_cache);
  EXPECT_FALSE((*again)->direct_io);
  ASSERT_TRUE(ns_.Release(*again).ok());
  ASSERT_TRUE(ns_.Release(*r2).ok());
  EXPECT_EQ(ns_.CountInodesWithOpenState(), 0u);
  // A writer and a reader on one file: the state goes with the last handle, and a new
  // version is not taken for the cached one.
  uint64_t c = CreateFile(kRootId, "c", "gamma");
  auto w = ns_.Create(kRootId, "d", 0644, O_WRONLY | O_CREAT, 0, 0);
  ASSERT_TRUE(w.ok());
  auto rc = ns_.Open(c, O_RDONLY);
  ASSERT_TRUE(rc.ok());
  ASSERT_TRUE(ns_.Release(*rc).ok());
  ASSERT_TRUE(ns_.Write(w->second, 0, "delta", 5).ok());
  ASSERT_TRUE(ns_.Release(w->second).ok());
  ns_.Forget(w->first.attr.st_ino, 1);
  EXPECT_EQ(ns_.CountInodesWithOpenState(), 0u);
  EXPECT_EQ(ReadFile(w->first.attr.st_ino), "delta");
  EXPECT_EQ(ns_.CountInodesWithOpenState(), 0u);
}

// Without an OpenState an inode keeps one bit about its page cache: a version published while
// nothing is open (a truncate of a closed file, a peer's publish) leaves the pages stale.
TEST_F(NamespaceTest, PagesCachedOfAClosedFileGoStaleWithANewVersion) {
  uint64_t a = CreateFile(kRootId, "a", "alpha-one");
  auto r = ns_.Open(a, O_RDONLY);
  ASSERT_TRUE(r.ok());
  ASSERT_TRUE(ns_.Release(*r).ok());
  ASSERT_EQ(ns_.CountInodesWithOpenState(), 0u);
  SetAttrRequest req;
  req.size = 5;
  ASSERT_TRUE(ns_.SetAttr(a, req, nullptr).ok());
  auto again = ns_.Open(a, O_RDONLY);
  ASSERT_TRUE(again.ok());
  EXPECT_FALSE((*again)->keep_cache);
  EXPECT_EQ(ReadAll(*again), "alpha");
  ASSERT_TRUE(ns_.Release(*again).ok());
  auto third = ns_.Open(a, O_RDONLY);  // the pages are of this version now
  ASSERT_TRUE(third.ok());
  EXPECT_TRUE((*third)->keep_cache);
  ASSERT_TRUE(ns_.Release(*third).ok());
}

TEST_F(NamespaceTest, EmptyNewFileIsPublished) {
  auto r = ns_.Create(kRootId, "empty", 0644, O_WRONLY | O_CREAT, 0, 0);
  ASSERT_TRUE(r.ok());
  ASSERT_TRUE(ns_.Release(r->second).ok());
  ASSERT_NE(StoredRecord(r->first.attr.st_ino), nullptr);
}

TEST_F(NamespaceTest, OverwriteIsCopyOnWriteAndReadersKeepOldVersion) {
  uint64_t ino = CreateFile(kRootId, "f", "version-one");
  auto reader = ns_.Open(ino, O_RDONLY);
  ASSERT_TRUE(reader.ok());
  auto writer = ns_.Open(ino, O_WRONLY);  // no O_TRUNC: starts from the published bytes
  ASSERT_TRUE(writer.ok());
  ASSERT_TRUE(ns_.Write(*writer, 0, "VERSION", 7).ok());
  EXPECT_EQ(ReadFile(ino), "version-one") << "unpublished writes leaked";
  ASSERT_TRUE(ns_.Flush(*writer).ok());
  EXPECT_EQ(ReadFile(ino), "VERSION-one");
  EXPECT_EQ(ReadAll(*reader), "version-one");
  EXPECT_TRUE(ns_.Release(*reader).ok());
  EXPECT_TRUE(ns_.Release(*writer).ok());
}

TEST_F(NamespaceTest, TruncatingOpenStartsFromNothing) {
  uint64_t ino = CreateFile(kRootId, "f", "long old content");
  auto writer = ns_.Open(ino, O_WRONLY | O_TRUNC);
  ASSERT_TRUE(writer.ok());
  EXPECT_EQ(ReadFile(ino), "long old content");
  ASSERT_TRUE(ns_.Write(*writer, 0, "new", 3).ok());
  ASSERT_TRUE(ns_.Release(*writer).ok());
  EXPECT_EQ(ReadFile(ino), "new");
  EXPECT_EQ(StoredRecord(ino)->size(), 3u);
}

TEST_F(NamespaceTest, UnlinkedOpenFileStaysUsableAndPublishesNothing) {
  uint64_t ino = CreateFile(kRootId, "f", "abc");
  auto writer = ns_.Open(ino, O_RDWR);
  ASSERT_TRUE(writer.ok());
  ASSERT_TRUE(ns_.Unlink(kRootId, "f").ok());
  EXPECT_EQ(StoredRecord(ino), nullptr);
  ASSERT_TRUE(ns_.Write(*writer, 3, "def", 3).ok());
  EXPECT_EQ(ReadAll(*writer), "abcdef");
  ASSERT_TRUE(ns_.Flush(*writer).ok());
  EXPECT_EQ(StoredRecord(ino), nullptr) << "an unlinked file was published";
  EXPECT_FALSE(ns_.Lookup(kRootId, "f").ok());
  ASSERT_TRUE(ns_.Release(*writer).ok());
  EXPECT_FALSE(ns_.GetAttr(ino).ok()) << "inode outlived its last reference";
}

TEST_F(NamespaceTest, LookupCountKeepsUnlinkedInodeUntilForget) {
  uint64_t ino = CreateFile(kRootId, "f", "x");
  ASSERT_TRUE(ns_.Lookup(kRootId, "f").ok());
  ASSERT_TRUE(ns_.Lookup(kRootId, "f").ok());
  ASSERT_TRUE(ns_.Unlink(kRootId, "f").ok());
  ns_.Forget(ino, 1);
  // Still known (the kernel holds a lookup), but only through a stale name: ESTALE makes the
  // VFS look the name up again and miss.
  EXPECT_EQ(ns_.GetAttr(ino).status().err(), ESTALE);
  EXPECT_EQ(ns_.Open(ino, O_RDONLY).status().err(), ESTALE);
  ns_.Forget(ino, 1);
  EXPECT_EQ(ns_.GetAttr(ino).status().err(), ENOENT);
}

TEST_F(NamespaceTest, UnlinkedOpenFileKeepsItsSizeUntilClosed) {
  uint64_t ino = CreateFile(kRootId, "f", "content");
  auto fh = ns_.Open(ino, O_RDONLY);
  ASSERT_TRUE(fh.ok());
  ASSERT_TRUE(ns_.Unlink(kRootId, "f").ok());
  auto e = ns_.GetAttr(ino);  // fstat on the open handle
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->attr.st_size, 7);
  EXPECT_EQ(e->attr.st_nlink, 0u);
  char buf[16];
  auto n = ns_.Read(*fh, 0, buf, sizeof buf);
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(std::string(buf, *n), "content");
  ASSERT_TRUE(ns_.Release(*fh).ok());
  EXPECT_EQ(ns_.GetAttr(ino).status().err(), ENOENT);
}

TEST_F(NamespaceTest, RenameOverExistingIsOneBatch) {
  uint64_t src = CreateFile(kRootId, "x.tmp", "new");
  uint64_t dst = CreateFile(kRootId, "x", "old");
  ASSERT_TRUE(ns_.Rename(kRootId, "x.tmp", kRootId, "x", 0).ok());
  EXPECT_EQ(StoredRecord(dst), nullptr);
  ASSERT_NE(StoredRecord(src), nullptr);
  EXPECT_EQ(StoredRecord(src)->name, "x");
  auto e = ns_.Lookup(kRootId, "x");
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->attr.st_ino, src);
  EXPECT_FALSE(ns_.Lookup(kRootId, "x.tmp").ok());
}

TEST_F(NamespaceTest, RenameRules) {
  auto a = ns_.Mkdir(kRootId, "a", 0755, 0, 0);
  ASSERT_TRUE(a.ok());
  uint64_t a_ino = a->attr.st_ino;
  auto b = ns_.Mkdir(a_ino, "b", 0755, 0, 0);
  ASSERT_TRUE(b.ok());
  CreateFile(a_ino, "f", "1");
  EXPECT_EQ(ns_.Rename(kRootId, "a", b->attr.st_ino, "a", 0).err(), EINVAL);
  EXPECT_EQ(ns_.Rename(kRootId, "a", a_ino, "a2", 0).err(), EINVAL);
  ASSERT_TRUE(ns_.Mkdir(kRootId, "empty", 0755, 0, 0).ok());
  ASSERT_TRUE(ns_.Mkdir(kRootId, "full", 0755, 0, 0).ok());
  CreateFile(ns_.Lookup(kRootId, "full")->attr.st_ino, "g", "2");
  EXPECT_EQ(ns_.Rename(kRootId, "a", kRootId, "full", 0).err(), ENOTEMPTY);
  EXPECT_EQ(ns_.Rename(kRootId, "a", kRootId, "empty", RENAME_NOREPLACE).err(), EEXIST);
  EXPECT_EQ(ns_.Rmdir(kRootId, "a").err(), ENOTEMPTY);
  ASSERT_TRUE(ns_.Rename(kRootId, "a", kRootId, "empty", 0).ok());
  EXPECT_EQ(ns_.Lookup(kRootId, "empty")->attr.st_ino, a_ino);
  EXPECT_EQ(StoredRecord(a_ino)->name, "empty");
  // Exchange swaps two names in one step.
  uint64_t p = CreateFile(kRootId, "p", "P");
  uint64_t q = CreateFile(kRootId, "q", "Q");
  ASSERT_TRUE(ns_.Rename(kRootId, "p", kRootId, "q", RENAME_EXCHANGE).ok());
  EXPECT_EQ(ns_.Lookup(kRootId, "p")->attr.st_ino, q);
  EXPECT_EQ(ns_.Lookup(kRootId, "q")->attr.st_ino, p);
  EXPECT_EQ(StoredRecord(p)->name, "q");
  EXPECT_EQ(ns_.Rename(kRootId, "p", kRootId, std::string(256, 'n'), 0).err(), ENAMETOOLONG);
}

TEST_F(NamespaceTest, NamesLongerThan255AreRefused) {
  std::string longname(256, 'x');
  EXPECT_EQ(ns_.Create(kRootId, longname, 0644, O_WRONLY, 0, 0).status().err(), ENAMETOOLONG);
  EXPECT_EQ(ns_.Mkdir(kRootId, longname, 0755, 0, 0).status().err(), ENAMETOOLONG);
  EXPECT_EQ(ns_.Lookup(kRootId, longname).status().err(), ENAMETOOLONG);
  EXPECT_TRUE(ns_.Mkdir(kRootId, std::string(255, 'y'), 0755, 0, 0).ok());
}

TEST_F(NamespaceTest, ReaddirCookiesSurviveConcurrentChanges) {
  constexpr int kFiles = 1000;
  for (int i = 0; i < kFiles; ++i)
    ASSERT_TRUE(ns_.Mknod(kRootId, "f" + std::to_string(i), 0644, 0, 0, 0).ok());
  std::multiset<std::string> seen;
  uint64_t offset = 0;
  int added = 0;
  while (true) {
    int batch = 0;
    ASSERT_TRUE(ns_.Readdir(kRootId, offset,
                            [&](const std::string& name, uint64_t, uint32_t, uint64_t next) {
                              if (batch == 7) return false;  // a small reply buffer
                              ++batch;
                              seen.insert(name);
                              offset = next;
                              return true;
                            })
                    .ok());
    if (batch == 0) break;
    // Entries come and go between replies: new names, and names already returned.
    if (added < 100) {
      ASSERT_TRUE(ns_.Mknod(kRootId, "new" + std::to_string(added++), 0644, 0, 0, 0).ok());
      // Removing a name already returned must not disturb the cookies of the rest.
      ASSERT_TRUE(ns_.Unlink(kRootId, "f" + std::to_string(added - 1)).ok());
    }
  }
  for (int i = 0; i < kFiles; ++i) EXPECT_EQ(seen.count("f" + std::to_string(i)), 1u) << "f" << i;
  EXPECT_EQ(seen.count("."), 1u);
}

TEST_F(NamespaceTest, LoadRebuildsTheTreeFromRecords) {
  auto d = ns_.Mkdir(kRootId, "dir", 0750, 0, 0);
  ASSERT_TRUE(d.ok());
  CreateFile(d->attr.st_ino, "file", "content");
  ASSERT_TRUE(ns_.Symlink(kRootId, "link", "dir/file", 0, 0).ok());
  ObjectRecord orphan;  // its directory is gone: not shown, and nothing of it stays in memory
  orphan.id = 9000;
  orphan.parent = 8999;
  orphan.name = "orphan";
  MetaBatch b;
  b.puts = {orphan};
  ASSERT_TRUE(store_.Apply(b).ok());
  Namespace again(&store_, nullptr);
  ASSERT_TRUE(again.Load().ok());
  EXPECT_FALSE(again.Record(orphan.id).ok());
  EXPECT_EQ(again.KeptNameCount(), 0u);  // every name loaded lives in its directory only
  auto dir = again.Lookup(kRootId, "dir");
  ASSERT_TRUE(dir.ok());
  EXPECT_EQ(dir->attr.st_mode & 07777, 0750u);
  auto file = again.Lookup(dir->attr.st_ino, "file");
  ASSERT_TRUE(file.ok());
  EXPECT_EQ(file->attr.st_size, 7);
  EXPECT_TRUE(file->stable);
  EXPECT_EQ(again.Record(file->attr.st_ino)->name, "file");
  auto link = again.Lookup(kRootId, "link");
  ASSERT_TRUE(link.ok());
  EXPECT_EQ(*again.Readlink(link->attr.st_ino), "dir/file");
}

TEST_F(NamespaceTest, TruncateOfClosedFilePublishesAtOnce) {
  uint64_t ino = CreateFile(kRootId, "f", "0123456789");
  SetAttrRequest req;
  req.size = 4;
  ASSERT_TRUE(ns_.SetAttr(ino, req, nullptr).ok());
  EXPECT_EQ(StoredRecord(ino)->size(), 4u);
  EXPECT_EQ(ReadFile(ino), "0123");
}

TEST_F(NamespaceTest, SetAttrOfPublishedObjectIsJournaled) {
  uint64_t ino = CreateFile(kRootId, "f", "x");
  SetAttrRequest req;
  req.mode = 0600;
  req.mtime = SetAttrRequest::Time::kSet;
  req.mtime_value = {1000, 5};
  ASSERT_TRUE(ns_.SetAttr(ino, req, nullptr).ok());
  EXPECT_EQ(StoredRecord(ino)->mode, 0600u);
  EXPECT_EQ(StoredRecord(ino)->mtime.sec, 1000);
}

TEST_F(NamespaceTest, ControlNameIsReservedInRoot) {
  EXPECT_EQ(ns_.Mkdir(kRootId, ".kvfs", 0755, 0, 0).status().err(), EEXIST);
  auto d = ns_.Mkdir(kRootId, "sub", 0755, 0, 0);
  EXPECT_TRUE(ns_.Mkdir(d->attr.st_ino, ".kvfs", 0755, 0, 0).ok());
}

TEST_F(NamespaceTest, RecordsCarryTheirNamesThroughRenamesLinksAndCompactions) {
  // An inode's first name is held by its directory only (Inode::name_cookie): every record
  // handed to the store must still carry it, after the directory compacted around it, after
  // renames and exchanges, and after a hard link took over as the first name.
  auto dir = ns_.Mkdir(kRootId, "d", 0755, 0, 0);
  ASSERT_TRUE(dir.ok());
  const uint64_t d = dir->attr.st_ino;
  std::vector<uint64_t> inos;
  for (int i = 0; i < 300; ++i) inos.push_back(CreateFile(d, "f" + std::to_string(i), "x"));
  for (int i = 0; i < 300; ++i) {
    if (i % 10 == 0) continue;
    ASSERT_TRUE(ns_.Unlink(d, "f" + std::to_string(i)).ok());  // compacts on the way
  }
  SetAttrRequest chmod;
  chmod.mode = 0600;
  for (int i = 0; i < 300; i += 10) {
    ASSERT_TRUE(ns_.SetAttr(inos[i], chmod, nullptr).ok());
    const ObjectRecord* rec = StoredRecord(inos[i]);
    ASSERT_NE(rec, nullptr);
    EXPECT_EQ(rec->name, "f" + std::to_string(i));
    EXPECT_EQ(rec->parent, d);
    EXPECT_EQ(ns_.Record(inos[i])->name, "f" + std::to_string(i));
  }
  ASSERT_TRUE(ns_.Rename(d, "f10", kRootId, "g10", 0).ok());
  EXPECT_EQ(StoredRecord(inos[10])->name, "g10");
  EXPECT_EQ(StoredRecord(inos[10])->parent, kRootId);
  ASSERT_TRUE(ns_.Rename(d, "f20", kRootId, "g10", RENAME_EXCHANGE).ok());
  EXPECT_EQ(StoredRecord(inos[10])->name, "f20");
  EXPECT_EQ(StoredRecord(inos[10])->parent, d);
  EXPECT_EQ(StoredRecord(inos[20])->name, "g10");
  // A hard link becomes the first name when the first goes; then it is renamed.
  ASSERT_TRUE(ns_.Link(inos[30], kRootId, "h30").ok());
  ASSERT_TRUE(ns_.Unlink(d, "f30").ok());
  ASSERT_TRUE(ns_.Rename(kRootId, "h30", d, "k30", 0).ok());
  const ObjectRecord* rec = StoredRecord(inos[30]);
  ASSERT_NE(rec, nullptr);
  EXPECT_EQ(rec->name, "k30");
  EXPECT_EQ(rec->parent, d);
  EXPECT_TRUE(rec->extra_links.empty());
  // What the store holds loads back as the same tree.
  Namespace again(&store_, nullptr);
  ASSERT_TRUE(again.Load().ok());
  EXPECT_EQ(again.Lookup(d, "k30")->attr.st_ino, inos[30]);
  EXPECT_EQ(again.Lookup(d, "f20")->attr.st_ino, inos[10]);
  EXPECT_EQ(again.Lookup(kRootId, "g10")->attr.st_ino, inos[20]);
  EXPECT_EQ(again.Lookup(d, "f290")->attr.st_ino, inos[290]);
  EXPECT_EQ(again.Record(inos[290])->name, "f290");
}

TEST_F(NamespaceTest, HardLinksAreJournaledWithTheRecordAndReloaded) {
  const uint64_t ino = CreateFile(kRootId, "a", "data");
  auto dir = ns_.Mkdir(kRootId, "d", 0755, 0, 0);
  ASSERT_TRUE(dir.ok());
  const uint64_t d = dir->attr.st_ino;
  auto e = ns_.Link(ino, d, "b");
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  EXPECT_EQ(e->attr.st_nlink, 2u);
  EXPECT_EQ(e->attr.st_ino, ino);
  const ObjectRecord* rec = StoredRecord(ino);
  ASSERT_NE(rec, nullptr);
  EXPECT_EQ(rec->extra_links, (std::vector<kvfs::Link>{{d, "b"}}));
  EXPECT_EQ(ns_.Link(ino, d, "b").status().err(), EEXIST);
  EXPECT_EQ(ns_.Link(d, kRootId, "d2").status().err(), EPERM);
  EXPECT_EQ(ns_.Link(ino, kRootId, ".kvfs").status().err(), EEXIST);

  // Unlinking the first name promotes the second; the record follows.
  ASSERT_TRUE(ns_.Unlink(kRootId, "a").ok());
  rec = StoredRecord(ino);
  ASSERT_NE(rec, nullptr);
  EXPECT_EQ(rec->parent, d);
  EXPECT_EQ(rec->name, "b");
  EXPECT_TRUE(rec->extra_links.empty());
  EXPECT_EQ(ns_.GetAttr(ino)->attr.st_nlink, 1u);

  // A fresh namespace over the same store shows both names of a relinked file.
  ASSERT_TRUE(ns_.Link(ino, kRootId, "c").ok());
  Namespace again(&store_, nullptr);
  ASSERT_TRUE(again.Load().ok());
  auto b = again.Lookup(d, "b");
  auto c = again.Lookup(kRootId, "c");
  ASSERT_TRUE(b.ok() && c.ok());
  EXPECT_EQ(b->attr.st_ino, c->attr.st_ino);
  EXPECT_EQ(c->attr.st_nlink, 2u);
  EXPECT_EQ(again.GetAttr(d)->attr.st_nlink, 2u);  // no subdirectories
  EXPECT_EQ(again.GetAttr(kRootId)->attr.st_nlink, 3u);

  // The last name's unlink removes the record.
  ASSERT_TRUE(ns_.Unlink(d, "b").ok());
  EXPECT_NE(StoredRecord(ino), nullptr);
  ASSERT_TRUE(ns_.Unlink(kRootId, "c").ok());
  EXPECT_EQ(StoredRecord(ino), nullptr);
}

TEST_F(NamespaceTest, SpecialFilesAreMetadataOnly) {
  auto fifo = ns_.Mknod(kRootId, "p", S_IFIFO | 0640, 0, 0, 0);
  ASSERT_TRUE(fifo.ok());
  EXPECT_TRUE(S_ISFIFO(fifo->attr.st_mode));
  EXPECT_EQ(fifo->attr.st_blocks, 0);
  auto chr = ns_.Mknod(kRootId, "c", S_IFCHR | 0600, 0x0103, 0, 0);
  ASSERT_TRUE(chr.ok());
  EXPECT_EQ(chr->attr.st_rdev, 0x0103u);
  const ObjectRecord* rec = StoredRecord(chr->attr.st_ino);
  ASSERT_NE(rec, nullptr);
  EXPECT_EQ(rec->type, ObjectType::kCharDevice);
  EXPECT_EQ(rec->rdev(), 0x0103u);
  EXPECT_EQ(ns_.Mknod(kRootId, "x", S_IFDIR | 0755, 0, 0, 0).status().err(), EINVAL);
  EXPECT_EQ(ns_.Open(fifo->attr.st_ino, O_RDONLY).status().err(), ELOOP);  // the kernel's
  std::set<std::pair<std::string, uint32_t>> seen;
  ASSERT_TRUE(ns_.Readdir(kRootId, 0,
                          [&](const std::string& n, uint64_t, uint32_t t, uint64_t) {
                            seen.emplace(n, t);
                            return true;
                          })
                  .ok());
  EXPECT_TRUE(seen.count({"p", S_IFIFO}));
  EXPECT_TRUE(seen.count({"c", S_IFCHR}));
}

TEST_F(NamespaceTest, RecordsWhoseLinksPointNowhereKeepTheirOtherNames) {
  // As a store could hold them after a crash between two changes: a second name in a
  // directory that is gone, and a first name that another record holds.
  ObjectRecord taken;
  taken.id = 50;
  taken.parent = kRootId;
  taken.name = "x";
  taken.type = ObjectType::kFile;
  ObjectRecord rec = taken;
  rec.id = 51;
  rec.extra_links = {{999, "nowhere"}, {kRootId, "y"}};
  MetaBatch b;
  b.puts = {taken, rec};
  ASSERT_TRUE(store_.Apply(b).ok());
  Namespace fresh(&store_, nullptr);
  ASSERT_TRUE(fresh.Load().ok());
  auto x = fresh.Lookup(kRootId, "x");
  auto y = fresh.Lookup(kRootId, "y");
  ASSERT_TRUE(x.ok() && y.ok());
  EXPECT_EQ(x->attr.st_ino, 50u);
  EXPECT_EQ(y->attr.st_ino, 51u);
  EXPECT_EQ(y->attr.st_nlink, 1u);
}

// A store whose read of the namespace failed midway reads it again (the cluster, when etcd
// compacted the read's revision): what the first read gave goes, whatever the second holds.
class RereadingStore : public MemoryStore {
 public:
  Status LoadRecords(const std::function<void(ObjectRecord&&)>& fn,
                     const std::function<void()>& start_over) override {
    ObjectRecord gone_dir;  // removed between the two reads, with a file in it
    gone_dir.id = 7000;
    gone_dir.parent = kRootId;
    gone_dir.name = "gone";
    gone_dir.type = ObjectType::kDirectory;
    gone_dir.mode = 0755;
    ObjectRecord gone_file;
    gone_file.id = 7001;
    gone_file.parent = gone_dir.id;
    gone_file.name = "f";
    fn(std::move(gone_dir));
    fn(std::move(gone_file));
    for (ObjectRecord& rec : Records()) {  // the first read fails halfway through
      fn(std::move(rec));
      break;
    }
    start_over();
    for (ObjectRecord& rec : Records()) fn(std::move(rec));
    return Status::Ok();
  }
};

TEST(NamespaceLoadTest, ARereadForgetsWhatTheFailedReadGave) {
  RereadingStore store;
  {
    Namespace first(&store, nullptr);
    ASSERT_TRUE(first.Load().ok());
    ASSERT_TRUE(first.Mkdir(kRootId, "kept", 0755, 0, 0).ok());
    auto r = first.Create(kRootId, "file", 0644, O_WRONLY | O_CREAT, 0, 0);
    ASSERT_TRUE(r.ok());
    auto [entry, fh] = *r;
    ASSERT_TRUE(first.Write(fh, 0, "abc", 3).ok());
    ASSERT_TRUE(first.Flush(fh).ok());
    ASSERT_TRUE(first.Release(fh).ok());
  }
  Namespace again(&store, nullptr);
  ASSERT_TRUE(again.Load().ok());
  EXPECT_FALSE(again.Lookup(kRootId, "gone").ok());
  EXPECT_FALSE(again.Record(7000).ok());
  EXPECT_FALSE(again.Record(7001).ok());
  EXPECT_TRUE(again.Lookup(kRootId, "kept").ok());
  auto file = again.Lookup(kRootId, "file");
  ASSERT_TRUE(file.ok());
  EXPECT_EQ(file->attr.st_size, 3);
  EXPECT_EQ(again.KeptNameCount(), 0u);
}

}  // namespace
}  // namespace kvfs::fs
