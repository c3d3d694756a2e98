// The two operations the fs's open-addressing tables (Directory's name index, InodeTable)
// share. Tables are vectors of slots, power-of-two sized, probed linearly; `empty(slot)` says a
// slot is free and `home(slot)` gives the hash its probe starts from (masked here).
#pragma once

#include <cstddef>
#include <vector>

namespace kvfs::fs {

// Puts `slot` in the first free slot from its home on. The table must have a free slot.
template <typename Slot, typename Empty, typename Home>
void PlaceSlot(std::vector<Slot>& slots, Slot slot, Empty empty, Home home) {
  const size_t mask = slots.size() - 1;
  size_t i = home(slot) & mask;
  while (!empty(slots[i])) i = (i + 1) & mask;
  slots[i] = slot;
}

// Frees slots[hole] without tombstones (Knuth 6.4, algorithm R): each later slot of the same
// run whose home is not cyclically in (hole, j] moves back into the hole, so every probe still
// finds what it looks for before the first free slot.
template <typename Slot, typename Empty, typename Home>
void EraseSlot(std::vector<Slot>& slots, size_t hole, Empty empty, Home home) {
  const size_t mask = slots.size() - 1;
  for (size_t j = (hole + 1) & mask; !empty(slots[j]); j = (j + 1) & mask) {
    const size_t h = home(slots[j]) & mask;
    const bool stays = hole <= j ? (hole < h && h <= j) : (hole < h || h <= j);
    if (stays) continue;
    slots[hole] = slots[j];
    hole = j;
  }
  slots[hole] = Slot{};
}

}  // namespace kvfs::fs
