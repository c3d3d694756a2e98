// NamespaceLog against a real etcd: a change built on a refused one. The fs applies a change
// before etcd takes it; one refused while etcd was unreachable is reset to etcd's state once it
// answers again, on the watch thread. A change the fs made on top of it before that reset (a
// publish of the file whose creation was refused) believes the refused names are etcd's: sent
// as it is, it committed a record whose name etcd never gave it, and every later rename of
// that file was refused, for good (cluster_mount.partition's node cut off from etcd, 1 run in
// 4 on a busy machine). ResetIfUncertain resets such a change's objects first and refuses it.
#include "namespace_log.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "etcd_fixture.h"
#include "forwarding_etcd_client.h"
#include "record_value.h"

namespace kvfs::cluster {
namespace {

// Forwards to a real client and counts reads: single-key ranges and read-only transactions
// (what a reset sends). While `slow` is set, a read of another thread than the test's (the
// watch thread's reset) takes 300 ms, so the test meets that reset in progress. While
// `hold_writes` is set, a transaction that writes waits (counted in `held`), so the test
// queues changes behind one in flight.
class SlowResetClient : public kvfs::testing::ForwardingEtcdClient {
 public:
  explicit SlowResetClient(etcd::Client* inner)
      : ForwardingEtcdClient(inner), test_thread_(std::this_thread::get_id()) {}
  Result<etcd::RangeResponse> Range(const etcd::RangeRequest& req) override {
    ranges.fetch_add(1);
    MaybeSlow();
    return inner_->Range(req);
  }
  Result<etcd::TxnResponse> Txn(const etcd::TxnRequest& req) override {
    bool reads_only = req.compare.empty() && !req.success.empty();
    for (const etcd::TxnOp& op : req.success)
      reads_only = reads_only && op.kind == etcd::TxnOp::Kind::kRange;
    if (!reads_only) {
      write_txns.fetch_add(1);
      last_write_compares = static_cast<int>(req.compare.size());
    }
    if (!reads_only && hold_writes.load()) {
      held.fetch_add(1);
      while (hold_writes.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    if (reads_only) {
      read_txns.fetch_add(1);
      MaybeSlow();
      if (failed_reads.load() > 0) {
        failed_reads.fetch_sub(1);
        return Status::Error(ETIMEDOUT, "etcd stalled (test)");
      }
    }
    return inner_->Txn(req);
  }
  std::atomic<bool> slow{false};
  std::atomic<int> slow_reads{0};
  std::atomic<int> ranges{0};
  std::atomic<int> read_txns{0};
  std::atomic<int> failed_reads{0};  // read-only transactions still to fail
  std::atomic<bool> hold_writes{false};
  std::atomic<int> held{0};
  std::atomic<int> write_txns{0};  // transactions that write, counted as they are sent
  std::atomic<int> last_write_compares{0};

 private:
  void MaybeSlow() {
    if (slow && std::this_thread::get_id() != test_thread_) {
      slow_reads.fetch_add(1);
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
    }
  }
  const std::thread::id test_thread_;
};

struct ResetCall {
  ObjectId id = 0;
  bool present = false;
  ResetOrigin origin;
};

class NamespaceLogTest : public kvfs::testing::EtcdFixture {
 protected:
  void SetUp() override {
    EtcdFixture::SetUp();
    if (HasFatalFailure()) return;
    slow_ = std::make_unique<SlowResetClient>(client_.get());
  }
  // `watch_resets`: whether the watch thread runs its own reset of refused changes (the
  // fs's submissions from this thread are taken either way).
  void StartLog(bool watch_resets) {
    NamespaceLogHooks hooks;
    hooks.apply = [](std::vector<ObjectRecord>&&, std::vector<ObjectId>&&) {};
    hooks.resync = [](const std::vector<ObjectId>&, int64_t) {};
    hooks.reset = [this](ObjectId id, const ObjectRecord* rec, ResetOrigin origin) {
      std::lock_guard lock(mu_);
      resets_.push_back({id, rec != nullptr, origin});
    };
    // Writable for this thread's submissions only: the watch thread never runs its own reset
    // of refused changes, so the race with it is decided here, always the same way.
    const std::thread::id self = std::this_thread::get_id();
    hooks.writable = [self, watch_resets] {
      return watch_resets || std::this_thread::get_id() == self;
    };
    NamespaceLogOptions lo;
    lo.self = 1;
    log_ = std::make_unique<NamespaceLog>(slow_.get(), &keys_, lo, std::move(hooks));
    Status st = log_->Load([](ObjectRecord&&) {});
    ASSERT_TRUE(st.ok()) << st.ToString();
    log_->Start();
  }
  void TearDown() override {
    if (log_) log_->Stop();
  }

  // A new file `name` in the root, as the fs's publish of it sends it.
  static MetaBatch Create(ObjectId id, const std::string& name, uint64_t seq) {
    MetaBatch b;
    ObjectRecord r;
    r.id = id;
    r.parent = kRootId;
    r.name = name;
    r.type = ObjectType::kFile;
    r.mode = 0644;
    b.puts.push_back(r);
    b.names.push_back({kRootId, name, kInvalidId, id});
    b.seq = seq;
    return b;
  }
  // A new file `name` in directory `parent`.
  static MetaBatch CreateIn(ObjectId parent, ObjectId id, const std::string& name, uint64_t seq) {
    MetaBatch b = Create(id, name, seq);
    b.puts[0].parent = parent;
    b.names[0].parent = parent;
    return b;
  }
  Status Commit(const MetaBatch& b) {
    auto token = log_->Submit(b);
    return token.ok() ? log_->Await(*token).status() : token.status();
  }
  // A new version of a file the fs believes etcd holds under its name: no name changes.
  static MetaBatch Republish(ObjectId id, const std::string& name, uint64_t seq) {
    MetaBatch b = Create(id, name, seq);
    b.names.clear();
    return b;
  }
  // A record naming `name` put into etcd without its name key; returned at its revision.
  ObjectRecord PutRecordAlone(ObjectId id, const std::string& name) {
    ObjectRecord rec = Create(id, name, 0).puts[0];
    auto put = client_->Put(keys_.Record(id), EncodeRecordValue(rec, 1));
    EXPECT_TRUE(put.ok()) << put.status().ToString();
    rec.revision = put.ok() ? static_cast<uint64_t>(*put) : 0;
    return rec;
  }
  // Renames the file `rec` (in the root, under rec.name) to `to` in the root, as the fs sends
  // it; the answer of the commit.
  Status Rename(ObjectRecord rec, const std::string& to, uint64_t seq) {
    MetaBatch b;
    const std::string from = rec.name;
    rec.name = to;
    b.puts.push_back(rec);
    b.names.push_back({kRootId, from, rec.id, kInvalidId});
    b.names.push_back({kRootId, to, kInvalidId, rec.id});
    b.seq = seq;
    auto token = log_->Submit(b);
    if (!token.ok()) return token.status();
    return log_->Await(*token).status();
  }
  std::vector<ResetCall> Resets() {
    std::lock_guard lock(mu_);
    return resets_;
  }
  std::string Get(const std::string& key) {
    etcd::RangeRequest r;
    r.key = key;
    auto got = client_->Range(r);
    EXPECT_TRUE(got.ok()) << got.status().ToString();
    return got.ok() && !got->kvs.empty() ? got->kvs[0].value : "";
  }

  std::unique_ptr<SlowResetClient> slow_;
  NamespaceKeys keys_{"/kvfs/"};
  std::unique_ptr<NamespaceLog> log_;
  std::mutex mu_;
  std::vector<ResetCall> resets_;
};

TEST_F(NamespaceLogTest, AChangeOnARefusedOneIsResetAndRefusedNotCommitted) {
  StartLog(false);
  const ObjectId x = (uint64_t{1} << 48) | 5;
  log_->NoteRefused(Create(x, "back.tmp", 1));  // etcd was unreachable: refused up front

  // The fs publishes the file again, believing it and its name are etcd's.
  const MetaBatch again = Republish(x, "back.tmp", 2);
  Status st = log_->ResetIfUncertain(again);
  EXPECT_TRUE(st.IsConflict()) << st.ToString();
  std::vector<ResetCall> resets = Resets();
  ASSERT_EQ(resets.size(), 1u);
  EXPECT_EQ(resets[0].id, x);
  EXPECT_FALSE(resets[0].present);  // etcd has no such record: the file leaves the tree
  EXPECT_EQ(resets[0].origin.seq, 2u) << "a reset answering for the older change only is "
                                         "overtaken by the newer one and skipped";
  EXPECT_GT(resets[0].origin.as_of, 0u);
  EXPECT_EQ(Get(keys_.Record(x)), "");

  // Once reset, it is over: the change the fs builds again (a creation) goes through whole.
  const MetaBatch rebuilt = Create(x, "back.tmp", 3);
  st = log_->ResetIfUncertain(rebuilt);
  EXPECT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(Resets().size(), 1u);
  auto token = log_->Submit(rebuilt);
  ASSERT_TRUE(token.ok()) << token.status().ToString();
  auto done = log_->Await(*token);
  ASSERT_TRUE(done.ok()) << done.status().ToString();
  EXPECT_NE(Get(keys_.Record(x)), "");
  EXPECT_EQ(Get(keys_.Name(kRootId, "back.tmp")), Hex16(x));
}

TEST_F(NamespaceLogTest, ABatchIsRefusedWhenARecordItIsBasedOnChangedMeanwhile) {
  // A directory moving to another parent is based on that parent's ancestors as the fs sees
  // them (MetaBatch::unchanged): when another node moved one of them since, the move may close
  // a cycle, and etcd must refuse it (two nodes' crossing moves both committed before).
  StartLog(true);
  const ObjectId d = (uint64_t{1} << 48) | 7, f = (uint64_t{1} << 48) | 8;
  const ObjectRecord before = PutRecordAlone(d, "d");  // as another node writes it
  const ObjectRecord after = PutRecordAlone(d, "d");   // and changes it again
  ASSERT_GT(after.revision, before.revision);

  MetaBatch based = Create(f, "f", 1);
  based.unchanged.emplace_back(d, before.revision);
  Status st = Commit(based);
  EXPECT_TRUE(st.IsConflict()) << st.ToString();
  EXPECT_EQ(Get(keys_.Record(f)), "");
  EXPECT_EQ(Get(keys_.Name(kRootId, "f")), "");

  based.unchanged[0].second = after.revision;  // built again on what etcd holds
  based.seq = 2;
  st = Commit(based);
  EXPECT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(Get(keys_.Name(kRootId, "f")), Hex16(f));
}

TEST_F(NamespaceLogTest, APutKeepingANameEtcdGaveAnotherObjectIsRefused) {
  // A rewrite of a file built on this node's refused exchange before its reset: the record
  // names 'a', which the fs showed it under, and the batch moves no name. It committed, with
  // etcd's key of 'a' on another object and the file's real key ('c') left on it.
  StartLog(true);
  const ObjectId x = (uint64_t{1} << 48) | 9, y = (uint64_t{1} << 48) | 10;
  ASSERT_TRUE(Commit(Create(y, "a", 1)).ok());
  auto token = log_->Submit(Create(x, "c", 2));
  ASSERT_TRUE(token.ok()) << token.status().ToString();
  auto made = log_->Await(*token);
  ASSERT_TRUE(made.ok()) << made.status().ToString();
  const std::string before = Get(keys_.Record(x));

  MetaBatch rewrite = Republish(x, "a", 3);
  rewrite.puts[0].revision = static_cast<uint64_t>(made->revision);
  const Status st = Commit(rewrite);
  EXPECT_TRUE(st.IsConflict()) << st.ToString();
  EXPECT_EQ(Get(keys_.Record(x)), before);
  EXPECT_EQ(Get(keys_.Name(kRootId, "a")), Hex16(y));
  EXPECT_EQ(Get(keys_.Name(kRootId, "c")), Hex16(x));

  // The same rewrite under the name etcd gives it commits.
  MetaBatch right = Republish(x, "c", 4);
  right.puts[0].revision = static_cast<uint64_t>(made->revision);
  EXPECT_TRUE(Commit(right).ok());
}

TEST_F(NamespaceLogTest, APutKeepingANameWhoseKeyIsMissingTakesTheKey) {
  // A record etcd holds without its name key (left by the defect above, or an older build):
  // a rewrite of it is not refused for good; it takes the key.
  StartLog(true);
  const ObjectId x = (uint64_t{1} << 48) | 11;
  const ObjectRecord alone = PutRecordAlone(x, "k");
  MetaBatch rewrite = Republish(x, "k", 1);
  rewrite.puts[0].revision = alone.revision;
  const Status st = Commit(rewrite);
  EXPECT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(Get(keys_.Name(kRootId, "k")), Hex16(x));
}

TEST_F(NamespaceLogTest, CreatesInOneDirectoryShareATransaction) {
  // Connectors publish every chunk of a model into one directory. Each create checks that the
  // directory still exists; that check was taken for a key the creates change, so no two of
  // them shared a transaction: 2 transactions per file published by temp name and rename, one
  // in flight at a time (382 publish/s through a 1-node cluster with 4 writers, 395 with 16).
  StartLog(true);
  const ObjectId dir = (uint64_t{1} << 48) | 2;
  MetaBatch mkdir = Create(dir, "model", 1);
  mkdir.puts[0].type = ObjectType::kDirectory;
  mkdir.puts[0].mode = 0755;
  ASSERT_TRUE(Commit(mkdir).ok());
  const NamespaceLog::Counters before = log_->counters();

  slow_->hold_writes = true;  // the first create stays in flight while the others queue
  constexpr int kQueued = 20;
  std::vector<uint64_t> tokens;
  auto first = log_->Submit(CreateIn(dir, (uint64_t{1} << 48) | 10, "c0", 2));
  ASSERT_TRUE(first.ok());
  tokens.push_back(*first);
  for (int i = 0; i < 500 && slow_->held.load() == 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  ASSERT_EQ(slow_->held.load(), 1);
  for (int i = 1; i <= kQueued; ++i) {
    auto t = log_->Submit(CreateIn(dir, (uint64_t{1} << 48) | (10 + i), "c" + std::to_string(i),
                                   static_cast<uint64_t>(2 + i)));
    ASSERT_TRUE(t.ok());
    tokens.push_back(*t);
  }
  slow_->hold_writes = false;
  for (uint64_t t : tokens) {
    auto done = log_->Await(t);
    EXPECT_TRUE(done.ok()) << done.status().ToString();
  }
  const NamespaceLog::Counters after = log_->counters();
  EXPECT_EQ(after.batches - before.batches, uint64_t{kQueued} + 1);
  EXPECT_EQ(after.txns - before.txns, 2u) << "the queued creates go in one transaction";
  // Each create compares its record and its name; that the directory exists, once for all.
  EXPECT_EQ(slow_->last_write_compares.load(), 2 * kQueued + 1);
  for (int i = 0; i <= kQueued; ++i)
    EXPECT_EQ(Get(keys_.Name(dir, "c" + std::to_string(i))), Hex16((uint64_t{1} << 48) | (10 + i)));

  // A create in a directory made by a change queued before it must see that change done: it
  // is not in its transaction (there it would find no directory, and both would be sent again).
  slow_->held = 0;
  slow_->hold_writes = true;
  auto t0 = log_->Submit(CreateIn(dir, (uint64_t{1} << 48) | 50, "c50", 40));
  ASSERT_TRUE(t0.ok());
  for (int i = 0; i < 500 && slow_->held.load() == 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  ASSERT_EQ(slow_->held.load(), 1);
  const ObjectId sub = (uint64_t{1} << 48) | 3;
  MetaBatch mksub = Create(sub, "sub", 41);
  mksub.puts[0].type = ObjectType::kDirectory;
  auto t1 = log_->Submit(mksub);
  auto t2 = log_->Submit(CreateIn(sub, (uint64_t{1} << 48) | 51, "inside", 42));
  ASSERT_TRUE(t1.ok() && t2.ok());
  const int writes_before = slow_->write_txns.load();
  slow_->hold_writes = false;
  for (uint64_t t : {*t0, *t1, *t2}) {
    auto done = log_->Await(t);
    EXPECT_TRUE(done.ok()) << done.status().ToString();
  }
  EXPECT_EQ(slow_->write_txns.load() - writes_before, 2)
      << "the directory and the create in it went together, were refused, and went again";
  EXPECT_EQ(log_->counters().conflicts, 0u);
  EXPECT_EQ(Get(keys_.Name(sub, "inside")), Hex16((uint64_t{1} << 48) | 51));
}

TEST_F(NamespaceLogTest, OnlyChangesTouchingARefusedObjectOrNameWait) {
  StartLog(false);
  const ObjectId x = (uint64_t{1} << 48) | 5, y = (uint64_t{1} << 48) | 6,
                 z = (uint64_t{1} << 48) | 7;
  log_->NoteRefused(Create(x, "a", 1));
  // Another file under another name: nothing to do with the refused change.
  EXPECT_TRUE(log_->ResetIfUncertain(Create(y, "b", 2)).ok());
  EXPECT_TRUE(Resets().empty());
  // Another file taking the refused change's name: that name's state is etcd's first.
  Status st = log_->ResetIfUncertain(Create(z, "a", 3));
  EXPECT_TRUE(st.IsConflict()) << st.ToString();
  std::vector<ResetCall> resets = Resets();
  ASSERT_FALSE(resets.empty());
  bool x_reset = false;
  for (const ResetCall& r : resets) x_reset = x_reset || (r.id == x && r.origin.seq == 1);
  EXPECT_TRUE(x_reset) << "the refused creation of x is undone with it";
  EXPECT_TRUE(log_->ResetIfUncertain(Create(z, "a", 4)).ok());
}

TEST_F(NamespaceLogTest, AChangeMeetingTheWatchThreadsResetWaitsForItThenResetsAgain) {
  // Under etcd stalls every attempt of a rename was refused while the watch thread reset a
  // pile of refused changes (EAGAIN after 5): the change waits for that reset, then resets
  // its own objects once more (the fs skipped them in the watch thread's reset: the change is
  // newer), and is refused once.
  StartLog(true);
  const ObjectId x = (uint64_t{1} << 48) | 5;
  slow_->slow = true;
  log_->NoteRefused(Create(x, "a", 1));  // wakes the watch thread: it resets x, slowly
  for (int i = 0; i < 200 && slow_->slow_reads.load() == 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  ASSERT_GT(slow_->slow_reads.load(), 0) << "the watch thread did not start its reset";
  Status st = log_->ResetIfUncertain(Republish(x, "a", 2));
  EXPECT_TRUE(st.IsConflict()) << st.ToString();
  std::vector<ResetCall> resets = Resets();
  ASSERT_EQ(resets.size(), 2u);
  EXPECT_EQ(resets[0].origin.seq, 1u);  // the watch thread's, first
  EXPECT_EQ(resets[1].id, x);
  EXPECT_EQ(resets[1].origin.seq, 2u);  // then the change's own
  // The change built again is taken at once.
  st = log_->ResetIfUncertain(Create(x, "a", 3));
  EXPECT_TRUE(st.ok()) << st.ToString();
  slow_->slow = false;
}

TEST_F(NamespaceLogTest, APileOfRefusedChangesIsReadBackInFewTransactions) {
  // After an outage the first change touching a refused one resets everything refused (on the
  // fs's submitting thread). One etcd read per name and per object took 1-2 ms each here; they
  // go in read-only transactions of up to 64 keys, and every object still comes back as etcd
  // holds it.
  StartLog(false);
  constexpr int kFiles = 150;
  auto id_of = [](int i) { return (uint64_t{1} << 48) | static_cast<uint64_t>(100 + i); };
  for (int i = 0; i < kFiles; ++i) {
    if (i % 3 == 0) PutRecordAlone(id_of(i), "f" + std::to_string(i));  // etcd has these
    log_->NoteRefused(Create(id_of(i), "f" + std::to_string(i), static_cast<uint64_t>(i + 1)));
  }
  const int ranges_before = slow_->ranges.load(), txns_before = slow_->read_txns.load();
  Status st = log_->ResetIfUncertain(Republish(id_of(0), "f0", kFiles + 1));
  EXPECT_TRUE(st.IsConflict()) << st.ToString();
  EXPECT_EQ(slow_->ranges.load() - ranges_before, 0);
  // 150 names, then 150 records: 3 transactions each.
  EXPECT_EQ(slow_->read_txns.load() - txns_before, 6);
  std::map<ObjectId, bool> present;
  for (const ResetCall& r : Resets()) present[r.id] = r.present;
  ASSERT_EQ(present.size(), static_cast<size_t>(kFiles));
  for (int i = 0; i < kFiles; ++i) EXPECT_EQ(present[id_of(i)], i % 3 == 0) << "file " << i;
}

TEST_F(NamespaceLogTest, ARefusalWhoseResetEtcdDidNotAnswerIsResetByTheWatchThread) {
  // A rename refused as a conflict, and etcd stalled before the reset could read the file's
  // record: the fs got a conflict and built the rename again on its tree, which still showed
  // the refused rename (the source name was gone: ENOENT); the object waited for a reset that
  // nothing ran until the next refusal, and a later commit of another node took the name off
  // it: the node lost the file for good (the stress run, seed 200). The refusal answers EROFS
  // now, and the watch thread resets the object once etcd answers.
  StartLog(true);
  const ObjectId y = (uint64_t{1} << 48) | 6;
  ObjectRecord rec = PutRecordAlone(y, "c");
  rec.name = "d";           // what the fs shows: a rename etcd refused
  slow_->failed_reads = 2;  // the names read, then the records read
  Status st = Rename(rec, "e", 4);
  EXPECT_FALSE(st.IsConflict()) << st.ToString();
  EXPECT_EQ(st.err(), EROFS) << st.ToString();
  bool reset = false;
  for (int i = 0; i < 500 && !reset; ++i) {
    for (const ResetCall& r : Resets()) reset = reset || (r.id == y && r.present);
    if (!reset) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_TRUE(reset) << "the object of the refused rename was never reset";
  EXPECT_EQ(slow_->failed_reads.load(), 0);
}

TEST_F(NamespaceLogTest, ARecordWithoutItsNameKeyIsRenamedNotRefusedForGood) {
  // What the publish built on a refused creation left in etcd before the fix above: a record
  // that names "a" with no name key for it. Every rename of the file was refused (the name
  // key does not hold it), reset to the same state, refused again: EAGAIN, for good.
  StartLog(false);
  const ObjectId x = (uint64_t{1} << 48) | 5;
  ObjectRecord rec = PutRecordAlone(x, "a");

  Status st = Rename(rec, "b", 2);
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(Get(keys_.Name(kRootId, "b")), Hex16(x));
  EXPECT_EQ(Get(keys_.Name(kRootId, "a")), "");

  // A name the record does not give the object (the fs shows a rename etcd refused) is not
  // taken as free: refused, and reset.
  const ObjectId y = (uint64_t{1} << 48) | 6;
  ObjectRecord other = PutRecordAlone(y, "c");
  other.name = "d";  // what the fs shows
  st = Rename(other, "e", 4);
  EXPECT_TRUE(st.IsConflict()) << st.ToString();
  EXPECT_EQ(Get(keys_.Name(kRootId, "e")), "");
}

}  // namespace
}  // namespace kvfs::cluster
