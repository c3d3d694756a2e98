#include "index.h"

namespace kvfs {

void Index::Account(const ObjectRecord& rec, int sign) {
  if (rec.type != ObjectType::kFile) return;
  uint64_t stored = 0;
  if (rec.layout) {
    for (const Segment& seg : rec.layout->segments) stored += seg.stored_len;
  }
  if (sign > 0) {
    stored_bytes_ += stored;
  } else {
    stored_bytes_ -= stored;
  }
  if (sign > 0) {
    ++files_;
    logical_bytes_ += rec.size();
  } else {
    --files_;
    logical_bytes_ -= rec.size();
  }
}

void Index::Put(ObjectRecord rec, std::vector<LayoutRef>* dropped) {
  auto it = records_.find(rec.id);
  if (it != records_.end()) {
    Account(it->second, -1);
    if (it->second.layout && it->second.layout != rec.layout) {
      dropped->push_back(std::move(it->second.layout));
    }
    Account(rec, +1);
    it->second = std::move(rec);
    return;
  }
  Account(rec, +1);
  const ObjectId id = rec.id;
  records_.emplace(id, std::move(rec));
}

void Index::Apply(const MetaBatch& batch, std::vector<LayoutRef>* dropped) {
  for (ObjectId id : batch.removes) {
    auto it = records_.find(id);
    if (it == records_.end()) continue;
    Account(it->second, -1);
    if (it->second.layout) dropped->push_back(std::move(it->second.layout));
    records_.erase(it);
  }
  for (const ObjectRecord& rec : batch.puts) Put(rec, dropped);
}

std::vector<ObjectRecord> Index::Snapshot() const {
  std::vector<ObjectRecord> out;
  out.reserve(records_.size());
  for (const auto& [id, rec] : records_) out.push_back(rec);
  return out;
}

void Index::Clear(std::vector<LayoutRef>* dropped) {
  for (auto& [id, rec] : records_) {
    if (rec.layout) dropped->push_back(std::move(rec.layout));
  }
  records_.clear();
  files_ = 0;
  logical_bytes_ = 0;
  stored_bytes_ = 0;
}

ObjectId Index::FindByLayout(const Layout* layout) const {
  if (!layout) return kInvalidId;
  for (const auto& [id, rec] : records_) {
    if (rec.layout.get() == layout) return id;
  }
  return kInvalidId;
}

}  // namespace kvfs
