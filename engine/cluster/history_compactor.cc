#include "history_compactor.h"

#include <algorithm>

namespace kvfs::cluster {

HistoryCompactor::HistoryCompactor(std::chrono::seconds retention)
    : retention_(retention),
      gap_(std::max<Clock::duration>(std::chrono::seconds(1), retention_ / 10)) {}

int64_t HistoryCompactor::Due(Clock::time_point now, int64_t revision) {
  if (retention_.count() <= 0) return 0;
  if (samples_.empty() || revision > samples_.back().second) samples_.emplace_back(now, revision);
  // The newest sample old enough; the ones before it are of no more use.
  while (samples_.size() >= 2 && now - samples_[1].first >= retention_) samples_.pop_front();
  if (samples_.empty() || now - samples_.front().first < retention_) return 0;
  const int64_t target = samples_.front().second;
  if (target <= compacted_ || (last_ != Clock::time_point{} && now - last_ < gap_)) return 0;
  return target;
}

void HistoryCompactor::Done(Clock::time_point now, int64_t revision) {
  compacted_ = std::max(compacted_, revision);
  last_ = now;
}

}  // namespace kvfs::cluster
