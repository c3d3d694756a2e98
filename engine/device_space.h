// DeviceSpace: the free space of all devices plus a reference count per allocated extent.
// Counts exist because layouts share extents: a new version made by copy-on-write reuses the
// unchanged segments of its base, so an extent is free only when the last layout naming it is
// gone. Layouts the engine hands out carry a LayoutReleaser deleter that drops their references.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "extent_allocator.h"
#include "kvfs/object.h"
#include "kvfs/status.h"

namespace kvfs {

struct Extent {
  uint16_t device = 0;
  uint64_t offset = 0;
  uint64_t bytes = 0;
};

class DeviceSpace : public std::enable_shared_from_this<DeviceSpace> {
 public:
  struct DeviceRange {
    uint64_t begin = 0, end = 0;
  };
  explicit DeviceSpace(const std::vector<DeviceRange>& devices);

  // An extent of `bytes` with one reference, on `preferred` or else the device with most room.
  Result<Extent> Allocate(uint16_t preferred, uint64_t bytes);
  // Reference counting by segment; segments without an extent (stored_len 0) are ignored.
  void AddRef(const Segment& seg);
  void Release(const Segment& seg);
  // Recovery: one more reference to a recovered segment's extent (reserved on its first).
  Status Claim(const Segment& seg);
  // Checks that a segment lies inside the data area of its device.
  Status CheckBounds(const Segment& seg) const;

  // A LayoutRef whose deleter releases the layout's segments into this space.
  LayoutRef Adopt(std::unique_ptr<Layout> layout);
  // True if `layout` came from Adopt() of this space.
  bool Owns(const LayoutRef& layout) const;

  uint64_t capacity_bytes() const;
  uint64_t used_bytes() const;
  // Bytes that would become free if `layout` were released now: its extents no other layout
  // shares (a copy-on-write version shares the unchanged segments of its base).
  uint64_t ExclusiveBytes(const Layout& layout) const;
  size_t device_count() const { return allocators_.size(); }
  uint64_t free_bytes(uint16_t device) const;

 private:
  static uint64_t Key(uint16_t device, uint64_t offset) {
    return (static_cast<uint64_t>(device) << 48) | (offset >> 12);
  }
  static uint64_t ExtentBytes(const Segment& seg) {
    return (seg.stored_len + 4095ull) / 4096 * 4096;
  }

  mutable std::mutex mu_;
  std::vector<DeviceRange> ranges_;
  std::vector<ExtentAllocator> allocators_;
  std::unordered_map<uint64_t, uint32_t> refs_;
};

// The deleter of every LayoutRef the engine makes. It holds the space weakly: a layout dropped
// after its engine closed (a reader that outlived it) is simply deleted.
struct LayoutReleaser {
  std::weak_ptr<DeviceSpace> space;
  void operator()(const Layout* layout) const;
};

}  // namespace kvfs
