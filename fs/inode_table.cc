#include "inode_table.h"

#include "linear_probe.h"
#include "namespace.h"

namespace kvfs::fs {

namespace {

// Inode numbers are a node id in the high bits and a counter: their bits are mixed
// (splitmix64's finalizer) so consecutive numbers do not fill one run of slots.
uint64_t Mix(uint64_t ino) {
  uint64_t x = ino;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}
bool Free(Inode* in) { return in == nullptr; }
uint64_t HomeOf(Inode* in) { return Mix(in->rec.id); }

}  // namespace

InodeTable::~InodeTable() {
  for (Inode* in : slots_) delete in;
}

size_t InodeTable::Probe(uint64_t ino) const {
  const size_t mask = slots_.size() - 1;
  for (size_t i = Mix(ino) & mask;; i = (i + 1) & mask) {
    if (slots_[i] == nullptr || slots_[i]->rec.id == ino) return i;
  }
}

Inode* InodeTable::Find(uint64_t ino) const {
  if (slots_.empty()) return nullptr;
  return slots_[Probe(ino)];
}

void InodeTable::Grow() {
  std::vector<Inode*> old;
  old.swap(slots_);
  slots_.assign(old.empty() ? 16 : old.size() * 2, nullptr);
  for (Inode* in : old)
    if (in) PlaceSlot(slots_, in, Free, HomeOf);
}

Inode* InodeTable::Put(std::unique_ptr<Inode> in) {
  if ((size_ + 1) * 10 > slots_.size() * 7) Grow();
  Inode*& slot = slots_[Probe(in->rec.id)];
  if (slot != nullptr) {
    delete slot;
  } else {
    ++size_;
  }
  slot = in.release();
  return slot;
}

void InodeTable::Erase(uint64_t ino) {
  if (slots_.empty()) return;
  const size_t slot = Probe(ino);
  if (slots_[slot] == nullptr) return;
  delete slots_[slot];
  --size_;
  EraseSlot(slots_, slot, Free, HomeOf);
}

void InodeTable::ForEach(const std::function<void(Inode*)>& fn) const {
  for (Inode* in : slots_)
    if (in) fn(in);
}

}  // namespace kvfs::fs
