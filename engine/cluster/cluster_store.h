// ClusterStore: the ChunkStore of a cluster node (docs/cluster.md). Metadata runs on etcd,
// chunk data moves peer to peer:
//
//   namespace   every record lives in etcd; the fs keeps the only local copy (its tree), built
//               by LoadRecords and kept current by the watch (NamespaceLog). A batch the fs
//               submits is one etcd transaction; publishes place their new chunk first.
//   membership  nodes register under etcd leases (Membership); no peer list.
//   chunks      a published version's bytes are one chunk with a cluster-unique id, kept in the
//               local engine as a record under a hidden directory ("held"), on R nodes: the
//               writer and the rendezvous ranking of the chunk. Renames never move data.
//   reads       the local copy if held, else a PeerReader over the holders (one timeout per
//               failing holder at most, then the next).
//   repair      a node that holds a chunk whose live copies are fewer than R, and leads its
//               holder list, copies it to the next ranked node (Repairer); an evicted or
//               corrupt local copy leaves the holder list.
//
// Also the RequestHandler peers talk to: GET and PUT of chunks by id, STATS.
#pragma once

#include <sys/uio.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "cluster_layout.h"
#include "history_compactor.h"
#include "kvfs/chunk_store.h"
#include "kvfs/etcd.h"
#include "kvfs/store.h"
#include "kvfs/transport.h"
#include "membership.h"
#include "namespace_keys.h"
#include "namespace_log.h"
#include "recent_publishes.h"
#include "task_pool.h"

namespace kvfs::cluster {

class Repairer;

// A node's name on the wire (HELLO, AUTH_OK) and in its peers' logs.
inline std::string NodeName(NodeId id) { return "node" + std::to_string(id); }

// The error a read gets when no holder served a chunk: EIO (corruption kept as such), with the
// last peer's answer in the message.
Status UnreadableChunk(uint64_t chunk, const Status& last);

// Traffic with one peer, as this node saw it.
struct PeerCounters {
  std::atomic<uint64_t> gets_sent{0}, puts_sent{0}, failures{0};
  std::atomic<uint64_t> hedged_around{0};  // pieces hedged to another holder while it was asked
};

class ClusterStore final : public ChunkStore, public RequestHandler {
 public:
  // Takes the local store (the engine). Connects to etcd, finds the chunks `local` holds,
  // listens for peers and registers this node (EEXIST: its id is taken by a live node).
  static Result<std::unique_ptr<ClusterStore>> Open(std::unique_ptr<ChunkStore> local,
                                                    ClusterOptions options);
  ~ClusterStore() override;
  // Leaves the cluster (lease revoked), stops serving and watching. Idempotent.
  void Shutdown();

  NodeId self() const { return options_.node_id; }
  uint16_t port() const;  // the peer server's port
  ChunkStore* local() { return local_.get(); }
  Membership* membership() { return membership_.get(); }
  NamespaceLog* log() { return log_.get(); }
  // Whether the local engine holds a copy of `chunk` (tests, kvfsctl where); with
  // retiring=false, a copy dropped a moment ago and still served does not count.
  bool Holds(uint64_t chunk, bool retiring = true) const;
  size_t held_chunks() const;
  // Re-checks every held chunk for missing copies now (tests; also runs on its own).
  void CheckRepairs();

  // ChunkStore
  std::vector<ObjectRecord> Records() const override;
  // Reads the namespace from etcd. A read that failed midway (etcd compacted its revision: this
  // node lost its compaction hold, frozen past its lease; or etcd stalled) is read again from
  // the start, five times in all.
  Status LoadRecords(const std::function<void(ObjectRecord&&)>& fn,
                     const std::function<void()>& start_over) override;
  bool SharedNamespace() const override { return true; }
  ObjectId NewId() override;
  Status Apply(const MetaBatch& batch) override;
  Result<uint64_t> Submit(const MetaBatch& batch) override;
  Status CheckWritable() override;
  Status AwaitDurable(uint64_t token) override { return AwaitCommitted(token).status(); }
  Result<Committed> AwaitCommitted(uint64_t token) override;
  Result<std::unique_ptr<ChunkWriter>> NewWriter(LayoutRef base) override;
  Result<size_t> Read(const LayoutRef& layout, uint64_t offset, void* out, size_t len) override;
  Result<std::unique_ptr<ChunkReader>> NewReader(LayoutRef layout) override;
  Status Verify(const LayoutRef& layout) override;
  Result<uint64_t> ContentChecksum(const LayoutRef& layout) const override;
  void SetListener(StoreListener* listener) override;
  void Touch(ObjectId id, uint64_t stream) override;
  Status Evict(ObjectId id) override;
  StoreStats Stats() const override;
  Status Sync() override;
  ClusterView Cluster() const override;
  PlacementView Placement(const LayoutRef& layout) const override;
  Status SetDraining(uint16_t node, bool draining) override;

  // RequestHandler (peers)
  Result<wire::GetReply> Get(const wire::GetRequest& req, std::span<uint8_t> out,
                             std::vector<DataDigest>* digests) override;
  Result<wire::PutReply> Put(const wire::PutRequest& req, std::span<const uint8_t> data) override;
  Result<StoreStats> Stats() override { return static_cast<const ClusterStore*>(this)->Stats(); }

  // For PeerReader and Repairer: a client for a live node (null when unknown or down), the
  // order to try holders in (live ones first, those whose lease is gone last), and failure notes.
  PeerClient* Client(NodeId node);
  // Dials the address this node is about to register, as a peer would. Another kvfs node
  // answering there (ENXIO, or EACCES: another secret), or something that is not kvfs
  // (EPROTO), refuses the start (that errno): peers would take it for this one. No answer is only
  // logged: the address may be one that only other hosts reach.
  Status CheckAdvertised(const std::string& address);
  // How this node dials `node`: its transport and secret, naming itself, expecting `node`.
  ClientOptions PeerClientOptions(NodeId node) const;
  // A suspect node is left out, so a frozen or cut-off peer costs one request timeout, not one
  // per read. When that leaves no one to ask, a read that waits for the bytes (`demanded`,
  // not a fetch ahead or a keep-alive) waits up to kProbeWait for a ping of the suspect
  // holders, and asks those that answered: a holder that resumed is read from at once, not
  // after the next ping of the housekeeping (1-2 s) or kSuspectFor.
  std::vector<NodeId> ReadOrder(const HolderList& holders, bool demanded = false);
  // Whether `node` let a request time out within kSuspectFor and no ping has found it since
  // (reads skip it but for ReadOrder's `demanded` ones, placement leaves it out).
  bool IsSuspect(NodeId node) const;
  // Whether placement may send `node` a copy: it is not suspect, and no ping of it failed since
  // the last one it answered (a refused connection, another secret, another node there).
  bool Placeable(NodeId node) const;
  // The nodes of `targets` a copy of `chunk` may go to, best first: the rendezvous ranking
  // less those placement leaves out (Placeable). Publishes and repair both take copies from it.
  std::vector<NodeId> CopyOrder(uint64_t chunk, std::span<const NodeId> targets) const;
  void NoteFailure(NodeId node, const Status& st);
  // Pings each suspect node (housekeeping, once a second); one that answers is no longer
  // suspect, so a healed partition is read from again within a second or two, not after
  // kSuspectFor.
  void ProbeSuspects();
  // Pings each live node (housekeeping, once a second) that joined, or whose last request from
  // this one failed, and that no ping has found since, and each that no ping has found for
  // kIdleCheck. So one this node cannot reach (its daemon gone or frozen while its lease
  // lives, cut off, another node or no kvfs at its address, another secret) is named in
  // .kvfs/nodes until it answers, and one that times out is suspect before a publish waits
  // on it.
  void CheckPeers();
  // One ping of `client` (Client(node)) with the request timeout; EHOSTUNREACH for none.
  Status Ping(PeerClient* client) const;
  // Pings `nodes` (those not being pinged already) on the push pool; a node that answers is
  // no longer suspect. `ahead_of_a_read`: a read waits for it, so a node found again a
  // moment ago is pinged anyway, and its answer serves the reads waiting for it without
  // ending the suspicion (see Peer::cleared_at).
  void Probe(const std::vector<NodeId>& nodes, bool ahead_of_a_read);
  PeerCounters* CountersFor(NodeId node);
  void NotePlacedShort(uint64_t chunk, size_t copies);  // logs at most once a second
  std::chrono::milliseconds request_timeout() const { return options_.request_timeout; }
  // A PeerReader's piece fetch, from its posting to its end: the store waits for these at
  // shutdown, so a reader being released need not wait for its GETs (a frozen holder held the
  // release for a request timeout).
  void FetchPosted();
  void FetchDone();
  // An open PeerReader's chunk. While its reader lives, the housekeeping thread asks the
  // holders (a GET of no bytes) for the chunk every kKeepReadEvery it did not fetch a piece:
  // a holder serves a copy that an unlink, a replacement or an eviction dropped for
  // kRetireGrace after it last served it, and so a reader that pauses keeps its open file's
  // bytes, as a local reader does.
  struct OpenRead {
    OpenRead(uint64_t c, uint64_t n, const HolderList& h) : chunk(c), size(n), holders(h) {}
    const uint64_t chunk;
    const uint64_t size;
    const HolderList holders;
    std::atomic<int64_t> last_get_ns{0};  // steady clock
    void NoteGet();
  };
  std::shared_ptr<OpenRead> RegisterRead(uint64_t chunk, uint64_t size, const HolderList& holders);
  // Copies a held chunk to `node` (PUT), for placement and repair.
  Status PushChunk(uint64_t chunk, const LayoutRef& local, NodeId node);
  const ClusterOptions& options() const { return options_; }

 private:
  friend class Repairer;
  // A chunk this node's engine holds: its engine record and the namespace record naming it.
  struct Holding {
    ObjectId local_id = kInvalidId;
    LayoutRef local;
    uint32_t flags = 0;  // the engine record's flags (the namespace record's pin mirrored)
    ObjectId record = kInvalidId;  // 0: no namespace record names it (yet)
    // Held before this start (from the engine), not a copy taken since: only such a copy can be
    // one the namespace read at start has the last word on (LoadRecords).
    bool from_before_start = false;
    uint64_t revision = 0;
    HolderList holders;
    std::chrono::steady_clock::time_point since = std::chrono::steady_clock::now();
    // When a peer was last served bytes of it: an eviction within kRetireGrace of that keeps
    // the copy served a moment longer (QueueLocalLoss).
    std::optional<std::chrono::steady_clock::time_point> peer_read;
  };
  // The local engine's own removals (eviction, corrupt data) of held chunks.
  class LocalEvents : public StoreListener {
   public:
    explicit LocalEvents(ClusterStore* cs) : cs_(cs) {}
    void OnDropped(ObjectId id) override { cs_->QueueLocalLoss(id, true); }
    void OnEvicted(ObjectId id) override { cs_->QueueLocalLoss(id, false); }

   private:
    ClusterStore* cs_;
  };

  ClusterStore(std::unique_ptr<ChunkStore> local, ClusterOptions options);
  Status Start();
  Status LoadHoldings();
  // Keeps `layout` as the held chunk `chunk` (engine record, durable as the engine is).
  Status Hold(uint64_t chunk, const LayoutRef& layout, uint32_t flags);
  // Drops the local copy (open readers keep their LayoutRef).
  void DropHolding(uint64_t chunk, const char* why);
  // The local copy of `chunk` (with retiring, also one dropped within kRetireGrace), or null.
  LayoutRef HeldLayout(uint64_t chunk, bool retiring = true) const;
  LayoutRef RetiringLocked(uint64_t chunk) const;  // mu_ held: a retiring copy, or null
  // HeldLayout for a peer's GET, which it stamps (Holding::peer_read); `local_id` is the
  // engine id of a held copy (kInvalidId for a retiring one).
  struct PeerCopy {
    LayoutRef layout;
    ObjectId local_id = kInvalidId;
  };
  PeerCopy CopyForPeer(uint64_t chunk);
  // The stream a peer's read reports to the eviction policy (a local reader's is its pid; no
  // pid is this large).
  static constexpr uint64_t kPeerReadStream = ~uint64_t{0};
  // mu_ held: keeps `local` served for kRetireGrace; copies past the budget (oldest first)
  // go to `freed`, which the caller releases after mu_.
  void RetireLocked(uint64_t chunk, LayoutRef local, std::vector<LayoutRef>* freed);
  // Frees the retiring copies whose grace ended. `resumed`: this process did not run for a
  // while (see the housekeeping loop); every grace starts again instead.
  void ExpireRetiring(bool resumed);
  // Housekeeping, once a second: the keep-alive GETs of open reads (OpenRead), on the
  // readers' pool.
  void KeepReadsAlive();
  static TaskPool& FetchPool();  // shared by every PeerReader of the process
  // Housekeeping, once a second: the lowest live node compacts etcd's history
  // (history_compactor.h).
  void CompactHistory();
  // mu_ held: takes the oldest retiring copy off the queue (the caller releases it after mu_).
  LayoutRef PopRetiring();
  // A fresh local layout of a batch being placed (Prepare): the placement this batch makes
  // (`mine`: it tells the batches that wait on it what it became) or the one it waits for
  // (`theirs`: an earlier batch's placement of the same layout).
  struct PendingPlacement {
    size_t put = 0;  // index in the batch's puts
    std::shared_ptr<std::promise<LayoutRef>> mine;
    std::shared_future<LayoutRef> theirs;
  };
  // Publishes the fresh local layouts of a batch: a chunk each, placed on its holders, or the
  // chunk an earlier batch's placement of the same layout made.
  Result<MetaBatch> Prepare(MetaBatch batch, std::vector<PendingPlacement> placements,
                            std::shared_ptr<std::vector<Committed::NewLayout>> out);
  // Prepare's placement of one layout: the chunk an earlier batch placed (`theirs`), or one
  // placed on its holders now and told to the batches that wait on it (`mine`).
  Result<LayoutRef> PlaceFor(const LayoutRef& fresh, const PendingPlacement& placement);
  // Tells the batches waiting on `placement` (its `mine`) what `fresh` became: `cluster`, or
  // null when the placement failed or its batch was refused first.
  void AnswerPlacement(const LayoutRef& fresh, const PendingPlacement& placement,
                       LayoutRef cluster);
  Result<LayoutRef> PlaceChunk(const LayoutRef& fresh);
  // After a commit or a watched change: holdings follow the records.
  void NoteRecords(const std::vector<ObjectRecord>& puts, const std::vector<ObjectId>& removes);
  void OnRemote(std::vector<ObjectRecord>&& puts, std::vector<ObjectId>&& removes);
  void OnResync(const std::vector<ObjectId>& present, int64_t revision);
  void OnReset(ObjectId id, const ObjectRecord* rec, ResetOrigin origin);
  // The engine evicted or dropped a held copy: it stops being held at once, so the space is
  // free when the engine's writer that evicted it retries; the holder lists follow later.
  void QueueLocalLoss(ObjectId local_id, bool corrupt);
  void HandleLocalLosses();
  // Takes this node out of the holder list of `record` (its copy is gone); the record goes
  // when no holder is left. True when done or nothing to do; false when etcd could not be
  // read or written, or the record changed under every try.
  bool LeaveHolderList(ObjectId record, uint64_t chunk, const char* why);
  void MembershipChanged();
  // Reads [offset, offset + len) of a chunk this node does not hold through a PeerReader and
  // hands each span to `take` with its offset, in order.
  Status ReadRemote(const ClusterLayout& layout, uint64_t offset, uint64_t len,
                    const std::function<Status(uint64_t, const iovec&)>& take);
  // A local writer started from a copy of `base` (a cluster layout this node may not hold).
  Result<std::unique_ptr<ChunkWriter>> CopyRemoteBase(const LayoutRef& base);

  std::unique_ptr<ChunkStore> local_;
  ClusterOptions options_;
  NamespaceKeys keys_;
  std::unique_ptr<etcd::Client> etcd_;
  std::unique_ptr<PeerServer> server_;
  std::unique_ptr<Membership> membership_;
  std::unique_ptr<NamespaceLog> log_;
  std::unique_ptr<Repairer> repair_;
  // Placement of published chunks (Prepare; its first PUT runs there too) and the further
  // PUTs of one placement round. Two pools because a placement waits on its PUTs: pushes never
  // queue behind the placements waiting for them.
  std::unique_ptr<TaskPool> placing_ = std::make_unique<TaskPool>(8);
  std::unique_ptr<TaskPool> pushing_ = std::make_unique<TaskPool>(8);
  LocalEvents local_events_;
  std::atomic<StoreListener*> listener_{nullptr};
  std::atomic<uint64_t> next_id_{1};
  bool loaded_ = false;

  mutable std::mutex mu_;
  ObjectId chunk_dir_ = kInvalidId;             // the engine's hidden directory of held chunks
  std::unordered_map<uint64_t, Holding> held_;  // chunk -> holding
  std::unordered_map<ObjectId, uint64_t> chunk_of_local_;   // engine id -> chunk
  std::unordered_map<ObjectId, uint64_t> chunk_of_record_;  // namespace id -> held chunk
  // Copies dropped a moment ago, still served until `until` (see DropHolding). Their extents
  // are out of the engine's index, so its eviction cannot reclaim them: at most
  // retire_budget_ bytes wait, oldest freed first, or a node publishing faster than the grace
  // would fill its devices with copies it no longer holds and fail writes with ENOSPC.
  struct Retiring {
    uint64_t chunk;
    LayoutRef local;
    uint64_t bytes;
    std::chrono::steady_clock::time_point until;
  };
  static constexpr std::chrono::seconds kRetireGrace{5};
  static constexpr std::chrono::milliseconds kKeepReadEvery{2000};  // well within the grace
  static constexpr size_t kKeepReadsPerRound = 256;
  // A sixteenth of the capacity: the engine's eviction still reaches its watermarks.
  static constexpr uint64_t kRetireShare = 16;
  std::deque<Retiring> retiring_;
  std::mutex reads_mu_;
  std::vector<std::weak_ptr<OpenRead>> reads_;  // under reads_mu_; expired ones pruned
  uint64_t retiring_bytes_ = 0;
  uint64_t retire_budget_ = 0;
  // Local layouts published recently -> their cluster layout, so a batch that still carries
  // the local layout (built before the publish returned) means that version, not a new one.
  RecentPublishes published_;
  // Local layouts being placed now -> what their placement becomes (null: it failed). A batch
  // submitted meanwhile that carries the same layout (a rename racing the close that publishes
  // the file, on another thread) waits for it: it placed that version again as a new chunk,
  // committed after the close's, and the close's chunk was dropped as replaced while the fs
  // showed it (reads of the file failed on that node for good).
  std::unordered_map<const Layout*, std::shared_future<LayoutRef>> placing_now_;
  // Pending commits: the layouts their preparation replaced, and how many puts and removes the
  // fs gave (the log may add the holders of names it took over).
  struct PendingCommit {
    std::shared_ptr<std::vector<Committed::NewLayout>> replaced;
    size_t puts = 0, removes = 0;
    MetaBatch touched;  // the batch's objects (as removes) and names, to reset should it fail
    // The placement of the batch's chunks (none without chunks to place). When it failed, the
    // batch never reached etcd: its EROFS is this node's store turned read-only, not etcd
    // unreachable (whose refusals are reset already).
    std::shared_future<Result<MetaBatch>> placed;
  };
  std::unordered_map<uint64_t, PendingCommit> pending_;

  // Peers.
  struct Peer {
    std::string address;
    std::unique_ptr<PeerClient> client;
    std::unique_ptr<PeerCounters> counters;
    std::chrono::steady_clock::time_point suspect_until{};
    bool probing = false;  // a ping (Probe, CheckPeers) is under way
    // When a ping last ended a suspicion: a node suspected again soon after (it answers pings
    // but not requests, say a stuck disk) is not probed again; it waits out kSuspectFor.
    // Only a read with no other holder pings it meanwhile (ReadOrder), and asks it once it
    // answers; placement and other reads still leave it out.
    std::chrono::steady_clock::time_point cleared_at{};
    std::chrono::steady_clock::time_point answered_at{};  // the last ping it answered
    bool recheck = false;     // it joined, or a request failed, since its last answered ping
    std::string unreachable;  // why its last ping failed (empty: none failed since one answered)
  };
  mutable std::mutex peers_mu_;
  std::condition_variable probe_cv_;  // a ping of Probe ended (peers_mu_)
  std::map<NodeId, Peer> peers_;
  // Ends a ping of `p` (peers_mu_ held): an answer clears what its failures marked.
  static void NoteProbed(Peer& p, const Status& st);
  // Why the last ping of `node` failed, if none has answered since (empty otherwise).
  std::string Unreachable(NodeId node) const;

  // Nodes ever listed as members (id -> address), for reporting the departed as down.
  mutable std::mutex seen_mu_;
  mutable std::map<NodeId, std::string> seen_;
  std::map<NodeId, std::string> live_;  // seen_mu_: the live members' addresses, last change
  // What of the membership repair depends on (seen_mu_): etcd reachable, and each member with
  // its drain marks. A pass follows each change of it.
  struct RepairView {
    bool reachable = false;
    std::vector<std::tuple<NodeId, bool, bool>> members;  // id, draining, drained
    bool operator==(const RepairView&) const = default;
  };
  RepairView repair_view_;

  // Held copies the engine evicted or found corrupt: their space is already released
  // (QueueLocalLoss); leaving the holder lists in etcd is the housekeeping thread's (losses_).
  // So is leaving a list that names this node for a copy it does not have (NoteRecords).
  enum class LossKind { kEvicted, kCorrupt, kNotHere };
  struct LocalLoss {
    uint64_t chunk;
    ObjectId record;  // kInvalidId: no namespace record named it yet
    LossKind kind;
    uint32_t tries = 0;  // RetryLeaves' tries while etcd answered
  };
  void QueueLeave(const LocalLoss& loss);
  // Logs the loss and leaves its holder list; false: etcd could not be asked or kept refusing.
  bool Leave(const LocalLoss& loss);
  // The housekeeping's, once a second: the leaves that failed, again while etcd answers.
  void RetryLeaves();
  static constexpr uint32_t kLeaveTries = 10;
  std::vector<LocalLoss> leaves_to_retry_;  // the housekeeping thread's

  std::thread house_;
  HistoryCompactor compactor_;  // the housekeeping thread's
  // The hold the last compaction stopped at (0: none), for Cluster().
  std::atomic<int64_t> compaction_held_at_{0};
  std::atomic<uint16_t> compaction_held_by_{0};
  std::atomic<int64_t> compacted_revision_{0};  // compactor_.compacted(), for Cluster()
  std::atomic<uint64_t> refused_up_front_{0};   // CheckWritable's refusals
  // Chunks placed with fewer than R copies, and when that was last logged (steady ns): one
  // line a second at most, since with a node cut off every publish is placed short.
  std::atomic<uint64_t> placed_short_{0}, placed_short_logged_{0};
  std::atomic<int64_t> placed_short_logged_ns_{0};
  std::mutex house_mu_;
  std::condition_variable house_cv_;
  std::mutex fetch_mu_;
  std::condition_variable fetch_cv_;
  size_t fetches_ = 0;  // under fetch_mu_: PeerReader pieces posted and not yet done
  bool stop_ = false;
  std::vector<LocalLoss> losses_;  // under house_mu_: waking the housekeeping thread
  std::atomic<bool> was_reachable_{true};
};

}  // namespace kvfs::cluster
