// ScanRecords: every namespace record in etcd at one revision, read in windows of the id
// space that each hold about one page of keys.
//
// Why windows and not one range paged by its last key: etcd 3.4 collects every key of
// [key, range_end) from its index before it applies a range's limit (and counts them all), so
// paging through one range costs O(keys left) per page, quadratic in the namespace (a late
// joiner over 200,000 records took 6.4 s to load at 1,000 a page on the 2-core CI machine,
// 3.2-3.4 s in windows). A window [id, id + width) costs what it holds. Record keys end in the
// object id as 16 hex digits, so key order is id order; ids carry their node in the high 16
// bits (namespace_keys.h), which leaves wide empty stretches between nodes that the window
// crosses by growing. Reading runs a page or two ahead of decoding on a thread of its own.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>

#include "kvfs/etcd.h"
#include "kvfs/object.h"
#include "kvfs/status.h"
#include "namespace_keys.h"

namespace kvfs::cluster {

struct ScanStats {
  uint64_t records = 0;   // handed to the callback
  uint64_t skipped = 0;   // values that did not decode (logged, never a file)
  uint64_t requests = 0;  // range reads made
};

// Hands each decoded record to `fn` (in key order, each once) and returns the revision read
// at. `page` (>= 1) is the most keys one range read returns.
Result<int64_t> ScanRecords(etcd::Client* etcd, const NamespaceKeys& keys, size_t page,
                            const std::function<void(ObjectRecord&&)>& fn,
                            ScanStats* stats = nullptr);

}  // namespace kvfs::cluster
