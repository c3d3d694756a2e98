#include "inode_table.h"

#include "namespace.h"

namespace kvfs::fs {

InodeTable::~InodeTable() {
  for (Inode* in : slots_) delete in;
}

uint64_t InodeTable::Home(uint64_t ino, size_t mask) {
  // Inode numbers are a node id in the high bits and a counter: mix them (splitmix64's
  // finalizer) so consecutive numbers do not fill one run of slots.
  uint64_t x = ino;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  x ^= x >> 31;
  return x & mask;
}

size_t InodeTable::Probe(uint64_t ino) const {
  const size_t mask = slots_.size() - 1;
  for (size_t i = Home(ino, mask);; i = (i + 1) & mask) {
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
    if (in) slots_[Probe(in->rec.id)] = in;
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

// Linear-probing deletion without tombstones (Knuth 6.4, algorithm R): later slots of the same
// run whose home is not cyclically in (hole, j] move back into the hole.
void InodeTable::Erase(uint64_t ino) {
  if (slots_.empty()) return;
  size_t hole = Probe(ino);
  if (slots_[hole] == nullptr) return;
  delete slots_[hole];
  --size_;
  const size_t mask = slots_.size() - 1;
  for (size_t j = (hole + 1) & mask; slots_[j] != nullptr; j = (j + 1) & mask) {
    const size_t home = Home(slots_[j]->rec.id, mask);
    const bool stays = hole <= j ? (hole < home && home <= j) : (hole < home || home <= j);
    if (stays) continue;
    slots_[hole] = slots_[j];
    hole = j;
  }
  slots_[hole] = nullptr;
}

void InodeTable::ForEach(const std::function<void(Inode*)>& fn) const {
  for (Inode* in : slots_)
    if (in) fn(in);
}

}  // namespace kvfs::fs
