#include "directory.h"

#include <xxhash.h>

#include <algorithm>
#include <random>

#include "linear_probe.h"

namespace kvfs::fs {
namespace {

constexpr size_t kMinCapacity = 8;
// Dead entries are compacted away once there are more of them than live ones (and a few).
constexpr size_t kMinDeadToCompact = 32;

// For linear_probe.h: an index slot is free at position 0; its probe starts at its hash.
bool Free(const auto& slot) { return slot.pos == 0; }
uint32_t HomeOf(const auto& slot) { return slot.hash; }

}  // namespace

bool Directory::NameArena::Add(std::string_view name, Entry* e) {
  if (name.size() > kMaxName) return false;
  const size_t need = name.size() + 1;
  if (chunks_.empty() || used_ + need > ChunkSize(chunks_.size() - 1)) {
    chunks_.push_back(std::make_unique<char[]>(ChunkSize(chunks_.size())));
    used_ = 0;
  }
  char* at = chunks_.back().get() + used_;
  std::copy(name.begin(), name.end(), at);
  at[name.size()] = '\0';
  e->chunk = static_cast<uint32_t>(chunks_.size() - 1);
  e->offset = static_cast<uint16_t>(used_);
  e->len = static_cast<uint8_t>(name.size());
  used_ += need;
  return true;
}

void Directory::NameArena::DropLast(const Entry& e) {
  if (e.chunk + 1 == chunks_.size() && e.offset + e.len + 1u == used_) used_ = e.offset;
}

uint32_t Directory::Hash(std::string_view name) {
  // Seeded per process: names come from users, who must not be able to pick names that all
  // land in one run of the index.
  static const uint64_t seed = [] {
    std::random_device rd;
    return (uint64_t{rd()} << 32) ^ rd();
  }();
  return static_cast<uint32_t>(XXH3_64bits_withSeed(name.data(), name.size(), seed));
}

size_t Directory::Probe(std::string_view name, uint32_t hash) const {
  const size_t mask = index_.size() - 1;
  for (size_t i = hash & mask;; i = (i + 1) & mask) {
    const Slot& s = index_[i];
    if (s.pos == 0) return i;
    if (s.hash == hash && NameOf(entries_[s.pos - 1]) == name) return i;
  }
}

uint64_t Directory::Find(std::string_view name) const {
  if (index_.empty()) return 0;
  const Slot& s = index_[Probe(name, Hash(name))];
  return s.pos == 0 ? 0 : entries_[s.pos - 1].ino;
}

uint64_t Directory::CookieOf(std::string_view name, uint64_t ino) const {
  if (index_.empty() || ino == 0) return 0;
  const Slot& s = index_[Probe(name, Hash(name))];
  if (s.pos == 0) return 0;
  const Entry& e = entries_[s.pos - 1];
  return e.ino == ino ? e.cookie : 0;
}

std::string_view Directory::NameAt(uint64_t cookie) const {
  auto it = std::lower_bound(entries_.begin(), entries_.end(), cookie,
                             [](const Entry& e, uint64_t c) { return e.cookie < c; });
  if (it == entries_.end() || it->cookie != cookie || it->ino == 0) return {};
  return NameOf(*it);
}

void Directory::Place(Slot slot) { PlaceSlot(index_, slot, Free<Slot>, HomeOf<Slot>); }

void Directory::Resize(size_t capacity) {
  std::vector<Slot> old(capacity, Slot{});
  old.swap(index_);
  for (const Slot& s : old)
    if (s.pos != 0) Place(s);
}

bool Directory::Link(std::string_view name, uint64_t ino, bool is_dir) {
  if (ino == 0) return false;
  // Positions are 32-bit: compact first when dead entries fill the space (never in practice).
  if (entries_.size() >= UINT32_MAX - 1) Compact();
  if (entries_.size() >= UINT32_MAX - 1) return false;
  if ((live_ + 1) * 10 > index_.size() * 7) Resize(std::max(kMinCapacity, index_.size() * 2));
  const uint32_t hash = Hash(name);
  if (index_[Probe(name, hash)].pos != 0) return false;
  Entry e;
  if (!names_.Add(name, &e)) return false;
  e.cookie = next_cookie_++;
  e.ino = ino;
  e.is_dir = is_dir;
  entries_.push_back(e);
  Place({static_cast<uint32_t>(entries_.size()), hash});
  ++live_;
  if (is_dir) ++subdirs_;
  return true;
}

bool Directory::Unlink(std::string_view name) {
  if (index_.empty()) return false;
  const size_t slot = Probe(name, Hash(name));
  if (index_[slot].pos == 0) return false;
  Entry& e = entries_[index_[slot].pos - 1];
  EraseSlot(index_, slot, Free<Slot>, HomeOf<Slot>);
  if (e.is_dir) --subdirs_;
  --live_;
  if (&e == &entries_.back()) {
    names_.DropLast(e);  // the newest entry (a temp name renamed away): nothing to compact
    entries_.pop_back();
  } else {
    e.ino = 0;
  }
  const size_t dead = entries_.size() - live_;
  if (dead > kMinDeadToCompact && dead > live_) Compact();
  return true;
}

void Directory::Compact() {
  // Live entries move down in order (cookies kept), their names into a fresh arena, and the
  // index follows their new positions.
  NameArena names;
  std::vector<uint32_t> moved_to(entries_.size() + 1, 0);  // by 1-based position
  size_t out = 0;
  for (size_t p = 0; p < entries_.size(); ++p) {
    Entry e = entries_[p];
    if (e.ino == 0) continue;
    names.Add(NameOf(e), &e);  // fits: it was added once
    entries_[out++] = e;
    moved_to[p + 1] = static_cast<uint32_t>(out);
  }
  for (Slot& s : index_) s.pos = moved_to[s.pos];  // a free slot stays 0
  entries_.resize(out);
  entries_.shrink_to_fit();
  names_ = std::move(names);
  if (live_ == 0) {
    std::vector<Slot>().swap(index_);
    return;
  }
  size_t capacity = kMinCapacity;
  while (live_ * 10 > capacity * 7) capacity *= 2;
  Resize(capacity);
}

void Directory::ForEachAfter(uint64_t offset, const std::function<bool(const Item&)>& fn) const {
  auto it = std::upper_bound(entries_.begin(), entries_.end(), offset,
                             [](uint64_t c, const Entry& e) { return c < e.cookie; });
  for (; it != entries_.end(); ++it) {
    if (it->ino == 0) continue;
    if (!fn(Item{it->cookie, it->ino, NameOf(*it), it->is_dir})) return;
  }
}

}  // namespace kvfs::fs
