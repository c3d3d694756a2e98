// LruPolicy (the default): evicts the id whose last publish or read hit is oldest.
#pragma once

#include "list_policy.h"

namespace kvfs::eviction {

class LruPolicy final : public ListPolicy {
 public:
  LruPolicy() : ListPolicy(/*touch_moves=*/true) {}
  std::string_view name() const override { return "lru"; }
};

}  // namespace kvfs::eviction
