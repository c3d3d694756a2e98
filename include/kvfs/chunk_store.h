// ChunkStore: what the fs layer needs from storage. The local engine implements it; the cluster
// store (later) implements it over many nodes. Thread-safe: the FUSE loop calls it from many
// threads at once.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kvfs/chunk_reader.h"
#include "kvfs/object.h"
#include "kvfs/status.h"

namespace kvfs {

// One name that changes hands in a batch: (parent, name) was held by `from` and is held by `to`
// afterwards (kInvalidId: free before / gone after). A local engine ignores these (its records
// carry their names); a shared namespace (the cluster) checks and moves its name index by them.
struct NameChange {
  uint64_t parent = 0;
  std::string name;
  ObjectId from = kInvalidId;
  ObjectId to = kInvalidId;
};

// A batch of namespace changes persisted atomically (one journal record, one etcd transaction):
// e.g. a rename over an existing file is {put(moved), remove(replaced)}.
struct MetaBatch {
  std::vector<ObjectRecord> puts;  // insert or replace by id (the full record)
  std::vector<ObjectId> removes;   // drop the record; its layout is freed when unreferenced
  // For a shared namespace, which refuses changes based on an old version of an object: the
  // ObjectRecord::revision each remove was based on, parallel to `removes` (a missing entry
  // means "whatever it is now").
  std::vector<uint64_t> remove_revisions;
  std::vector<NameChange> names;  // every name that changes hands (see NameChange)
  // The names this batch takes must be free (mkdir, O_EXCL, link, RENAME_NOREPLACE): a shared
  // store answers EEXIST when another node took one meanwhile. Without it, a name another node
  // published meanwhile is taken over (last writer wins, as a rename over it would).
  bool exclusive = false;
  // Records the batch does not change but is based on: each must still be at the given
  // ObjectRecord::revision. A directory moving to another parent lists that parent and its
  // ancestors, so two nodes' crossing moves (a into b, b into a) cannot both commit and cut a
  // cycle of directories off the tree. A local store ignores them (its changes are serial).
  std::vector<std::pair<ObjectId, uint64_t>> unchanged;
  // The fs's order of its in-memory changes (its ticket, from 1; 0: none given). A shared store
  // hands it back with the resets a refused batch causes (ResetOrigin), so a reset that a later
  // change of the same object has overtaken is not forced on that change.
  uint64_t seq = 0;
  // Refused before it was made (CheckWritable said so): the fs did not show it. The store only
  // notes the objects it touches, to reset them to what it holds once it can (the times a
  // write moved, a name it never had), and answers EROFS. Only a store whose CheckWritable
  // refuses sees it.
  bool refused_up_front = false;
};

// For debug lines: the batch's change number, what it puts and removes (with the revisions
// they are based on) and the names it moves (engine/record_codec.cc).
std::string DescribeBatch(const MetaBatch& batch);

// Where a shared store's reset of an object comes from (StoreListener::OnRolledBack): the
// revision it read the object at, and the newest change of this node (MetaBatch::seq) whose
// refusal it answers. Zeros: a local store's rollback, forced as given.
struct ResetOrigin {
  uint64_t as_of = 0;
  uint64_t seq = 0;
};

// The XXH3-64 of `length` consecutive bytes of a chunk, as sent to a peer that checks them.
struct DataDigest {
  uint32_t length = 0;
  uint64_t xxh3 = 0;
  bool operator==(const DataDigest&) const = default;
};

// What a batch became once committed (ChunkStore::AwaitCommitted).
struct Committed {
  uint64_t revision = 0;  // the revision of every put of the batch (0: an unversioned store)
  // Puts whose layout the store replaced by its own (the cluster's chunk reference for a
  // freshly written local layout): id, the layout given, the layout to hold instead.
  struct NewLayout {
    ObjectId id;
    LayoutRef from, to;
  };
  std::vector<NewLayout> layouts;
};

// Staging for one new version of one file. Private to its writer until Finish() returns a
// Layout, which becomes visible only when a MetaBatch puts it into a record. Not thread-safe:
// the fs layer serialises calls per open file.
class ChunkWriter {
 public:
  virtual ~ChunkWriter() = default;
  // Writes at any offset; a hole reads as zeros. Sequentially completed segments may be sealed
  // and written to the device before Finish(), so a large write streams.
  virtual Status Write(uint64_t offset, const void* data, size_t len) = 0;
  // Reads the staged content (the writer's own view: base version plus its writes).
  virtual Result<size_t> Read(uint64_t offset, void* out, size_t len) = 0;
  virtual Status Truncate(uint64_t size) = 0;
  virtual uint64_t size() const = 0;
  // True when the content differs from the base layout given at creation.
  virtual bool dirty() const = 0;
  // Seals every segment, waits for the device writes, and (durability=close) makes the data
  // durable. The writer stays usable: later writes start a further version from this one.
  virtual Result<LayoutRef> Finish() = 0;
};

struct StoreStats {
  uint64_t capacity_bytes = 0;  // usable data bytes over all devices
  uint64_t used_bytes = 0;      // allocated extents (incl. not yet freed)
  uint64_t logical_bytes = 0;   // sum of published file sizes
  uint64_t objects = 0;
  uint64_t files = 0;
  uint64_t reads = 0, writes = 0;  // chunk read calls, published versions
  uint64_t bytes_read = 0, bytes_written = 0;
  uint64_t checksum_failures = 0;
  uint64_t corrupt_dropped = 0;  // records the store removed because their data was corrupt
  uint64_t stored_bytes = 0;     // on-device payload bytes of published files (after codec)
  uint64_t evictions = 0;        // files the bounded cache evicted (incl. explicit evictions)
  // Read-ahead of ChunkReaders: segments found read or in flight when asked for (hits), read
  // on demand (misses), and read ahead but dropped unused.
  uint64_t readahead_hits = 0, readahead_misses = 0, readahead_wasted = 0;
  std::string eviction_policy;                   // empty: the store does not evict
  double high_watermark = 0, low_watermark = 0;  // fractions of capacity_bytes
  uint64_t journal_bytes = 0;
  uint64_t journal_commits = 0;  // journal write + fdatasync rounds (group commits)
  // Empty while the store takes changes; else why it refuses them (EROFS): a journal write
  // failed. After ENOSPC it turns writable again by itself once the file system has room.
  std::string read_only;
  uint64_t segment_size = 0;
  std::vector<std::string> devices;
  // What the recovery at open found damaged and skipped (0 after a clean start or a crash):
  // journal records lost to damage in the middle of a journal, checkpoints that did not
  // verify, device superblocks restored from their backup; and one line per finding.
  uint64_t recovery_damaged_records = 0;
  uint64_t recovery_damaged_checkpoints = 0;
  uint64_t recovery_repaired_superblocks = 0;
  std::vector<std::string> recovery_notes;
};

// Told about changes the fs did not ask for: records the store removed on its own, changes it
// undid, and (in a cluster) changes other nodes made. Called without store locks held; must not
// call back into the store synchronously with Apply.
class StoreListener {
 public:
  virtual ~StoreListener() = default;
  // The record's data failed its checksum; its removal is already journaled.
  virtual void OnDropped(ObjectId /*id*/) {}
  // The bounded cache evicted the record (or Evict() was called); the removal is journaled.
  // Called from the thread whose Apply, write or Evict made room.
  virtual void OnEvicted(ObjectId /*id*/) {}
  // The store's state of `id` is `record` (null: it has none), not what the fs last gave it:
  // a journal write failed and the store undid a change it never made durable (it is read-only
  // from then on), or a shared store refused a batch and this is what it holds now. Calls for
  // one id come oldest state last; each forces the id to the state given, except that a shared
  // store's reset gives way to what is newer than it (see ResetOrigin).
  virtual void OnRolledBack(ObjectId /*id*/, const ObjectRecord* /*record*/,
                            ResetOrigin /*origin*/) {}
  // A batch of this node (MetaBatch::seq) committed at `revision` in a shared namespace. Told
  // from the committing thread before the watch delivers any later change, so the objects the
  // fs put carry their new revision before another node's older change can claim their names.
  virtual void OnCommitted(uint64_t /*seq*/, uint64_t /*revision*/) {}
  // Changes another node made (a shared namespace), one commit at a time in commit order: the
  // records put (with their names) and the ids removed, to apply as one step.
  virtual void OnRemoteChanges(const std::vector<ObjectRecord>& /*puts*/,
                               const std::vector<ObjectId>& /*removes*/) {}
  // The shared namespace was re-read at `revision` (the watch fell behind etcd's compaction):
  // `present` (sorted) is every id it holds. Committed records older than `revision` that are
  // not in it are gone; the present ones arrived through OnRemoteChanges just before.
  virtual void OnRemoteResync(const std::vector<ObjectId>& /*present*/, uint64_t /*revision*/) {}
  // The shared namespace lost the history whose revisions the records carry (etcd wiped or
  // restored from an older backup); a re-read follows. Committed records keep their content
  // but not their revisions: whatever the re-read brings wins, and what it lacks goes.
  virtual void OnRemoteHistoryLost() {}
};

// How the daemon and kvfsctl see the nodes of a cluster (.kvfs/nodes, kvfsctl nodes). A single
// node describes itself as node 0.
struct NodeView {
  uint16_t id = 0;
  std::string address;
  // "self", "up", "draining", "down" (known from a holder list only); self may be "draining"
  std::string state;
  uint64_t capacity_bytes = 0, used_bytes = 0;
  uint32_t replicas = 0;  // the R it publishes with (0: not known, a down or older node)
  uint64_t gets_sent = 0, puts_sent = 0;  // this node's requests to it (peers only)
  uint64_t failures = 0;                  // of those, and of its pings, the failed ones
  uint64_t hedged_around = 0;  // pieces a read asked of another holder too, this one slow
  // It let a request time out lately (frozen, cut off, overloaded): reads skip it and
  // placement leaves it out until it answers a ping.
  bool unanswering = false;
  // Why this node's last ping of it failed, when a request to it had failed and no ping has
  // found it since (its daemon gone while its lease lives, another node or nothing kvfs at
  // its address, another secret); empty otherwise.
  std::string unreachable;
};
struct ClusterView {
  uint16_t self = 0;
  uint32_t replicas = 1;
  std::string transport = "none";
  std::vector<std::string> etcd;  // endpoints; empty for a single node
  bool etcd_reachable = true;
  int64_t revision = 0;  // the namespace revision this node has applied
  // etcd history kept (0: kvfs never compacts), and the revision this node compacted etcd to
  // last (0: none; only the live node with the lowest id compacts).
  uint32_t etcd_history_s = 0;
  int64_t compacted_revision = 0;
  // On the compacting node: the hold its last compaction stopped at (a node reading the
  // whole namespace), 0 for none.
  int64_t compaction_held_at = 0;
  uint16_t compaction_held_by = 0;
  std::vector<NodeView> nodes;
  // Re-replication this node leads (chunks it holds whose live copies are fewer than R).
  uint64_t repair_pending = 0, repaired_chunks = 0, repaired_bytes = 0, repair_failures = 0;
  uint64_t repair_bandwidth = 0;  // bytes per second, the cap
  // Passes over the chunks this node holds: on a change of one of them or of the members, at
  // most one a second, and every 10 s.
  uint64_t repair_passes = 0;
  // This node's namespace changes since it started: etcd transactions committed and the
  // changes they carried (more changes than transactions: group commit), changes refused as
  // conflicts (the fs built them again), names taken over from another node's file (a publish
  // over it), and changes refused at once while etcd was unreachable.
  uint64_t ns_transactions = 0, ns_changes = 0, ns_conflicts = 0, ns_names_taken_over = 0;
  uint64_t ns_refused_unreachable = 0;
};
// Where one file's data is (user.kvfs.location, kvfsctl where).
struct PlacementView {
  uint64_t chunk = 0;             // 0 for files without data
  std::vector<uint16_t> holders;  // nodes holding a copy, as the namespace lists them
  bool local = false;             // this node holds a copy now
};

class ChunkStore {
 public:
  virtual ~ChunkStore() = default;

  // The records recovered at open (every journaled object except the root), for building the
  // namespace. Called once at mount.
  virtual std::vector<ObjectRecord> Records() const = 0;
  // The same records one by one, so a namespace of millions of names is never held twice
  // (the cluster streams them from etcd in pages). A store whose read failed midway may read
  // everything again: it calls `start_over` first, and the caller forgets what `fn` got so far.
  virtual Status LoadRecords(const std::function<void(ObjectRecord&&)>& fn,
                             const std::function<void()>& start_over) {
    (void)start_over;
    for (ObjectRecord& rec : Records()) fn(std::move(rec));
    return Status::Ok();
  }
  // True when other nodes change the same namespace (the cluster): the fs then commits an
  // O_EXCL create at once, so that the name is taken everywhere before open returns.
  virtual bool SharedNamespace() const { return false; }
  // A fresh object id, never handed out before (persisted across restarts).
  virtual ObjectId NewId() = 0;
  // Persists a batch atomically. With durability=close it returns once the batch is on stable
  // storage; with durability=async once it is in memory and queued.
  virtual Status Apply(const MetaBatch& batch) = 0;
  // Apply in two steps, for callers that must keep their batches in order but should not wait
  // for one to be durable before submitting the next: Submit applies the batch in memory and
  // queues it behind every batch submitted before (it never waits for the disk) and returns a
  // token; AwaitDurable(token) returns once that batch is as durable as Apply would have made
  // it. Concurrent publishes submitted this way share one journal write + fdatasync (group
  // commit). Stores without a queue apply in Submit and have nothing to wait for.
  virtual Result<uint64_t> Submit(const MetaBatch& batch) {
    KVFS_RETURN_IF_ERROR(Apply(batch));
    return uint64_t{0};
  }
  virtual Status AwaitDurable(uint64_t /*token*/) { return Status::Ok(); }
  // Whether a namespace change would be refused before the store even looked at it (EROFS and
  // why: a cluster node cut off from etcd). The fs asks before it changes its tree, so that a
  // change refused up front never shows, as a failed call must not. OK by default: the local
  // engine's read-only state ends at a change that finds room again, so it must see changes.
  virtual Status CheckWritable() { return Status::Ok(); }
  // AwaitDurable, and what the batch became: the revision its puts now have and the layouts the
  // store replaced (see Committed). The fs waits with this.
  virtual Result<Committed> AwaitCommitted(uint64_t token) {
    KVFS_RETURN_IF_ERROR(AwaitDurable(token));
    return Committed{};
  }

  // A writer for a new version. `base` (may be null) is the content it starts from: the
  // published version for an overwrite without O_TRUNC, null for a new or truncated file.
  virtual Result<std::unique_ptr<ChunkWriter>> NewWriter(LayoutRef base) = 0;
  // Reads published content into `out`; every byte returned was checksum-verified. A mismatch
  // gives EIO. For tools and the store's own use (repair, serving peers): the fs reads through
  // NewReader only.
  virtual Result<size_t> Read(const LayoutRef& layout, uint64_t offset, void* out, size_t len) = 0;
  // Read for a peer that checks the bytes itself (the cluster's GET with kFlagDataDigests):
  // appends to `digests` the XXH3-64 of consecutive spans covering the bytes returned. Where
  // the store already keeps a span's digest (an engine segment stored raw and read whole),
  // those bytes are not checked here: the receiver's check is the only one, and a receiver
  // whose check fails reads again through Read, which checks and drops a corrupt copy.
  // EOPNOTSUPP where the store has no such path (the caller then uses Read).
  virtual Result<size_t> ReadForPeer(const LayoutRef& /*layout*/, uint64_t /*offset*/,
                                     void* /*out*/, size_t /*len*/,
                                     std::vector<DataDigest>* /*digests*/) {
    return Status::Error(EOPNOTSUPP, "this store has no peer read path");
  }
  // The reader of one published version for one open file (it holds the layout): verified bytes
  // in the store's buffers, with read-ahead for sequential readers. Every store has one; EINVAL
  // for a layout another store made.
  virtual Result<std::unique_ptr<ChunkReader>> NewReader(LayoutRef layout) = 0;

  // Reads every segment of a layout, checking checksums and decoding. EIO when any segment is
  // corrupt; then, like a failed Read, the owning record is dropped and the listener told.
  // Stores that cannot verify say EOPNOTSUPP.
  virtual Status Verify(const LayoutRef& /*layout*/) {
    return Status::Error(EOPNOTSUPP, "this store cannot verify");
  }
  // A digest of one version's content, the same on every node that reads it
  // (user.kvfs.checksum): derived from checksums the store already keeps, so it reads no data.
  // Null layout (an empty file): the digest of nothing. ENODATA when the store has none.
  virtual Result<uint64_t> ContentChecksum(const LayoutRef& layout) const = 0;
  // Bytes one published version takes on this node's devices, for st_blocks (du): by default
  // its size rounded up to 4 KiB; the engine counts its stored extents, so holes take none and
  // compressed segments less.
  virtual uint64_t DiskBytes(const Layout& layout) const { return (layout.size + 4095) & ~4095ull; }
  // The listener outlives the store's use of it; null detaches. Stores that never drop records
  // on their own ignore it.
  virtual void SetListener(StoreListener* /*listener*/) {}

  // A read hit on a published file (opened for reading) for the eviction policy; `stream` is
  // the reader (its pid). Stores without eviction ignore it.
  virtual void Touch(ObjectId /*id*/, uint64_t /*stream*/) {}
  // The fs has a write session open on `id` (true: from the open that starts it; false: at the
  // release of its last handle). Eviction never picks such a file, and Evict says EBUSY: the
  // fs never takes a name from under its writer, so a version published at close and evicted
  // before the release would leave a name the store had forgotten, its space never evictable
  // again. Stores whose eviction never removes a name (the cluster drops a local copy) and
  // stores that do not evict ignore it.
  virtual void SetWriting(ObjectId /*id*/, bool /*writing*/) {}
  // Evicts one published file now (journaled remove, counted, listener told). EPERM when it is
  // pinned, EBUSY while it is being written, EINVAL when it is not a file with data,
  // EOPNOTSUPP for stores that do not evict.
  virtual Status Evict(ObjectId /*id*/) {
    return Status::Error(EOPNOTSUPP, "this store does not evict");
  }

  virtual StoreStats Stats() const = 0;
  // The cluster as this node sees it; a single node describes itself (see ClusterView).
  virtual ClusterView Cluster() const {
    ClusterView v;
    NodeView self;
    self.state = "self";
    self.replicas = 1;
    const StoreStats s = Stats();
    self.capacity_bytes = s.capacity_bytes;
    self.used_bytes = s.used_bytes;
    v.nodes.push_back(self);
    return v;
  }
  // Where a file's data is; a single node holds everything itself.
  virtual PlacementView Placement(const LayoutRef& layout) const {
    PlacementView p;
    p.local = true;
    p.holders.push_back(0);
    (void)layout;
    return p;
  }
  // Marks a node (0: this one) as draining: no new copies go there, and its chunks are copied
  // elsewhere until each has R copies without it. EOPNOTSUPP on a single node.
  virtual Status SetDraining(uint16_t /*node*/, bool /*draining*/) {
    return Status::Error(EOPNOTSUPP, "not a cluster node");
  }
  // Flushes the journal and writes a checkpoint (clean shutdown, kvfsctl).
  virtual Status Sync() = 0;
};

}  // namespace kvfs
