// FifoPolicy: evicts in publish order; read hits change nothing. Cheapest to run, and a baseline
// that shows how much recency is worth on a trace.
#pragma once

#include "list_policy.h"

namespace kvfs::eviction {

class FifoPolicy final : public ListPolicy {
 public:
  FifoPolicy() : ListPolicy(/*touch_moves=*/false) {}
  std::string_view name() const override { return "fifo"; }
};

}  // namespace kvfs::eviction
