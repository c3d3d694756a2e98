#include "prefix_policy.h"

#include <algorithm>
#include <string>

#include "policy_blob.h"

namespace kvfs::eviction {
namespace {
// Streams are forgotten wholesale past this many (a burst only spans one request anyway).
constexpr size_t kMaxStreams = 1 << 16;
}  // namespace

PrefixPolicy::PrefixPolicy(const PolicyOptions& options)
    : options_(options), protected_fraction_(options.prefix_protected_fraction) {}

ObjectId PrefixPolicy::Observe(const AccessContext& ctx, bool write, uint64_t* serial) {
  if (bursts_.size() >= kMaxStreams && !bursts_.count(ctx.stream)) bursts_.clear();
  Burst& b = bursts_[ctx.stream];
  // A new burst: an explicit restart of the sequence (position known and not increasing), a
  // pause longer than the window, or (positions unknown) a read after a write: a request
  // reads its cached prefix before it writes the rest. Otherwise accesses extend the chain.
  bool fresh = b.serial == 0;
  if (ctx.position != 0 && ctx.position <= b.last_position) fresh = true;
  if (ctx.position == 0 && !write && b.last_was_write) fresh = true;
  if (ctx.time_ms != 0 && b.last_time_ms != 0 &&
      ctx.time_ms > b.last_time_ms + options_.prefix_burst_window_ms) {
    fresh = true;
  }
  ObjectId parent = kInvalidId;
  if (fresh) {
    // The chunk the stream wrote last before this new burst ended its request: unless it was
    // read again since, it is a tail, the least likely chunk to be read again.
    if (b.last_was_new) {
      auto it = entries_.find(b.last_id);
      if (it != entries_.end() && !it->second.pinned && it->second.segment == kProbation) {
        Unlink(b.last_id, it->second);
        Place(b.last_id, it->second, kTail, kInvalidId, it->second.burst);
      }
    }
    b.serial = ++next_burst_;
    b.last_id = kInvalidId;
  } else if (ctx.position != 0 || !(write && b.last_was_write)) {
    // Without positions, writes in a row may be one request's new blocks or several requests
    // that found nothing cached: only an explicit link (user.kvfs.parent) chains them.
    parent = b.last_id;
  }
  b.last_time_ms = ctx.time_ms;
  b.last_position = ctx.position;
  b.last_was_new = false;
  b.last_was_write = write;
  *serial = b.serial;
  return parent;
}

void PrefixPolicy::Place(ObjectId id, Entry& e, Segment segment, ObjectId parent_hint,
                         uint64_t serial) {
  if (segment == kProtected) e.reread = true;
  // A chain is ordered tail first: a block placed in the same burst as its parent goes right
  // before the parent, and never into a segment evicted after the parent's (a child without
  // its parent is unreachable). Otherwise it goes to the back (most recent).
  auto p = entries_.find(parent_hint);
  const bool chained = p != entries_.end() && p->first != id && !p->second.pinned &&
                       p->second.burst == serial && Rank(p->second.segment) <= Rank(segment);
  if (chained) segment = p->second.segment;
  e.segment = segment;
  e.burst = serial;
  if (e.pinned) return;
  RecencyList& list = segments_[segment];
  if (chained)
    list.InsertBefore(id, parent_hint);
  else
    list.PushBack(id);
  segment_bytes_[segment] += e.bytes;
}

void PrefixPolicy::Unlink(ObjectId id, Entry& e) {
  if (e.pinned) return;
  if (segments_[e.segment].Erase(id)) segment_bytes_[e.segment] -= e.bytes;
}

void PrefixPolicy::Rebalance() {
  const double cap = protected_fraction_ * static_cast<double>(bytes_);
  while (static_cast<double>(segment_bytes_[kProtected]) > cap) {
    auto victim = segments_[kProtected].PopFront();
    if (!victim) break;
    Entry& e = entries_.at(*victim);
    segment_bytes_[kProtected] -= e.bytes;
    e.segment = kDemoted;
    segments_[kDemoted].PushBack(*victim);
    segment_bytes_[kDemoted] += e.bytes;
  }
}

void PrefixPolicy::Adapt(bool reread, uint64_t bytes) {
  const double step = options_.prefix_adapt_step;
  if (step <= 0) return;
  // ARC: the step is larger when the ghost set that was hit is the smaller one.
  const double rereads = static_cast<double>(reread_ghosts_.size());
  const double others = static_cast<double>(ghosts_.size()) - rereads;
  const double share =
      static_cast<double>(bytes) / static_cast<double>(std::max<uint64_t>(bytes_, 1));
  if (reread) {
    protected_fraction_ += step * share * std::max(1.0, others / std::max(rereads, 1.0));
  } else {
    protected_fraction_ -= step * share * std::max(1.0, rereads / std::max(others, 1.0));
  }
  protected_fraction_ = std::clamp(protected_fraction_, 0.0, 1.0);
}

void PrefixPolicy::Track(ObjectId id, uint64_t bytes, const TrackHints& hints) {
  uint64_t serial;
  ObjectId learned = Observe(hints.context, /*write=*/true, &serial);
  ObjectId parent = hints.parent != kInvalidId ? hints.parent : learned;
  auto it = entries_.find(id);
  if (it != entries_.end()) {
    // Republished: the block was wanted again (just not reachable); that is a reuse.
    Entry& e = it->second;
    Unlink(id, e);
    bytes_ = bytes_ - e.bytes + bytes;
    e.bytes = bytes;
    e.stamp = ++clock_;
    if (parent != kInvalidId) e.parent = parent;
    Place(id, e, kProtected, parent, serial);
  } else {
    Entry e;
    e.bytes = bytes;
    e.parent = parent;
    e.stamp = ++clock_;
    e.pinned = pinned_untracked_.erase(id) > 0;
    bytes_ += bytes;
    Segment segment = kProbation;
    if (ghosts_.Erase(id)) {
      // Evicted too early last time; which kind of block it was says which side was too small.
      const bool reread = reread_ghosts_.erase(id) > 0;
      Adapt(reread, bytes);
      segment = kProtected;
    } else if (hints.partial) {
      segment = kTail;
    }
    Place(id, entries_[id] = e, segment, parent, serial);
    bursts_[hints.context.stream].last_was_new = segment == kProbation;
  }
  bursts_[hints.context.stream].last_id = id;
  Rebalance();
}

void PrefixPolicy::Touch(ObjectId id, const AccessContext& context) {
  uint64_t serial;
  ObjectId learned = Observe(context, /*write=*/false, &serial);
  auto it = entries_.find(id);
  if (it == entries_.end()) return;
  Entry& e = it->second;
  Unlink(id, e);
  e.stamp = ++clock_;
  ObjectId parent = e.parent != kInvalidId ? e.parent : learned;
  Place(id, e, kProtected, parent, serial);
  bursts_[context.stream].last_id = id;
  Rebalance();
}

void PrefixPolicy::SetParent(ObjectId id, ObjectId parent) {
  auto it = entries_.find(id);
  if (it == entries_.end() || parent == id || it->second.parent == parent) return;
  Entry& e = it->second;
  e.parent = parent;
  // Given right after the publish (the usual case), the link reorders the chain as if it had
  // been given with the publish: the child goes right before its parent.
  auto p = entries_.find(parent);
  if (e.pinned || p == entries_.end() || p->second.pinned) return;
  if (Rank(p->second.segment) > Rank(e.segment)) return;  // never behind a later-evicted parent
  Unlink(id, e);
  e.segment = p->second.segment;
  segments_[e.segment].InsertBefore(id, parent);
  segment_bytes_[e.segment] += e.bytes;
}

void PrefixPolicy::Remove(ObjectId id) {
  pinned_untracked_.erase(id);
  if (ghosts_.Erase(id)) reread_ghosts_.erase(id);
  auto it = entries_.find(id);
  if (it == entries_.end()) return;
  Unlink(id, it->second);
  bytes_ -= it->second.bytes;
  entries_.erase(it);
}

void PrefixPolicy::SetPinned(ObjectId id, bool pinned) {
  auto it = entries_.find(id);
  if (it == entries_.end()) {
    if (pinned)
      pinned_untracked_.insert(id);
    else
      pinned_untracked_.erase(id);
    return;
  }
  Entry& e = it->second;
  if (e.pinned == pinned) return;
  if (pinned) {
    Unlink(id, e);
    e.pinned = true;
  } else {
    e.pinned = false;
    Place(id, e, e.segment, kInvalidId, e.burst);
  }
}

std::optional<ObjectId> PrefixPolicy::PickVictim() const {
  if (auto tail = segments_[kTail].Front()) return tail;
  // Probation and demoted: whichever front was used longer ago.
  auto fresh = segments_[kProbation].Front();
  auto demoted = segments_[kDemoted].Front();
  if (fresh && demoted) {
    return entries_.at(*fresh).stamp <= entries_.at(*demoted).stamp ? fresh : demoted;
  }
  if (fresh) return fresh;
  if (demoted) return demoted;
  return segments_[kProtected].Front();
}

void PrefixPolicy::RememberGhost(ObjectId id, bool reread) {
  ghosts_.PushBack(id);
  if (reread) reread_ghosts_.insert(id);
  while (ghosts_.size() > std::max<size_t>(entries_.size(), 1)) {
    reread_ghosts_.erase(*ghosts_.PopFront());
  }
}

uint64_t PrefixPolicy::EvictOne(ObjectId victim) {
  auto it = entries_.find(victim);
  if (it == entries_.end()) return 0;
  uint64_t bytes = it->second.bytes;
  const bool reread = it->second.reread;
  Remove(victim);
  RememberGhost(victim, reread);
  return bytes;
}

std::optional<PrefixPolicy::Segment> PrefixPolicy::SegmentOf(ObjectId id) const {
  auto it = entries_.find(id);
  if (it == entries_.end() || it->second.pinned) return std::nullopt;
  return it->second.segment;
}

ObjectId PrefixPolicy::ParentOf(ObjectId id) const {
  auto it = entries_.find(id);
  return it == entries_.end() ? kInvalidId : it->second.parent;
}

std::string PrefixPolicy::Persist() const {
  // The adapted share and clock; each segment in list order, then pinned entries, pins of
  // untracked ids and ghosts (with whether they had been re-read, which steers the adaptation).
  BlobWriter w;
  w.F64(protected_fraction_);
  w.U64(clock_);
  auto put = [&w](ObjectId id, const Entry& e) {
    w.U64(id);
    w.U64(e.bytes);
    w.U64(e.parent);
    w.U8(e.segment);
    w.U64(e.stamp);
    w.U8(e.reread ? 1 : 0);
  };
  for (const RecencyList& list : segments_) {
    w.U64(list.size());
    for (ObjectId id : list) put(id, entries_.at(id));
  }
  uint64_t pinned = 0;
  for (const auto& [id, e] : entries_) pinned += e.pinned;
  w.U64(pinned);
  for (const auto& [id, e] : entries_) {
    if (e.pinned) put(id, e);
  }
  w.U64(pinned_untracked_.size());
  for (ObjectId id : pinned_untracked_) w.U64(id);
  w.U64(ghosts_.size());
  for (ObjectId id : ghosts_) {
    w.U64(id);
    w.U8(reread_ghosts_.count(id) ? 1 : 0);
  }
  return SealPolicyBlob(name(), w.bytes());
}

Status PrefixPolicy::Recover(std::string_view blob) {
  KVFS_ASSIGN_OR_RETURN(std::string_view payload, OpenPolicyBlob(blob, name()));
  BlobReader r(payload);
  PrefixPolicy fresh(options_);
  if (!r.F64(&fresh.protected_fraction_) || !r.U64(&fresh.clock_) ||
      !(fresh.protected_fraction_ >= 0.0 && fresh.protected_fraction_ <= 1.0)) {
    return Status::Corruption("prefix blob header");
  }
  constexpr int kLists = kProtected + 1;
  for (int group = 0; group <= kLists; ++group) {  // the segment lists, then pinned entries
    uint64_t n;
    if (!r.U64(&n)) return Status::Corruption("prefix blob truncated");
    for (uint64_t i = 0; i < n; ++i) {
      uint64_t id, parent;
      Entry e;
      uint8_t segment, reread;
      if (!r.U64(&id) || !r.U64(&e.bytes) || !r.U64(&parent) || !r.U8(&segment) ||
          !r.U64(&e.stamp) || !r.U8(&reread) || segment > kProtected || reread > 1 ||
          (group < kLists && segment != group)) {
        return Status::Corruption("prefix blob entry");
      }
      if (id == kInvalidId || fresh.entries_.count(id)) return Status::Corruption("prefix id");
      e.parent = parent;
      e.segment = static_cast<Segment>(segment);
      e.reread = reread != 0;
      e.pinned = group == kLists;
      fresh.bytes_ += e.bytes;
      fresh.entries_[id] = e;
      if (!e.pinned) {
        fresh.segments_[segment].PushBack(id);
        fresh.segment_bytes_[segment] += e.bytes;
      }
    }
  }
  uint64_t n;
  if (!r.U64(&n)) return Status::Corruption("prefix blob truncated");
  for (uint64_t i = 0; i < n; ++i) {
    uint64_t id;
    if (!r.U64(&id)) return Status::Corruption("prefix blob truncated");
    fresh.pinned_untracked_.insert(id);
  }
  if (!r.U64(&n)) return Status::Corruption("prefix blob truncated");
  for (uint64_t i = 0; i < n; ++i) {
    uint64_t id;
    uint8_t reread;
    if (!r.U64(&id) || !r.U8(&reread) || reread > 1) return Status::Corruption("prefix ghost");
    if (fresh.ghosts_.Contains(id)) continue;
    fresh.ghosts_.PushBack(id);
    if (reread) fresh.reread_ghosts_.insert(id);
  }
  if (!r.done()) return Status::Corruption("trailing bytes in prefix blob");
  segments_ = std::move(fresh.segments_);
  segment_bytes_ = fresh.segment_bytes_;
  entries_ = std::move(fresh.entries_);
  pinned_untracked_ = std::move(fresh.pinned_untracked_);
  ghosts_ = std::move(fresh.ghosts_);
  reread_ghosts_ = std::move(fresh.reread_ghosts_);
  protected_fraction_ = fresh.protected_fraction_;
  clock_ = fresh.clock_;
  bursts_.clear();
  bytes_ = fresh.bytes_;
  return Status::Ok();
}

}  // namespace kvfs::eviction
