// RecentPublishes: which cluster layout each local layout this node published a moment ago
// became. The fs swaps in the cluster layout as soon as the publish's commit returns, but a
// batch it built before that (a chmod racing the close) still carries the local layout, and
// must mean that published version, not a new one (cluster_store_io.cc, Submit).
//
// Entries live for a fixed window, trimmed oldest first on each Add: the node's held copy keeps
// every published local layout alive, so "drop once the local layout is gone" would keep one
// entry per held chunk forever (and scanning for the dead ones cost O(held chunks) per publish).
// Not thread-safe: the cluster store calls it under its lock.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <unordered_map>

#include "kvfs/object.h"

namespace kvfs::cluster {

class RecentPublishes {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr std::chrono::seconds kDefaultWindow{60};

  explicit RecentPublishes(Clock::duration window = kDefaultWindow) : window_(window) {}

  // `local` was published as `cluster` at `now`; entries older than the window go.
  void Add(const LayoutRef& local, LayoutRef cluster, Clock::time_point now = Clock::now());
  // The cluster layout `local` (this very layout, not a later one at its address) became, or
  // null when it was not published within the window.
  LayoutRef Find(const LayoutRef& local) const;
  size_t size() const { return entries_.size(); }

 private:
  struct Entry {
    std::weak_ptr<const Layout> local;
    LayoutRef cluster;
    uint64_t seq = 0;
  };
  struct Added {
    Clock::time_point at;
    const Layout* local;
    uint64_t seq;  // an address reused by a later layout has a newer entry this does not match
  };
  Clock::duration window_;
  std::unordered_map<const Layout*, Entry> entries_;
  std::deque<Added> order_;
  uint64_t seq_ = 0;
};

}  // namespace kvfs::cluster
