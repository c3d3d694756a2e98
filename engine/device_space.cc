#include "device_space.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <string>

namespace kvfs {

DeviceSpace::DeviceSpace(const std::vector<DeviceRange>& devices) : ranges_(devices) {
  for (const auto& d : devices) allocators_.emplace_back(d.begin, d.end);
}

Result<Extent> DeviceSpace::Allocate(uint16_t preferred, uint64_t bytes) {
  std::lock_guard lock(mu_);
  const size_t n = allocators_.size();
  Status last;
  // The preferred device first (striping), then the others by free space.
  std::vector<uint16_t> order;
  order.push_back(static_cast<uint16_t>(preferred % n));
  for (uint16_t d = 0; d < n; ++d) {
    if (d != order[0]) order.push_back(d);
  }
  std::sort(order.begin() + 1, order.end(), [&](uint16_t a, uint16_t b) {
    return allocators_[a].free_bytes() > allocators_[b].free_bytes();
  });
  for (uint16_t dev : order) {
    auto off = allocators_[dev].Allocate(bytes);
    if (off.ok()) {
      refs_[Key(dev, *off)] = 1;
      return Extent{dev, *off, (bytes + 4095) / 4096 * 4096};
    }
    last = off.status();
  }
  return Status::NoSpace("no space for a " + std::to_string(bytes) +
                         "-byte segment: " + last.message());
}

void DeviceSpace::AddRef(const Segment& seg) {
  if (seg.stored_len == 0) return;
  std::lock_guard lock(mu_);
  ++refs_[Key(seg.device, seg.offset)];
}

void DeviceSpace::Release(const Segment& seg) {
  if (seg.stored_len == 0) return;
  std::lock_guard lock(mu_);
  auto it = refs_.find(Key(seg.device, seg.offset));
  if (it == refs_.end()) {
    spdlog::error("engine: release of an unknown extent (device {}, offset {})", seg.device,
                  seg.offset);
    return;
  }
  if (--it->second > 0) return;
  refs_.erase(it);
  if (seg.device < allocators_.size()) {
    Status st = allocators_[seg.device].Free(seg.offset, ExtentBytes(seg));
    if (!st.ok()) spdlog::error("engine: {}", st.ToString());
  }
}

Status DeviceSpace::CheckBounds(const Segment& seg) const {
  if (seg.stored_len == 0) return Status::Ok();
  if (seg.device >= allocators_.size() || seg.offset % 4096 != 0) {
    return Status::Invalid("segment names device " + std::to_string(seg.device) + " offset " +
                           std::to_string(seg.offset) + ", which does not exist");
  }
  const DeviceRange& r = ranges_[seg.device];
  if (seg.offset < r.begin || seg.offset + ExtentBytes(seg) > r.end) {
    return Status::Invalid("segment at device " + std::to_string(seg.device) + " offset " +
                           std::to_string(seg.offset) + " lies outside the device's data area");
  }
  return Status::Ok();
}

Status DeviceSpace::Claim(const Segment& seg) {
  if (seg.stored_len == 0) return Status::Ok();
  KVFS_RETURN_IF_ERROR(CheckBounds(seg));
  std::lock_guard lock(mu_);
  auto [it, inserted] = refs_.try_emplace(Key(seg.device, seg.offset), 0);
  if (inserted) {
    Status st = allocators_[seg.device].Reserve(seg.offset, ExtentBytes(seg));
    if (!st.ok()) {
      refs_.erase(it);
      return Status::Corruption("recovered segment overlaps another: " + st.message());
    }
  }
  ++it->second;
  return Status::Ok();
}

LayoutRef DeviceSpace::Adopt(std::unique_ptr<Layout> layout) {
  return LayoutRef(layout.release(), LayoutReleaser{weak_from_this()});
}

bool DeviceSpace::Owns(const LayoutRef& layout) const {
  const auto* d = std::get_deleter<LayoutReleaser>(layout);
  if (d == nullptr) return false;
  auto space = d->space.lock();
  return space.get() == this;
}

uint64_t DeviceSpace::capacity_bytes() const {
  std::lock_guard lock(mu_);
  uint64_t total = 0;
  for (const auto& a : allocators_) total += a.capacity_bytes();
  return total;
}

uint64_t DeviceSpace::used_bytes() const {
  std::lock_guard lock(mu_);
  uint64_t used = 0;
  for (const auto& a : allocators_) used += a.capacity_bytes() - a.free_bytes();
  return used;
}

uint64_t DeviceSpace::ExclusiveBytes(const Layout& layout) const {
  std::lock_guard lock(mu_);
  uint64_t bytes = 0;
  for (const Segment& seg : layout.segments) {
    if (seg.stored_len == 0) continue;
    auto it = refs_.find(Key(seg.device, seg.offset));
    if (it != refs_.end() && it->second == 1) bytes += ExtentBytes(seg);
  }
  return bytes;
}

uint64_t DeviceSpace::free_bytes(uint16_t device) const {
  std::lock_guard lock(mu_);
  return device < allocators_.size() ? allocators_[device].free_bytes() : 0;
}

void LayoutReleaser::operator()(const Layout* layout) const {
  if (auto s = space.lock()) {
    for (const Segment& seg : layout->segments) s->Release(seg);
  }
  delete layout;
}

}  // namespace kvfs
