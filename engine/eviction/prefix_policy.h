// PrefixPolicy: eviction for KV-cache chunks, where a chunk is only useful while every chunk of
// its prefix is present (connectors stop at the first miss). See docs/eviction.md for the data
// behind each rule. Segments, evicted in this order:
//
//   tail       a request's last chunk (partial, or learned: the last chunk a stream wrote before
//              its next burst began). On the Mooncake trace <1% of these are ever read again:
//              the next turn rewrites the partial block with more tokens under a new name.
//   probation  chunks written and never re-read since (76% of chunks are never reused), and
//   demoted    re-read chunks pushed out of protected: these two are merged by recency (the
//              older last access goes first), so outside the protected share it is plain LRU.
//   protected  chunks that were re-read or republished, or whose id was evicted recently (a
//              ghost hit: evicting it was a mistake), up to the protected share of the tracked
//              bytes; the least recent overflow is demoted.
//
// The protected share adapts like ARC's target: an evicted never-re-read chunk that is written
// again (a probation ghost hit) says protection cost a hit, so the share shrinks; an evicted
// re-read chunk that comes back says the share was too small, so it grows. Each step is the
// chunk's share of the tracked bytes scaled by the ratio of the two ghost sets, as in ARC. With
// a share of 0 the policy is LRU with tails first; with 1 it is "never-reused first".
//
// Inside a segment, order is recency, but a chunk placed in the same burst as its chain parent
// goes right *before* the parent: a chain is evicted tail first, and its head (a shared system
// prompt, re-read by every request that extends it) stays as long as any child is hot. Chains
// come from the explicit parent link (xattr user.kvfs.parent) when the writer gives one, else
// from access order: consecutive accesses by one stream within a short window form a burst, and
// the previous chunk of the burst is the parent. Without positions (a mount sees none), a read
// that follows a write of the same stream starts a new burst: a connector reads a request's
// cached prefix first and writes the rest after the first miss.
#pragma once

#include <array>
#include <unordered_map>
#include <unordered_set>

#include "eviction_policy.h"
#include "recency_list.h"

namespace kvfs::eviction {

class PrefixPolicy final : public EvictionPolicy {
 public:
  // In eviction order (kProbation and kDemoted merged by recency).
  enum Segment : uint8_t { kTail = 0, kProbation = 1, kDemoted = 2, kProtected = 3 };

  explicit PrefixPolicy(const PolicyOptions& options = {});
  std::string_view name() const override { return "prefix"; }
  void Track(ObjectId id, uint64_t bytes, const TrackHints& hints) override;
  void Touch(ObjectId id, const AccessContext& context) override;
  void Remove(ObjectId id) override;
  void SetPinned(ObjectId id, bool pinned) override;
  void SetParent(ObjectId id, ObjectId parent) override;
  std::optional<ObjectId> PickVictim() const override;
  size_t size() const override { return entries_.size(); }
  uint64_t tracked_bytes() const override { return bytes_; }
  std::string Persist() const override;
  Status Recover(std::string_view blob) override;

  // Where an id sits now (tests, kvfsctl); nullopt for unknown or pinned ids.
  std::optional<Segment> SegmentOf(ObjectId id) const;
  ObjectId ParentOf(ObjectId id) const;
  double protected_fraction() const { return protected_fraction_; }

 protected:
  uint64_t EvictOne(ObjectId victim) override;

 private:
  struct Entry {
    uint64_t bytes = 0;
    ObjectId parent = kInvalidId;
    uint64_t burst = 0;  // serial of the burst that last placed it
    uint64_t stamp = 0;  // logical time of the last write or read (recency across segments)
    Segment segment = kProbation;
    bool pinned = false;
    bool reread = false;  // was ever re-read or republished (it reached protected)
  };
  struct Burst {
    uint64_t serial = 0;
    uint64_t last_time_ms = 0;
    uint32_t last_position = 0;
    ObjectId last_id = kInvalidId;
    bool last_was_new = false;    // last_id was first written in this burst
    bool last_was_write = false;  // the stream's last access was a Track
  };

  // Advances the stream's burst state; returns the chain parent learned from access order.
  ObjectId Observe(const AccessContext& context, bool write, uint64_t* serial);
  void Place(ObjectId id, Entry& e, Segment segment, ObjectId parent_hint, uint64_t serial);
  void Unlink(ObjectId id, Entry& e);
  void Rebalance();
  void RememberGhost(ObjectId id, bool reread);
  // A ghost came back: moves the protected share (ARC's adaptation).
  void Adapt(bool reread, uint64_t bytes);
  static int Rank(Segment s) { return s == kDemoted ? kProbation : s; }  // for chain placement

  PolicyOptions options_;
  std::array<RecencyList, 4> segments_;
  std::array<uint64_t, 4> segment_bytes_{};
  std::unordered_map<ObjectId, Entry> entries_;
  std::unordered_set<ObjectId> pinned_untracked_;
  RecencyList ghosts_;  // recently evicted ids, oldest first; at most size() of them
  std::unordered_set<ObjectId> reread_ghosts_;  // the ghosts that had been re-read
  double protected_fraction_;  // adapted by ghost hits, starts at the option's value
  std::unordered_map<uint64_t, Burst> bursts_;  // per stream; transient, not persisted
  uint64_t next_burst_ = 0;
  uint64_t clock_ = 0;
  uint64_t bytes_ = 0;
};

}  // namespace kvfs::eviction
