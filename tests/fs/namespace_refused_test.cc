// Changes etcd refuses (unreachable, a conflict) and the resets that follow them, and another
// node's records that meet a file this node is still writing: the name goes where etcd has it,
// and the kernel is told.
#include <fcntl.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "memory_store.h"
#include "namespace.h"
#include "namespace_remote_helpers.h"

namespace kvfs::fs {
namespace {

// This node creates c and writes to it (not published: etcd has never heard of it); another
// node's record `other` for c arrives meanwhile. Returns the writer's entry and handle.
std::pair<EntryInfo, FileHandle*> WriteCWhileAnotherNodesCArrives(Namespace& ns, ObjectId other) {
  auto written = NewFileInWriting(ns, "c", "mine");
  if (written.second) {
    ns.ApplyRemoteChanges({RemoteRecord(other, kRootId, "c", ObjectType::kFile, 12)}, {});
  }
  return written;
}

// Another node publishes c while this node writes its own new file c (etcd has never heard of
// it): the file keeps the name until its close, and the other node's record waits. The writer
// moves its file away (or unlinks it) first: c must go to the other node's file, which etcd
// has there. Before, nothing applied the record again and c was missing here for good.
TEST(NamespaceRemoteTest, ARecordWaitingForAFileInWritingTakesTheNameItLeaves) {
  for (bool rename : {true, false}) {
    SCOPED_TRACE(rename ? "the writer renames its file" : "the writer unlinks its file");
    SharedMemoryStore store;
    RecordingSink sink;
    Namespace ns(&store, &sink);
    ASSERT_TRUE(ns.Load().ok());
    const ObjectId kOther = (9ull << 48) | 51;
    auto [entry, fh] = WriteCWhileAnotherNodesCArrives(ns, kOther);
    ASSERT_NE(fh, nullptr);
    EXPECT_EQ(ns.Lookup(kRootId, "c")->attr.st_ino, entry.attr.st_ino);  // the writer keeps it
    sink.Clear();
    if (rename) {
      ASSERT_TRUE(ns.Rename(kRootId, "c", kRootId, "d", 0).ok());
    } else {
      ASSERT_TRUE(ns.Unlink(kRootId, "c").ok());
    }
    auto c = ns.Lookup(kRootId, "c");
    ASSERT_TRUE(c.ok());
    EXPECT_EQ(c->attr.st_ino, kOther);
    // The kernel may hold c as the writer's: it is told.
    EXPECT_TRUE(sink.ToldEntry(kRootId, "c"));
    ASSERT_TRUE(ns.Flush(fh).ok());
    EXPECT_TRUE(ns.Release(fh).ok());
    EXPECT_EQ(ns.Lookup(kRootId, "c")->attr.st_ino, kOther);
    if (rename) {
      EXPECT_EQ(ns.Lookup(kRootId, "d")->attr.st_ino, entry.attr.st_ino);
    }
  }
}

// Refuses the next change as if etcd were unreachable, and keeps every batch it is given.
class UnreachableOnceStore : public SharedMemoryStore {
 public:
  Result<uint64_t> Submit(const MetaBatch& batch) override {
    batches.push_back(batch);
    if (std::exchange(refuse_next, false)) return Status::Error(EROFS, "etcd is unreachable");
    return MemoryStore::Submit(batch);
  }
  bool refuse_next = false;
  std::vector<MetaBatch> batches;
};

// A file's first publish is refused (etcd unreachable): etcd holds neither the file nor its
// name. The next change of it must give its name again. Before, the refused publish had marked
// the file durable and the next publish carried no name: built after the refusal but sent
// after the watch thread's reset of it, it committed the record without its name key (every
// etcd restart under load left some; nodes then disagreed on those files).
TEST(NamespaceRemoteTest, AChangeAfterARefusedFirstPublishGivesTheNameAgain) {
  UnreachableOnceStore store;
  Namespace ns(&store, nullptr);
  ASSERT_TRUE(ns.Load().ok());
  auto [entry, fh] = NewFileInWriting(ns, "f", "one");
  ASSERT_NE(fh, nullptr);
  const ObjectId id = entry.attr.st_ino;
  store.refuse_next = true;
  EXPECT_EQ(ns.Flush(fh).err(), EROFS);
  EXPECT_TRUE(ns.Release(fh).ok());
  auto names_f = [&](const MetaBatch& b) {
    return std::any_of(b.names.begin(), b.names.end(), [&](const NameChange& c) {
      return c.parent == kRootId && c.name == "f" && c.to == id;
    });
  };
  ASSERT_FALSE(store.batches.empty());
  EXPECT_TRUE(names_f(store.batches.back()));  // the refused one named it
  // etcd is back before the reset of that refusal ran: a new version of the file.
  auto again = ns.Open(id, O_WRONLY);
  ASSERT_TRUE(again.ok());
  ASSERT_TRUE(ns.Write(*again, 0, "two", 3).ok());
  store.batches.clear();
  ASSERT_TRUE(ns.Flush(*again).ok());
  ASSERT_EQ(store.batches.size(), 1u);
  EXPECT_TRUE(names_f(store.batches[0]));
  EXPECT_TRUE(ns.Release(*again).ok());
}

// Refuses the next `refusals` changes that move names as conflicts (another node changed those
// names meanwhile), resetting their objects to what it holds first, as the cluster's store does.
class ConflictingSharedStore : public SharedMemoryStore {
 public:
  Result<uint64_t> Submit(const MetaBatch& batch) override {
    if (refusals == 0 || batch.names.empty()) return MemoryStore::Submit(batch);
    --refusals;
    ++refused;
    refused_batch_ = batch;
    return kRefusedToken;
  }
  Result<Committed> AwaitCommitted(uint64_t token) override {
    if (token != kRefusedToken) {
      if (commit_hook) std::exchange(commit_hook, nullptr)();
      return MemoryStore::AwaitCommitted(token);
    }
    // What the watch thread does between the refusal and its answer reaching the fs.
    if (before_answer) std::exchange(before_answer, nullptr)();
    // etcd unreachable: refused, and reset later (by the test, as the watch thread would).
    if (unreachable) return Status::Error(EROFS, "etcd is unreachable");
    for (const ObjectRecord& put : refused_batch_.puts) {
      std::optional<ObjectRecord> held;
      for (const ObjectRecord& r : Records())
        if (r.id == put.id) held = r;
      ns->RestoreStoreRecord(put.id, held ? &*held : nullptr, {0, refused_batch_.seq});
    }
    return Status::Conflict("another node changed these names");
  }
  Namespace* ns = nullptr;
  int refusals = 0;
  int refused = 0;
  bool unreachable = false;
  std::function<void()> before_answer;
  std::function<void()> commit_hook;  // runs before a committed batch's answer
  uint64_t refused_seq() const { return refused_batch_.seq; }

 private:
  static constexpr uint64_t kRefusedToken = ~uint64_t{0};
  MetaBatch refused_batch_;
};

// A node whose next change etcd refuses as unreachable; the test resets it, as the watch
// thread would.
struct NodeWhoseNextChangeIsRefused {
  NodeWhoseNextChangeIsRefused() {
    store.refusals = 1;
    store.unreachable = true;
  }
  ConflictingSharedStore store;
  RecordingSink sink;
  Namespace ns{&store, &sink};
};

// Another node publishes c while this node writes its own new file c, which keeps the name
// (see ARecordWaitingForAFileInWritingTakesTheNameItLeaves). The writer's publish is refused
// (etcd unreachable): etcd holds the other node's file there, so c goes to it at once, and the
// reset that follows (it removes the file etcd never held), before the writer's release or
// after, leaves it there.
TEST(NamespaceRemoteTest, ARecordWaitingForAFileInWritingTakesTheNameWhenItsPublishIsRefused) {
  for (bool reset_first : {true, false}) {
    SCOPED_TRACE(reset_first ? "reset before the release" : "reset after the release");
    NodeWhoseNextChangeIsRefused node;
    auto& [store, sink, ns] = node;
    ASSERT_TRUE(ns.Load().ok());
    const ObjectId kOther = (9ull << 48) | 61;
    auto [entry, fh] = WriteCWhileAnotherNodesCArrives(ns, kOther);
    ASSERT_NE(fh, nullptr);
    const ObjectId kMine = entry.attr.st_ino;
    EXPECT_EQ(ns.Lookup(kRootId, "c")->attr.st_ino, kMine);  // the writer keeps it
    sink.Clear();
    EXPECT_EQ(ns.Flush(fh).err(), EROFS);
    ASSERT_EQ(store.refused, 1);
    auto c = ns.Lookup(kRootId, "c");
    ASSERT_TRUE(c.ok());
    EXPECT_EQ(c->attr.st_ino, kOther);
    // The kernel holds c as this node's file: it is told.
    EXPECT_TRUE(sink.ToldEntry(kRootId, "c"));
    const ResetOrigin refused{12, store.refused_seq()};  // etcd's state: no such file
    if (reset_first) {
      ns.RestoreStoreRecord(kMine, nullptr, refused);
      EXPECT_TRUE(ns.Release(fh).ok());
    } else {
      EXPECT_TRUE(ns.Release(fh).ok());
      ns.RestoreStoreRecord(kMine, nullptr, refused);
    }
    c = ns.Lookup(kRootId, "c");
    ASSERT_TRUE(c.ok());
    EXPECT_EQ(c->attr.st_ino, kOther);
  }
}

// The writer's publish of its new file c is refused first (etcd unreachable); another node's
// record for c arrives before the refusal's reset, with the writer's handle open or released.
// etcd holds that record there: c must be its file, also after the reset that removes the file
// etcd never held.
TEST(NamespaceRemoteTest, ARecordArrivingBetweenARefusedPublishAndItsResetTakesTheName) {
  for (bool release_first : {true, false}) {
    SCOPED_TRACE(release_first ? "released before the record" : "released after the reset");
    NodeWhoseNextChangeIsRefused node;
    auto& [store, sink, ns] = node;
    ASSERT_TRUE(ns.Load().ok());
    auto [entry, fh] = NewFileInWriting(ns, "c", "mine");
    ASSERT_NE(fh, nullptr);
    const ObjectId kMine = entry.attr.st_ino;
    EXPECT_EQ(ns.Flush(fh).err(), EROFS);
    ASSERT_EQ(store.refused, 1);
    if (release_first) {
      EXPECT_TRUE(ns.Release(fh).ok());
    }
    const ObjectId kOther = (9ull << 48) | 71;
    sink.Clear();
    ns.ApplyRemoteChanges({RemoteRecord(kOther, kRootId, "c", ObjectType::kFile, 12)}, {});
    EXPECT_EQ(ns.Lookup(kRootId, "c")->attr.st_ino, kOther);
    EXPECT_TRUE(sink.ToldEntry(kRootId, "c"));  // the kernel may hold c as the writer's
    ns.RestoreStoreRecord(kMine, nullptr, {12, store.refused_seq()});  // etcd: no such file
    if (!release_first) {
      EXPECT_TRUE(ns.Release(fh).ok());
    }
    auto c = ns.Lookup(kRootId, "c");
    ASSERT_TRUE(c.ok());
    EXPECT_EQ(c->attr.st_ino, kOther);
  }
}

// Three nodes renaming and publishing over the same 8 names without a pause (the etcd stall
// stress run) had a rename refused 5 times in a row, each time built on a state another node
// had just replaced: EAGAIN. The fs tries a change again up to 12 times, pausing at random from
// the third attempt on, and gives up only then.
TEST(NamespaceRemoteTest, AChangeRefusedAsAConflictIsTriedAgainUpToTwelveTimes) {
  ConflictingSharedStore store;
  Namespace ns(&store, nullptr);
  store.ns = &ns;
  ASSERT_TRUE(ns.Load().ok());
  for (const char* name : {"a.tmp", "b.tmp"}) {
    auto r = ns.Create(kRootId, name, 0644, O_WRONLY | O_CREAT, 0, 0);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    ASSERT_TRUE(ns.Release(r->second).ok());
    ns.Forget(r->first.attr.st_ino, 1);
  }
  store.refusals = 8;
  Status st = ns.Rename(kRootId, "a.tmp", kRootId, "a", 0);
  EXPECT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(store.refused, 8);
  auto a = ns.Lookup(kRootId, "a");
  EXPECT_TRUE(a.ok());
  if (a.ok()) ns.Forget(a->attr.st_ino, 1);

  // A conflict that never ends still ends in EAGAIN, after 12 attempts, the name unmoved.
  store.refused = 0;
  store.refusals = 100;
  st = ns.Rename(kRootId, "b.tmp", kRootId, "b", 0);
  EXPECT_EQ(st.err(), EAGAIN) << st.ToString();
  EXPECT_EQ(store.refused, 12);
  EXPECT_EQ(ns.Lookup(kRootId, "b").status().err(), ENOENT);
  auto b = ns.Lookup(kRootId, "b.tmp");
  EXPECT_TRUE(b.ok());
  if (b.ok()) ns.Forget(b->attr.st_ino, 1);
}

// Files X at f4 and P at f5, as another node committed them, and the renames the tests below
// have refused: X f4 -> f6, then P f5 -> f4 (into the name X left).
class TwoRenamesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    store_.ns = &ns_;
    ASSERT_TRUE(ns_.Load().ok());
    ns_.ApplyRemoteChanges({x_at_f4_}, {});
    ns_.ApplyRemoteChanges({p_at_f5_}, {});
    store_.unreachable = true;
  }
  // Which object f4 holds (0: none).
  ObjectId AtF4() {
    auto f4 = ns_.Lookup(kRootId, "f4");
    if (!f4.ok()) return 0;
    ns_.Forget(f4->attr.st_ino, 1);
    return f4->attr.st_ino;
  }

  static constexpr ObjectId kX = (9ull << 48) | 41, kP = (9ull << 48) | 42;
  const ObjectRecord x_at_f4_ = RemoteRecord(kX, kRootId, "f4", ObjectType::kFile, 10);
  const ObjectRecord p_at_f5_ = RemoteRecord(kP, kRootId, "f5", ObjectType::kFile, 11);
  ConflictingSharedStore store_;
  Namespace ns_{&store_, nullptr};
};

// Both renames refused and reset in one pass of the watch thread, as etcd holds them: X at f4
// and P gone. X's reset came first and gave way to P, the holder of f4, whose change was newer;
// P's reset then took P away and f4 stayed empty: this node showed no f4 where every other node
// showed X, for good (the stress run, seed 308). A refused change overtakes nothing.
TEST_F(TwoRenamesTest, AResetDoesNotGiveWayToAChangeRefusedToo) {
  store_.refusals = 2;
  EXPECT_EQ(ns_.Rename(kRootId, "f4", kRootId, "f6", 0).err(), EROFS);  // seq 1
  EXPECT_EQ(ns_.Rename(kRootId, "f5", kRootId, "f4", 0).err(), EROFS);  // seq 2
  EXPECT_EQ(store_.refused, 2);
  // The watch thread's pass once etcd answers: objects in id order, each with its change.
  ns_.RestoreStoreRecord(kX, &x_at_f4_, {/*as_of=*/20, /*seq=*/1});
  ns_.RestoreStoreRecord(kP, nullptr, {/*as_of=*/20, /*seq=*/2});
  EXPECT_EQ(AtF4(), kX);
  EXPECT_EQ(ns_.Lookup(kRootId, "f6").status().err(), ENOENT);
  EXPECT_EQ(ns_.Lookup(kRootId, "f5").status().err(), ENOENT);
}

// X's reset runs on the watch thread while P's refusal is on its way to the fs: P's change may
// still commit for all this node knows, so X's reset gives way to it. Once P's answer says
// refused, X's reset runs again: X is back at f4, where etcd has it (before, f4 stayed empty).
TEST_F(TwoRenamesTest, AResetThatGaveWayToAChangeThenRefusedRunsAgain) {
  store_.refusals = 2;
  EXPECT_EQ(ns_.Rename(kRootId, "f4", kRootId, "f6", 0).err(), EROFS);  // seq 1
  store_.before_answer = [&] { ns_.RestoreStoreRecord(kX, &x_at_f4_, {/*as_of=*/20, /*seq=*/1}); };
  EXPECT_EQ(ns_.Rename(kRootId, "f5", kRootId, "f4", 0).err(), EROFS);  // seq 2
  EXPECT_EQ(store_.refused, 2);
  ns_.RestoreStoreRecord(kP, &p_at_f5_, {/*as_of=*/21, /*seq=*/2});
  EXPECT_EQ(AtF4(), kX) << "0: f4 left empty";
  auto f5 = ns_.Lookup(kRootId, "f5");
  ASSERT_TRUE(f5.ok()) << f5.status().ToString();
  EXPECT_EQ(f5->attr.st_ino, kP);
  ns_.Forget(kP, 1);
  EXPECT_EQ(ns_.Lookup(kRootId, "f6").status().err(), ENOENT);
}

// A reset that gave way to a change that then commits stays skipped: that change is newer.
TEST_F(TwoRenamesTest, AResetThatGaveWayToAChangeThenCommittedStaysSkipped) {
  store_.refusals = 1;
  EXPECT_EQ(ns_.Rename(kRootId, "f4", kRootId, "f6", 0).err(), EROFS);  // seq 1
  // P's rename commits; X's reset ran while it was on its way (the store's hook of a commit).
  store_.commit_hook = [&] { ns_.RestoreStoreRecord(kX, &x_at_f4_, {/*as_of=*/20, /*seq=*/1}); };
  EXPECT_TRUE(ns_.Rename(kRootId, "f5", kRootId, "f4", 0).ok());
  EXPECT_EQ(AtF4(), kP);
}

// Another node's directory C inside directory P; while etcd is unreachable this node moves C
// out of P and removes P, both refused. The watch thread's pass once etcd answers resets the
// objects in id order, and C's id (another node's) is below P's: C's reset meets no P in the
// tree (erased with its last name), and P comes back afterwards, made again from its record.
// C must come back inside it. Before, C's reset found no directory for its name, C left the
// tree, and P came back empty, on this node only (the stress run, seed 501).
TEST(NamespaceRemoteTest, AResetIntoADirectoryResetAfterItFindsItsDirectory) {
  ConflictingSharedStore store;
  Namespace ns(&store, nullptr);
  store.ns = &ns;
  ASSERT_TRUE(ns.Load().ok());
  const ObjectId kP = (9ull << 48) | 60, kC = (8ull << 48) | 61;
  const ObjectRecord p = RemoteRecord(kP, kRootId, "p", ObjectType::kDirectory, 10);
  const ObjectRecord c = RemoteRecord(kC, kP, "c", ObjectType::kDirectory, 11);
  ns.ApplyRemoteChanges({p}, {});
  ns.ApplyRemoteChanges({c}, {});
  store.unreachable = true;
  store.refusals = 2;
  EXPECT_EQ(ns.Rename(kP, "c", kRootId, "c", 0).err(), EROFS);  // seq 1
  EXPECT_EQ(ns.Rmdir(kRootId, "p").err(), EROFS);               // seq 2
  EXPECT_EQ(store.refused, 2);
  ns.RestoreStoreRecord(kC, &c, {/*as_of=*/20, /*seq=*/1});
  ns.RestoreStoreRecord(kP, &p, {/*as_of=*/20, /*seq=*/2});
  auto back = ns.Lookup(kRootId, "p");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->attr.st_ino, kP);
  auto child = ns.Lookup(kP, "c");
  ASSERT_TRUE(child.ok()) << "c left the tree: " << child.status().ToString();
  EXPECT_EQ(child->attr.st_ino, kC);
  EXPECT_EQ(ns.Lookup(kRootId, "c").status().err(), ENOENT);
}

// The same two levels down: C in P in G, C moved out, P and G removed, all refused; resets in
// id order C, P, G. C waits for P, P for G; G's reset brings P back, and P's brings C.
TEST(NamespaceRemoteTest, ResetsWaitingForDirectoriesTwoLevelsDownComeBackInOrder) {
  ConflictingSharedStore store;
  Namespace ns(&store, nullptr);
  store.ns = &ns;
  ASSERT_TRUE(ns.Load().ok());
  const ObjectId kC = (7ull << 48) | 1, kP = (8ull << 48) | 2, kG = (9ull << 48) | 3;
  const ObjectRecord g = RemoteRecord(kG, kRootId, "g", ObjectType::kDirectory, 10);
  const ObjectRecord p = RemoteRecord(kP, kG, "p", ObjectType::kDirectory, 11);
  const ObjectRecord c = RemoteRecord(kC, kP, "c", ObjectType::kDirectory, 12);
  for (const ObjectRecord& r : {g, p, c}) ns.ApplyRemoteChanges({r}, {});
  store.unreachable = true;
  store.refusals = 3;
  EXPECT_EQ(ns.Rename(kP, "c", kRootId, "c", 0).err(), EROFS);  // seq 1
  EXPECT_EQ(ns.Rmdir(kG, "p").err(), EROFS);                    // seq 2
  EXPECT_EQ(ns.Rmdir(kRootId, "g").err(), EROFS);               // seq 3
  ns.RestoreStoreRecord(kC, &c, {/*as_of=*/20, /*seq=*/1});
  ns.RestoreStoreRecord(kP, &p, {/*as_of=*/20, /*seq=*/2});
  ns.RestoreStoreRecord(kG, &g, {/*as_of=*/20, /*seq=*/3});
  auto at_g = ns.Lookup(kRootId, "g");
  ASSERT_TRUE(at_g.ok()) << at_g.status().ToString();
  auto at_p = ns.Lookup(kG, "p");
  ASSERT_TRUE(at_p.ok()) << "p left the tree: " << at_p.status().ToString();
  auto at_c = ns.Lookup(kP, "c");
  ASSERT_TRUE(at_c.ok()) << "c left the tree: " << at_c.status().ToString();
  EXPECT_EQ(at_c->attr.st_ino, kC);
  EXPECT_EQ(ns.Lookup(kRootId, "c").status().err(), ENOENT);
}

}  // namespace
}  // namespace kvfs::fs
