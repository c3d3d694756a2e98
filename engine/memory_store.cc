#include "memory_store.h"

#include <xxhash.h>

#include <algorithm>
#include <cstring>

namespace kvfs {
namespace {

// The in-memory store (tests, --store memory) keeps every byte, holes included: files are
// capped rather than allowed to exhaust memory.
constexpr uint64_t kMaxMemoryFile = 4ull << 30;

// The deleter's type is what tells a MemoryLayout apart from other stores' layouts (Layout has
// no vtable to dynamic_cast on).
struct MemoryLayoutDeleter {
  void operator()(const MemoryLayout* l) const { delete l; }
};

const MemoryLayout* AsMemoryLayout(const LayoutRef& layout) {
  if (!layout || std::get_deleter<MemoryLayoutDeleter>(layout) == nullptr) return nullptr;
  return static_cast<const MemoryLayout*>(layout.get());
}

class MemoryWriter : public ChunkWriter {
 public:
  explicit MemoryWriter(const LayoutRef& base) {
    if (const MemoryLayout* b = AsMemoryLayout(base)) data_ = b->data;
  }
  Status Write(uint64_t offset, const void* data, size_t len) override {
    if (offset + len > kMaxMemoryFile || offset + len < offset) return TooBig();
    if (offset + len > data_.size()) data_.resize(offset + len, '\0');
    std::memcpy(data_.data() + offset, data, len);
    dirty_ = true;
    return Status::Ok();
  }
  Result<size_t> Read(uint64_t offset, void* out, size_t len) override {
    if (offset >= data_.size()) return size_t{0};
    size_t n = std::min<uint64_t>(len, data_.size() - offset);
    std::memcpy(out, data_.data() + offset, n);
    return n;
  }
  Status Truncate(uint64_t size) override {
    if (size > kMaxMemoryFile) return TooBig();
    data_.resize(size, '\0');
    dirty_ = true;
    return Status::Ok();
  }
  uint64_t size() const override { return data_.size(); }
  bool dirty() const override { return dirty_; }
  static Status TooBig() {
    return Status::Error(EFBIG, "the memory store keeps files up to 4 GiB");
  }
  Result<LayoutRef> Finish() override {
    auto* layout = new MemoryLayout;
    layout->size = data_.size();
    layout->data = data_;
    dirty_ = false;
    return LayoutRef(layout, MemoryLayoutDeleter{});
  }

 private:
  std::string data_;
  bool dirty_ = false;
};

// Views straight into the layout's bytes, which never change once published.
class MemoryReader : public ChunkReader {
 public:
  explicit MemoryReader(LayoutRef layout) : layout_(std::move(layout)) {}
  Result<ReadView> Read(uint64_t offset, size_t len) override {
    ReadView view;
    const auto& data = static_cast<const MemoryLayout&>(*layout_).data;
    if (offset >= data.size() || len == 0) return view;
    view.size = static_cast<size_t>(std::min<uint64_t>(len, data.size() - offset));
    view.spans.push_back({const_cast<char*>(data.data() + offset), view.size});
    view.holds.push_back(layout_);
    return view;
  }

 private:
  const LayoutRef layout_;
};

}  // namespace

std::vector<ObjectRecord> MemoryStore::Records() const {
  std::lock_guard lock(mu_);
  std::vector<ObjectRecord> out;
  out.reserve(records_.size());
  for (const auto& [id, rec] : records_) out.push_back(rec);
  return out;
}

Status MemoryStore::Apply(const MetaBatch& batch) {
  std::lock_guard lock(mu_);
  for (ObjectId id : batch.removes) records_.erase(id);
  for (const ObjectRecord& rec : batch.puts) records_[rec.id] = rec;
  return Status::Ok();
}

Result<std::unique_ptr<ChunkWriter>> MemoryStore::NewWriter(LayoutRef base) {
  if (base && !AsMemoryLayout(base))
    return Status::Invalid("layout was not made by the memory store");
  return std::unique_ptr<ChunkWriter>(std::make_unique<MemoryWriter>(base));
}

Result<size_t> MemoryStore::Read(const LayoutRef& layout, uint64_t offset, void* out, size_t len) {
  if (!layout) return size_t{0};
  const MemoryLayout* ml = AsMemoryLayout(layout);
  if (!ml) return Status::Invalid("layout was not made by the memory store");
  const auto& data = ml->data;
  if (offset >= data.size()) return size_t{0};
  size_t n = std::min<uint64_t>(len, data.size() - offset);
  std::memcpy(out, data.data() + offset, n);
  return n;
}

Result<std::unique_ptr<ChunkReader>> MemoryStore::NewReader(LayoutRef layout) {
  if (!AsMemoryLayout(layout)) {
    return Status::Invalid("layout was not made by the memory store");
  }
  return std::unique_ptr<ChunkReader>(std::make_unique<MemoryReader>(std::move(layout)));
}

Result<uint64_t> MemoryStore::ContentChecksum(const LayoutRef& layout) const {
  if (!layout) return XXH3_64bits(nullptr, 0);
  const MemoryLayout* ml = AsMemoryLayout(layout);
  if (!ml) return Status::Invalid("layout was not made by the memory store");
  return XXH3_64bits(ml->data.data(), ml->data.size());
}

StoreStats MemoryStore::Stats() const {
  std::lock_guard lock(mu_);
  StoreStats s;
  s.objects = records_.size();
  for (const auto& [id, rec] : records_) {
    if (rec.type != ObjectType::kFile) continue;
    ++s.files;
    s.logical_bytes += rec.size();
  }
  s.used_bytes = s.logical_bytes;
  s.capacity_bytes = 1ull << 40;
  return s;
}

}  // namespace kvfs
