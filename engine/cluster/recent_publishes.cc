#include "recent_publishes.h"

namespace kvfs::cluster {

void RecentPublishes::Add(const LayoutRef& local, LayoutRef cluster, Clock::time_point now) {
  const uint64_t seq = ++seq_;
  entries_[local.get()] = Entry{local, std::move(cluster), seq};
  order_.push_back(Added{now, local.get(), seq});
  while (!order_.empty() && now - order_.front().at > window_) {
    auto it = entries_.find(order_.front().local);
    if (it != entries_.end() && it->second.seq == order_.front().seq) entries_.erase(it);
    order_.pop_front();
  }
}

LayoutRef RecentPublishes::Find(const LayoutRef& local) const {
  auto it = entries_.find(local.get());
  if (it == entries_.end() || it->second.local.lock() != local) return nullptr;
  return it->second.cluster;
}

}  // namespace kvfs::cluster
