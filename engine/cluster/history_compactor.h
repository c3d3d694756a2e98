// HistoryCompactor: when to compact etcd's history of the namespace, so etcd's database does
// not grow without bound.
//
// Every change kvfs makes is a new etcd revision, and etcd keeps every old version of every key
// until somebody compacts. A cache publishes and evicts forever: without compaction etcd's
// database grew by about 830 bytes per publish (measured: 4,000 publishes over 200 names, 3.3
// MB) until its quota (2 GiB by default) raises the NOSPACE alarm and etcd refuses every write,
// which leaves the whole cluster's namespace read-only. So one node, the live node with the
// lowest id, compacts to the revision etcd had `retention` ago, at most every retention / 10
// (and at most once a second). History younger than that stays for the watches: a node frozen or
// cut off for less catches up from it; one behind the compacted revision re-reads the namespace
// (docs/cluster.md). Pure bookkeeping: the cluster store samples and calls etcd.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <utility>

namespace kvfs::cluster {

class HistoryCompactor {
 public:
  using Clock = std::chrono::steady_clock;

  // retention 0: never compact (the operator's etcd does, --auto-compaction-retention).
  explicit HistoryCompactor(std::chrono::seconds retention);

  // Records that etcd was at `revision` (or past it) at `now`; returns the revision to compact
  // to now, or 0: the newest recorded at least `retention` ago, when it is past the last
  // compaction and the last compaction is at least the gap ago.
  int64_t Due(Clock::time_point now, int64_t revision);
  // Etcd's history is compacted to `revision` (by this node, or etcd said another did).
  void Done(Clock::time_point now, int64_t revision);
  int64_t compacted() const { return compacted_; }

 private:
  const Clock::duration retention_;
  const Clock::duration gap_;
  std::deque<std::pair<Clock::time_point, int64_t>> samples_;  // oldest first
  int64_t compacted_ = 0;
  Clock::time_point last_{};
};

}  // namespace kvfs::cluster
