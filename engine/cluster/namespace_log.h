// NamespaceLog: the cluster's namespace as an etcd-ordered log (docs/cluster.md, "Namespace").
//
// Commit side. Each MetaBatch the fs submits (layouts already turned into chunk references by
// the cluster store) becomes one etcd transaction: put/delete of the record keys and of the name
// keys it changes, guarded by compares, so a change based on an old version of any object it
// touches is refused (each record must still be at the revision the fs saw; a name the fs
// believed free must be free; a directory must still exist to receive a name, and be empty to go
// away). One committer thread sends them in submission order; batches waiting behind a
// transaction in flight go out together in the next one when their keys do not overlap (group
// commit). A refused batch:
//   - a name another node took meanwhile: for an exclusive batch (mkdir, O_EXCL, link,
//     RENAME_NOREPLACE) EEXIST; otherwise the other holder is displaced in a new attempt (last
//     writer wins, as a rename over it would)
//   - anything else (an object changed or vanished): the objects involved are reset to what
//     etcd holds (StoreListener::OnRolledBack) and the caller gets Status::Conflict to try again
// A transaction whose outcome is unknown (etcd unreachable mid-call) fails with EROFS; its
// objects are reset once etcd answers again.
//
// Apply side. A watch on the record keys from the loaded revision delivers every change in
// revision order; changes this node made are recognised by their revision and skipped (the fs
// made them already). After compaction outran the watch, a paged re-read at one revision
// replaces it (present records put again, absent ones removed).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "cluster_layout.h"
#include "kvfs/chunk_store.h"
#include "kvfs/etcd.h"
#include "namespace_keys.h"

namespace kvfs::cluster {

struct NamespaceLogHooks {
  // Changes other nodes made, one revision at a time, in order (watch thread).
  std::function<void(std::vector<ObjectRecord>&& puts, std::vector<ObjectId>&& removes)> apply;
  // After a paged re-read at `revision`: every id present then (sorted); committed records
  // the fs holds that are absent and older than `revision` are gone.
  std::function<void(const std::vector<ObjectId>& present, int64_t revision)> resync;
  // Before a re-read after lost history (NamespaceLog::Resync): the revisions the fs holds
  // are of a history etcd no longer has.
  std::function<void()> history_lost;
  // The state etcd holds for an id after a refused or unknown batch (null: none).
  std::function<void(ObjectId, const ObjectRecord*, ResetOrigin)> reset;
  // False while etcd is unreachable (membership): changes are refused at once with EROFS.
  std::function<bool()> writable;
  // A batch of this node (MetaBatch::seq) committed at a revision: called from the committing
  // thread before the watch may deliver the events that follow it.
  std::function<void(uint64_t seq, int64_t revision)> committed;
  // A change found etcd unreachable: later ones are refused up front until it answers again.
  std::function<void(const Status&)> unreachable;
  // The node's lease (0: none): a read of the whole namespace holds compaction under it, so
  // the hold goes with the node if it dies midway.
  std::function<int64_t()> lease;
};

struct NamespaceLogOptions {
  NodeId self = 0;
  // Operations per transaction: etcd refuses more than --max-txn-ops (128 by default).
  size_t max_ops = 120;
  size_t page = 1000;  // keys per range page (load, re-read)
};

class NamespaceLog {
 public:
  NamespaceLog(etcd::Client* etcd, const NamespaceKeys* keys, NamespaceLogOptions options,
               NamespaceLogHooks hooks);
  ~NamespaceLog();
  void Stop();

  // Streams every record at one revision, in pages; the watch starts after it.
  Status Load(const std::function<void(ObjectRecord&&)>& fn);
  // Starts the watch (from the loaded revision + 1) and the committer.
  void Start();
  // Drops the watch stream and opens it again (etcd was unreachable and is back).
  void RestartWatch();
  int64_t applied_revision() const { return applied_.load(); }
  // Releases a compaction hold whose release failed (etcd unreachable), or that waits for a
  // watch open a while with nothing to deliver; nothing while a read holds it. Called about
  // once a second.
  void ReleaseScanHold();
  // The highest id this node ever committed (ids carry the node in their high 16 bits).
  Result<ObjectId> HighestId(NodeId node);

  // Queues a batch (puts carry ClusterLayouts or null layouts) behind every earlier one. The
  // future form lets the caller finish preparing it (placing new chunks on their holders)
  // while earlier batches commit: the committer waits for it in its turn.
  Result<uint64_t> Submit(MetaBatch batch);
  Result<uint64_t> Submit(std::shared_future<Result<MetaBatch>> batch);
  // Waits until the batch is committed or refused. The batch returned is what was committed:
  // the prepared one, plus the holders of names it took over.
  struct Done {
    int64_t revision = 0;
    MetaBatch batch;
  };
  Result<Done> Await(uint64_t token);

  // A batch refused before it reached etcd (etcd unreachable): the fs already shows it, so its
  // objects are reset to what etcd holds once etcd answers again.
  void NoteRefused(const MetaBatch& batch);
  // A batch that failed otherwise (its placement, a transaction etcd rejected): the same reset.
  void NoteFailed(const MetaBatch& batch);
  // Before a batch is queued: when it touches an object or name of a refused batch not reset
  // yet, it was built on what etcd never took (a file the fs shows as published, say), and
  // committing it would write that as if it were (a record without its name). Then those
  // objects and names, and the batch's own, are reset now, answering for the batch's seq (so
  // the reset is not taken as older than the batch), and Conflict is returned: the fs builds
  // the change again on what etcd holds. Ok otherwise.
  Status ResetIfUncertain(const MetaBatch& batch);
  // Reads one record as etcd holds it now (null when absent).
  Result<std::unique_ptr<ObjectRecord>> ReadRecord(ObjectId id);
  // Puts `rec` if its record is still at rec.revision (holders changed by repair, eviction).
  // Conflict when it moved on; the new revision otherwise.
  Result<int64_t> CompareAndPut(const ObjectRecord& rec);
  // Deletes the record and its names if it is still at `revision` (the last copy of its data
  // is gone).
  Status CompareAndDelete(const ObjectRecord& rec);

  struct Counters {
    uint64_t txns = 0, batches = 0, conflicts = 0, displaced = 0, refused_unreachable = 0;
  };
  Counters counters() const;

 private:
  struct Pending {
    uint64_t token = 0;
    std::shared_future<Result<MetaBatch>> future;
    MetaBatch batch;  // the future's value once the committer reached it
    bool done = false;
    Status status;
    int64_t revision = 0;
  };

  // The keys a batch's transaction writes and those it only compares. Batches share a
  // transaction when neither writes a key the other uses: compares only read the state before
  // the transaction, so two creates in one directory (each checking that the directory still
  // exists) share one, while a change reading what another writes must see it done first.
  struct TxnKeys {
    std::set<std::string> writes, reads;
    bool Overlaps(const TxnKeys& other) const;
    void Add(const TxnKeys& other);
  };

  void CommitLoop();
  // Commits `group` (consecutive batches, no key written by one used by another) in one
  // transaction; on a refusal falls back to committing them one by one.
  void CommitGroup(std::vector<std::shared_ptr<Pending>>& group);
  // One batch alone, with the displacement retries and the conflict handling.
  void CommitOne(Pending& p);
  Status BuildTxn(const MetaBatch& batch, etcd::TxnRequest* txn, TxnKeys* keys);
  // The revision a batch's object is really based on: `rev`, moved forward along this node's
  // own commits of it that the fs had not heard of when it built the batch.
  uint64_t Rebase(ObjectId id, uint64_t rev) const;
  void RecordCommit(const MetaBatch& batch, int64_t revision);
  // Sends one transaction, marked in flight meanwhile (the watch waits for it); on success
  // records the commit of every batch it carries.
  Result<etcd::TxnResponse> SendTxn(const etcd::TxnRequest& txn,
                                    const std::vector<const MetaBatch*>& batches);
  // What a reset re-reads: objects, then the holders of names, each with the newest refused
  // change of this node it answers (MetaBatch::seq, handed back in ResetOrigin).
  // Each object and name once (refusals pile up while etcd is unreachable), with the newest seq.
  struct ResetWork {
    std::map<ObjectId, uint64_t> objects;
    std::map<std::pair<uint64_t, std::string>, uint64_t> names;  // (parent, name) -> seq
    void Add(const MetaBatch& batch);
    void AddObject(ObjectId id, uint64_t seq) { objects[id] = std::max(objects[id], seq); }
    void AddName(uint64_t parent, const std::string& name, uint64_t seq) {
      auto& s = names[{parent, name}];
      s = std::max(s, seq);
    }
    bool empty() const { return objects.empty() && names.empty(); }
    // Whether `batch` touches an object or a name of this work.
    bool Touches(const MetaBatch& batch) const;
  };
  // After a refused batch: wait for the watch to catch up, then reset the batch's objects and
  // the holders of its names to what etcd holds. False: etcd did not answer every read; what
  // it did not answer is uncertain again, and the watch thread is woken to reset it once etcd
  // answers (left for the next refusal, it waited for good: the node kept a refused rename).
  bool ResetTo(const ResetWork& work, int64_t seen_revision);
  // The answer to a change refused as a conflict whose reset could not read etcd: not a
  // conflict (the fs would build the change again on the tree the reset did not fix), the
  // refusal of an unreachable etcd.
  static Status ResetUnanswered();
  // A refusal nothing else explains: a name the batch moves off one of its objects whose key
  // is missing while the object's record names it (a record committed without its name key,
  // as a publish built on a refused creation once did). Such names are taken as free in the
  // next attempt; true when there was one. Without it every change of the name was refused,
  // for good.
  Result<bool> ClaimUnkeyedNames(MetaBatch& batch);
  // Whether etcd has no key for `name` while `id`'s record names it (logged as a warning).
  Result<bool> Unkeyed(ObjectId id, const Link& name);
  // A put's names that the batch does not move (an in-place rewrite, a chmod): BuildTxn
  // compares that etcd gives them to the object. At most kKeptNameCompares: a file with
  // hundreds of hard links would not fit one transaction, and its first names are the ones a
  // change built on a refused rename or exchange gets wrong.
  static constexpr size_t kKeptNameCompares = 8;
  static std::vector<Link> KeptNames(const ObjectRecord& rec, const MetaBatch& batch);
  // Tries to take over, for `batch`, a name another node's record holds. False: cannot.
  Result<bool> Displace(MetaBatch& batch, const NameChange& change, ObjectId holder);
  void Finish(Pending& p, Status st, int64_t revision);
  // etcd did not answer a request of p's commit: EROFS, and its objects are reset once it does.
  void FinishUnreachable(Pending& p, const Status& why);

  void WatchLoop();
  // Re-reads the whole namespace. `history_lost`: etcd no longer has the revisions this node
  // applied (wiped, or restored from an older backup): every record not in it goes, whatever
  // revision it carries, and what this node noted of its own old commits is forgotten.
  Status Resync(bool history_lost = false);
  // ScanRecords with compaction held at its revision until the watch after it runs
  // (namespace_scan_hold.cc).
  Result<int64_t> HeldScan(const std::function<void(ObjectRecord&&)>& fn);
  void ReleaseHoldLocked();  // hold_mu_ held
  // The watch opened / is up to date: a hold waiting for it may go.
  void NoteWatchOpened();
  void WatchDelivered();
  // Whether a watch answer hints that etcd lost the history this node applied: another cluster
  // id than before, or a revision behind the applied one (also what a lagging member of a
  // several-member etcd says, so CheckHistory decides). Watch thread only.
  bool HistoryDoubtful(const etcd::WatchResponse& resp);
  // The etcd's epoch (keys Epoch), put when there is none, and the revision etcd answered at
  // (a transaction: linearizable, never a lagging member's).
  struct Epoch {
    std::string value;
    int64_t revision = 0;
  };
  Result<Epoch> ReadOrPutEpoch();
  // True when etcd's history is not the one this node applied: another epoch (a wiped etcd
  // started with the same flags keeps its cluster id, and may be past this node's revision by
  // the time it reconnects) or a revision behind the applied one (restored from an older
  // backup). Adopts the current epoch. Watch thread only.
  Result<bool> CheckHistory();
  void DeliverGroup(int64_t revision, std::vector<etcd::Event>& events);
  bool WaitApplied(int64_t revision, std::chrono::milliseconds timeout);

  etcd::Client* const etcd_;
  const NamespaceKeys* const keys_;
  const NamespaceLogOptions options_;
  const NamespaceLogHooks hooks_;

  std::atomic<bool> stop_{false};
  std::atomic<bool> restart_watch_{false};
  std::atomic<bool> interrupt_watch_{false};  // ends the watch call now (Stop, RestartWatch)
  std::atomic<int64_t> applied_{0};
  std::mutex applied_mu_;
  std::condition_variable applied_cv_;
  std::thread watch_, commit_;
  bool started_ = false;
  uint64_t etcd_cluster_id_ = 0;  // the watch thread's: the etcd cluster it has read from
  std::string epoch_;             // the epoch of the history applied (Load, then watch thread)
  // The compaction hold (namespace_scan_hold.cc). hold_mu_ is held for a whole HeldScan.
  enum class Hold { kNone, kUntilWatching, kLeft };
  std::mutex hold_mu_;
  Hold hold_ = Hold::kNone;                        // guarded by hold_mu_
  std::atomic<bool> hold_waits_for_watch_{false};  // hold_ == kUntilWatching, lock-free
  std::atomic<int64_t> watch_opened_ms_{0};        // steady ms the watch opened after it

  // Commit queue.
  mutable std::mutex mu_;
  std::condition_variable queue_cv_, done_cv_;
  std::deque<std::shared_ptr<Pending>> queue_;
  std::unordered_map<uint64_t, std::shared_ptr<Pending>> by_token_;
  uint64_t next_token_ = 1;
  // Revisions of this node's transactions: the watch skips them. The watch waits while one is
  // in flight, so it never mistakes this node's change for another's.
  bool in_flight_ = false;
  uint64_t txn_started_ = 0, txn_done_ = 0;
  std::condition_variable in_flight_cv_;
  std::set<int64_t> own_revisions_;
  // Own commits by object: base revision -> new revision, for Rebase; kept a minute.
  std::unordered_map<ObjectId, std::map<uint64_t, uint64_t>> rebase_;
  std::deque<std::pair<std::chrono::steady_clock::time_point, ObjectId>> rebase_age_;
  // Objects reset after a refused batch: watch events at or below the revision read are stale.
  std::unordered_map<ObjectId, int64_t> reset_at_;
  // Batches refused before etcd decided, or whose outcome is unknown: reset by the watch
  // thread, before it resumes its watch, once etcd answers.
  ResetWork uncertain_;
  ResetWork resetting_;  // what the watch thread took from uncertain_ and is resetting now
  std::condition_variable resetting_cv_;  // resetting_ emptied
  Counters counters_;
};

}  // namespace kvfs::cluster
