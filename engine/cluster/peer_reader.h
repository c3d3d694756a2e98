// PeerReader: the ChunkReader of a chunk this node does not hold. It fetches the chunk from its
// holders in pieces, several ahead of a sequential reader and in parallel over the peer's
// connections, and moves on to the next holder when one fails (a dead, frozen or partitioned
// holder costs one request timeout, once: the store then skips it until a ping finds it again,
// and a READ with no other holder waits a moment for that ping: ClusterStore::ReadOrder).
//
// A READ does not wait that timeout when another holder could serve: a piece it waits for
// that has not arrived within HedgeDelay() is asked of the next holder too ("hedged"), and the
// first answer serves it. A holder that lost such a race while still silent is asked last by
// this reader from then on, and the pieces waiting on it (or not started: the fetch pool is
// then likely full of GETs waiting on it) are hedged at once. So a reader that finds a holder
// frozen pays about one HedgeDelay(), not a request timeout per piece; once the first GETs
// time out, the store skips the holder for every reader (ClusterStore::ReadOrder).
#pragma once

#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <vector>

#include "cluster_layout.h"
#include "cluster_store.h"
#include "kvfs/chunk_reader.h"

namespace kvfs::cluster {

class TaskPool;

class PeerReader final : public ChunkReader {
 public:
  static constexpr size_t kPiece = 2u << 20;  // bytes per GET
  static constexpr size_t kAhead = 4;         // pieces fetched ahead of the reader
  // Pieces fetched ahead of a reader or prefetched at open are skipped while all readers of
  // the process together hold more than this (a piece a READ waits for is always fetched):
  // many handles opened and barely read must not pin 10 MiB each.
  static constexpr uint64_t kAheadBudget = 256u << 20;

  PeerReader(ClusterStore* store, TaskPool* pool, uint64_t chunk, uint64_t size,
             const HolderList& holders);
  ~PeerReader() override;
  Result<ReadView> Read(uint64_t offset, size_t len) override;
  void Prefetch(uint64_t offset, size_t len) override;  // GETs up to kAhead pieces of the range

  // How long a READ waits for a piece before it asks another holder too: an eighth of the
  // request timeout, within [10, 250] ms (a 2 MiB piece takes a few ms on a healthy link).
  static std::chrono::milliseconds HedgeDelay(std::chrono::milliseconds request_timeout);

 private:
  struct Piece {
    Piece(size_t charged, bool ahead);
    ~Piece();  // gives its bytes back to the budget
    std::shared_ptr<uint8_t[]> buf;
    size_t len = 0;
    bool done = false;
    Status status;
    const size_t charged;  // counted against kAheadBudget from creation
    // Fetched with no READ waiting for it: it does not wait for a ping of suspect holders
    // (ClusterStore::ReadOrder), so a READ that finds it failed asks once more.
    const bool ahead;
    int fetches = 1;      // GETs of it under way or queued: its first, and a hedge
    bool hedged = false;  // a hedge was posted
    NodeId asking = 0;    // the holder its first GET waits on (0: not started, or finished)
  };
  // What a fetch needs, shared with the fetches under way: a released reader does not wait
  // for them (they finish into pieces nobody reads; the store outlives them) and the ones not
  // started yet are skipped.
  struct Shared {
    Shared(ClusterStore* s, uint64_t c, uint64_t n, const HolderList& h);
    ClusterStore* const store;
    const uint64_t chunk;
    const uint64_t size;
    const HolderList holders;
    // Registered with the store while the reader lives: its holders keep the copy it reads
    // from served while it pauses (ClusterStore::OpenRead).
    const std::shared_ptr<ClusterStore::OpenRead> open;
    std::mutex mu;
    std::condition_variable cv;
    std::map<uint64_t, std::shared_ptr<Piece>> pieces;  // by index
    bool released = false;                              // the reader is gone
    const bool hedgeable;   // another node than the first holder asked could serve
    std::set<NodeId> slow;  // lost a race to a hedge while silent: asked last, hedged at once
  };
  // Starts the GET of piece `index` unless it exists or is past the end; one that no READ is
  // waiting for (`ahead`) only within kAheadBudget. shared_->mu held.
  void Request(uint64_t index, bool ahead);
  // Waits until `piece` (index `index`) is done, hedging it when it is late. Lock held.
  void Await(std::unique_lock<std::mutex>& lock, uint64_t index,
             const std::shared_ptr<Piece>& piece);
  // A GET of the piece. A hedge asks first another holder than the one the first GET waits on
  // (or would ask first, when it has not started: the pool may be busy with GETs waiting on a
  // frozen holder, which is why hedges have their own threads).
  static void Fetch(const std::shared_ptr<Shared>& shared, uint64_t index,
                    const std::shared_ptr<Piece>& piece, bool hedge);

  TaskPool* const pool_;
  const uint64_t size_;
  const std::shared_ptr<Shared> shared_;
};

}  // namespace kvfs::cluster
