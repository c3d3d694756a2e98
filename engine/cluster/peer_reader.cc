#include "peer_reader.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>

#include "cluster_store.h"
#include "namespace_keys.h"
#include "task_pool.h"

namespace kvfs::cluster {
namespace {

std::atomic<uint64_t> g_held_bytes{0};  // in all readers' pieces, against kAheadBudget

// Hedges run on their own threads: the fetch pool's may all be waiting on a frozen holder.
TaskPool& HedgePool() {
  static TaskPool* pool = new TaskPool(4);  // shared by every reader of the process
  return *pool;
}

bool Hedgeable(const HolderList& holders, NodeId self) {
  return std::count_if(holders.begin(), holders.end(), [&](NodeId n) { return n != self; }) >= 2;
}

}  // namespace

std::chrono::milliseconds PeerReader::HedgeDelay(std::chrono::milliseconds request_timeout) {
  return std::clamp<std::chrono::milliseconds>(request_timeout / 8, std::chrono::milliseconds(10),
                                               std::chrono::milliseconds(250));
}

PeerReader::Piece::Piece(size_t n, bool a) : charged(n), ahead(a) {
  g_held_bytes.fetch_add(charged);
}

PeerReader::Piece::~Piece() { g_held_bytes.fetch_sub(charged); }

PeerReader::Shared::Shared(ClusterStore* s, uint64_t c, uint64_t n, const HolderList& h)
    : store(s),
      chunk(c),
      size(n),
      holders(h),
      open(s->RegisterRead(c, n, h)),
      hedgeable(Hedgeable(h, s->self())) {}

PeerReader::PeerReader(ClusterStore* store, TaskPool* pool, uint64_t chunk, uint64_t size,
                       const HolderList& holders)
    : pool_(pool), size_(size), shared_(std::make_shared<Shared>(store, chunk, size, holders)) {}

PeerReader::~PeerReader() {
  // No wait for the GETs under way: they own their pieces and buffers, and the store waits for
  // them at shutdown. Those not started yet see `released` and skip their GET.
  std::lock_guard lock(shared_->mu);
  shared_->released = true;
  shared_->pieces.clear();  // done pieces give their bytes back to the budget now
}

void PeerReader::Request(uint64_t index, bool ahead) {
  if (index * kPiece >= size_ || shared_->pieces.count(index)) return;
  const size_t len = static_cast<size_t>(std::min<uint64_t>(kPiece, size_ - index * kPiece));
  if (ahead && g_held_bytes.load() + len > kAheadBudget) return;
  auto piece = std::make_shared<Piece>(len, ahead);
  shared_->pieces[index] = piece;
  shared_->store->FetchPosted();
  pool_->Post([shared = shared_, index, piece] { Fetch(shared, index, piece, /*hedge=*/false); });
}

void PeerReader::Fetch(const std::shared_ptr<Shared>& shared, uint64_t index,
                       const std::shared_ptr<Piece>& piece, bool hedge) {
  ClusterStore* const store = shared->store;
  const uint64_t chunk = shared->chunk;
  const uint64_t offset = index * kPiece;
  const size_t len = static_cast<size_t>(std::min<uint64_t>(kPiece, shared->size - offset));
  bool skip;
  {
    std::lock_guard lock(shared->mu);
    skip = shared->released || piece->done;  // done: the other GET of the piece served it
  }
  Status last = Status::IoError("chunk " + Hex16(chunk) + " has no reachable holder");
  size_t got = 0;
  NodeId avoided = 0;  // a hedge: the holder it asked last
  std::shared_ptr<uint8_t[]> buf;
  if (skip) {
    last = Status::Error(ECANCELED, "reader released or piece served");
  } else {
    std::vector<NodeId> order =
        store->ReadOrder(shared->holders, /*demanded=*/hedge || !piece->ahead);
    {
      std::lock_guard lock(shared->mu);
      // Holders that lost a race to a hedge in this reader go last.
      std::stable_partition(order.begin(), order.end(),
                            [&](NodeId n) { return shared->slow.count(n) == 0; });
      // A hedge goes around the holder the first GET waits on. When that GET has not started,
      // the pool is busy, most likely with GETs waiting on the holder every GET asks first:
      // unless this reader already moved a slow one last, the hedge goes around that one.
      if (hedge && !order.empty()) {
        avoided = piece->asking != 0 ? piece->asking : shared->slow.empty() ? order.front() : 0;
        auto it = std::find(order.begin(), order.end(), avoided);
        if (it != order.end()) std::rotate(it, it + 1, order.end());
      }
    }
    if (avoided != 0) {
      if (PeerCounters* c = store->CountersFor(avoided)) ++c->hedged_around;
    }
    // Not zero-filled: the GET overwrites every byte that is served.
    buf = std::make_shared_for_overwrite<uint8_t[]>(len);
    for (NodeId node : order) {
      {
        std::lock_guard lock(shared->mu);
        if (piece->done) break;  // the other GET of the piece served it
        if (!hedge) piece->asking = node;
      }
      PeerClient* client = store->Client(node);
      if (client == nullptr) continue;
      wire::GetRequest req;
      req.key = ChunkName(chunk);
      req.offset = offset;
      req.length = len;
      CallOptions call;
      call.timeout = store->request_timeout();
      if (PeerCounters* c = store->CountersFor(node)) ++c->gets_sent;
      shared->open->NoteGet();
      auto r = client->Get(req, std::span<uint8_t>(buf.get(), len), call);
      if (r.ok() && r->length == len) {
        got = len;
        break;
      }
      last =
          r.ok() ? Status::IoError("short answer from node " + std::to_string(node)) : r.status();
      store->NoteFailure(node, last);
      spdlog::debug("cluster: piece {} of chunk {} from node {}: {}", index, Hex16(chunk), node,
                    last.ToString());
    }
  }
  {
    std::lock_guard lock(shared->mu);
    --piece->fetches;
    if (!piece->done && got == len) {
      piece->done = true;
      piece->buf = std::move(buf);
      piece->len = len;
      // The first GET still waits on the holder this hedge went around: that one is slow or
      // frozen. This reader asks it last from now on and hedges its pieces under way at once.
      if (hedge && avoided != 0 && piece->asking == avoided) shared->slow.insert(avoided);
    } else if (!piece->done && piece->fetches == 0) {
      piece->done = true;
      piece->status = UnreadableChunk(chunk, last);
    }
    if (!hedge) piece->asking = 0;
  }
  shared->cv.notify_all();
  store->FetchDone();  // last: the store may be waiting to shut down
}

void PeerReader::Prefetch(uint64_t offset, size_t len) {
  if (offset >= size_ || len == 0) return;
  const uint64_t end = std::min<uint64_t>(size_, offset + len);
  const uint64_t first = offset / kPiece;
  const uint64_t last = std::min<uint64_t>((end - 1) / kPiece, first + kAhead - 1);
  std::lock_guard lock(shared_->mu);
  for (uint64_t i = first; i <= last; ++i) Request(i, /*ahead=*/true);
}

void PeerReader::Await(std::unique_lock<std::mutex>& lock, uint64_t index,
                       const std::shared_ptr<Piece>& piece) {
  if (!piece->done && !piece->hedged && shared_->hedgeable) {
    // Hedged at once: a piece whose GET waits on a holder already found slow, or has not
    // started while this reader knows one (the pool is likely busy with GETs waiting on it).
    const bool at_once =
        piece->asking != 0 ? shared_->slow.count(piece->asking) != 0 : !shared_->slow.empty();
    if (!at_once) {
      shared_->cv.wait_for(lock, HedgeDelay(shared_->store->request_timeout()),
                           [&] { return piece->done; });
    }
    if (!piece->done && !piece->hedged) {
      piece->hedged = true;
      ++piece->fetches;
      shared_->store->FetchPosted();
      HedgePool().Post(
          [shared = shared_, index, piece] { Fetch(shared, index, piece, /*hedge=*/true); });
    }
  }
  shared_->cv.wait(lock, [&] { return piece->done; });
}

Result<ReadView> PeerReader::Read(uint64_t offset, size_t len) {
  ReadView view;
  if (offset >= size_ || len == 0) return view;
  len = static_cast<size_t>(std::min<uint64_t>(len, size_ - offset));
  const uint64_t first = offset / kPiece, last = (offset + len - 1) / kPiece;
  std::unique_lock lock(shared_->mu);
  // Pieces behind the reader are done with; a jump elsewhere drops what was read ahead. A
  // piece of this read that failed is fetched again: its GET may have gone ahead of any READ
  // (at open, or read-ahead), and its holder may be back by now.
  for (auto it = shared_->pieces.begin(); it != shared_->pieces.end();) {
    const bool elsewhere = it->first < first || it->first > last + kAhead;
    const bool failed = it->first <= last && !it->second->status.ok();
    if ((elsewhere || failed) && it->second->done) {
      it = shared_->pieces.erase(it);
    } else {
      ++it;
    }
  }
  for (uint64_t i = first; i <= last + kAhead; ++i) Request(i, /*ahead=*/i > last);
  // Taken before waiting: while this read waits, a concurrent READ further on may drop these
  // pieces from the map (they are behind it).
  std::vector<std::shared_ptr<Piece>> wanted;
  for (uint64_t i = first; i <= last; ++i) wanted.push_back(shared_->pieces.at(i));
  for (uint64_t i = first; i <= last; ++i) {
    std::shared_ptr<Piece>& piece = wanted[i - first];
    Await(lock, i, piece);
    if (!piece->status.ok() && piece->ahead) {
      // Fetched before this READ waited for it, it gave up on holders that were suspect
      // without waiting for their ping (one may have resumed since): once more, as the READ's.
      auto it = shared_->pieces.find(i);
      if (it != shared_->pieces.end() && it->second == piece) shared_->pieces.erase(it);
      Request(i, /*ahead=*/false);
      piece = shared_->pieces.at(i);
      Await(lock, i, piece);
    }
    if (!piece->status.ok()) {
      Status st = piece->status;
      auto it = shared_->pieces.find(i);
      if (it != shared_->pieces.end() && it->second == piece) shared_->pieces.erase(it);
      return st;  // a later read tries again
    }
    const uint64_t base = i * kPiece;
    const uint64_t from = std::max(offset, base);
    const uint64_t to = std::min<uint64_t>(offset + len, base + piece->len);
    view.spans.push_back({piece->buf.get() + (from - base), static_cast<size_t>(to - from)});
    view.holds.push_back(piece->buf);
    view.size += to - from;
  }
  return view;
}

}  // namespace kvfs::cluster
